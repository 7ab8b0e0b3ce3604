"""The graphs that ship: the paper's suites (ptb, cifar10, nmt), six real CNNs, synthetic graphs, by name.

:mod:`.registry` resolves names (``default``, ``synthetic/<seed>``, ``<suite>/<seed>``, a model, a file);
:mod:`.suites` builds the suites from seeded PyTorch models; ``data/`` holds the shipped graph files.
"""

from placement_env.zoo.registry import DEFAULT_GRAPH, SUITES, list_graphs, load_graph, load_suite

__all__ = ["DEFAULT_GRAPH", "SUITES", "list_graphs", "load_graph", "load_suite"]
