"""Computation graphs: the model, its placement units, files, and the graphs built from others.

* :mod:`.model`: :class:`ComputationGraph`, :class:`Node`, :class:`Edge`;
* :mod:`.units`: placement units (colocation groups), the unit graph and its static features;
* :mod:`.io` and :mod:`.placement_io`: the JSON formats of graphs and placements;
* :mod:`.training`: a forward graph expanded into a training step (backward and update ops);
* :mod:`.synthetic`: seeded synthetic graphs; :mod:`.coarsen`: grouping ops; :mod:`.traversal`: unit orders.
"""

from placement_env.graph.coarsen import coarsen, coarsen_to_fit
from placement_env.graph.io import read_graph, write_graph
from placement_env.graph.model import ComputationGraph, Edge, Node
from placement_env.graph.placement_io import placement_from_json, read_placement, write_placement
from placement_env.graph.synthetic import layered_dag, two_chains
from placement_env.graph.training import to_training_graph
from placement_env.graph.units import UnitGraph, unit_graph

__all__ = ["ComputationGraph", "Edge", "Node", "UnitGraph", "coarsen", "coarsen_to_fit", "layered_dag",
           "placement_from_json", "read_graph", "read_placement", "to_training_graph", "two_chains", "unit_graph",
           "write_graph", "write_placement"]
