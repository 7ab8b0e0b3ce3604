"""Coarsening placement units."""

import networkx as nx
import numpy as np
import pytest
from helpers import graph as hand_graph

from placement_env import Cluster, layered_dag, simulate
from placement_env.graph.coarsen import coarsen, coarsen_to_fit
from placement_env.graph.units import unit_graph


def forward_quotient(g):
    q = nx.DiGraph()
    q.add_nodes_from(range(g.num_units))
    for s, d in zip(g.edge_src.tolist(), g.edge_dst.tolist()):
        if g.nodes[s].phase == "backward" or g.nodes[d].phase == "backward":
            continue
        if g.unit_of[s] != g.unit_of[d]:
            q.add_edge(int(g.unit_of[s]), int(g.unit_of[d]))
    return q


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("max_units", [1, 7, 40, 150])
def test_coarsening_reaches_the_target_and_keeps_everything_else(training, max_units):
    g = layered_dag(2, num_ops=200, training=training)
    c = coarsen(g, max_units)
    assert c.num_units <= max_units
    assert c.num_nodes == g.num_nodes and c.edges() == g.edges()
    assert c.total_cost == g.total_cost
    # original units are never split, and the quotient of the forward edges stays acyclic
    for members in g.unit_members:
        assert len(set(c.unit_of[members].tolist())) == 1
    assert nx.is_directed_acyclic_graph(forward_quotient(c))
    # a coarse placement expands to every op and simulates
    placement = c.expand_unit_placement(np.arange(c.num_units) % 3)
    assert simulate(c, placement, Cluster.preset("p100", 3)).makespan > 0


def test_hsdag_rule_merges_chains_first():
    # a -> b -> c chain plus d -> c: a merges into b (b's only predecessor), then b's unit has a single
    # successor c, but c has two predecessors, so with max_units=3 the chain a, b stays apart from c
    g = hand_graph([("a", 1, 0), ("b", 1, 0), ("c", 1, 0), ("d", 1, 0)], [("a", "b"), ("b", "c"), ("d", "c")])
    c = coarsen(g, 3)
    assert c.unit_of[0] == c.unit_of[1] and len(set(c.unit_of.tolist())) == 3


def test_coarsening_a_large_graph_quickly():
    g = layered_dag(1, num_ops=2500, density=0.02)  # 5,000 ops
    c = coarsen(g, 100)
    assert c.num_units <= 100


@pytest.mark.parametrize("max_units", [0, -3, True, 2.0, "4"])
def test_bad_target(max_units):
    with pytest.raises(ValueError, match=r"max_units must be an integer >= 1, got "):
        coarsen(layered_dag(0, num_ops=10), max_units)


def test_a_cluster_given_as_the_graph_is_named():
    with pytest.raises(TypeError, match="graph must be a ComputationGraph, got Cluster"):
        coarsen(Cluster.preset("p100", 3), 10)


def test_coarsen_to_fit_meets_both_limits_and_leaves_a_fitting_graph_alone():
    g = layered_dag(2, num_ops=200)  # 400 ops, 200 units
    units = unit_graph(g)
    assert coarsen_to_fit(g, units.num_units, units.num_edges) is g
    # 150 units would fit the unit limit, but not the edge limit: fewer units are needed
    c = coarsen_to_fit(g, 150, 60)
    cu = unit_graph(c)
    assert cu.num_units <= 150 and cu.num_edges <= 60
    assert unit_graph(coarsen(g, 150)).num_edges > 60
    assert c.edges() == g.edges() and [n.id for n in c.nodes] == [n.id for n in g.nodes]
    for members in g.unit_members:  # original groups are kept whole
        assert len(set(c.unit_of[members].tolist())) == 1
    one = coarsen_to_fit(g, 3, 1)  # two or three units would have more than one unit edge here
    assert unit_graph(one).num_units <= 3 and unit_graph(one).num_edges <= 1
    with pytest.raises(ValueError, match="max_unit_edges must be an integer >= 1, got 0"):
        coarsen_to_fit(g, 10, 0)
