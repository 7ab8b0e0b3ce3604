"""The annealing placer: deterministic by steps, never more memory overflow, canonical optima, budgets."""

import numpy as np
import pytest
from helpers import TickingClock, uniform_cluster

from baselines import AnnealConfig, PlacementInfeasibleError, anneal, place, placers_with_budget, unit_demand
from baselines.anneal import anneal_units, nearest_units
from placement_env import Cluster, layered_dag, load_graph, simulate, two_chains


def test_the_same_seed_and_steps_give_the_same_placement():
    g, c = load_graph("synthetic/1"), Cluster.preset("p100", 3)
    start = place(g, c, "heft")
    a = anneal(g, c, start, seed=3, time_budget=None, max_steps=40)
    b = anneal(g, c, start, seed=3, time_budget=None, max_steps=40)
    assert np.array_equal(a.placement, b.placement) and a.makespan == b.makespan and a.rounds == 40
    assert a.evaluations == 1 + 40 * AnnealConfig().batch
    assert a.makespan <= simulate(g, start, c).makespan  # the best seen: never worse than the start
    assert a.history == sorted(a.history, reverse=True)  # best so far after each step


@pytest.mark.parametrize("kind", ["heavy-light", "equal"])
def test_it_reaches_the_optimum_of_the_two_chains(kind):
    g, c, optimal = two_chains(kind, 8)
    best = simulate(g, optimal, c).makespan
    result = anneal(g, c, [0] * g.num_nodes, time_budget=None, max_steps=200)
    assert result.makespan == pytest.approx(best)


def test_a_start_within_memory_stays_within_memory():
    g = layered_dag(4, num_ops=60)
    c = uniform_cluster(3, memory=int(unit_demand(g).sum() * 0.45))
    start = place(g, c, "split")
    result = anneal(g, c, start, time_budget=None, max_steps=60)
    assert result.overflow == 0.0 and not simulate(g, result.placement, c).oom


def test_blocks_are_the_nearest_units_breadth_first():
    g = layered_dag(0, num_ops=30)
    near = nearest_units(g, 5)
    assert all(len(n) <= 5 and len(set(n.tolist())) == len(n) and u not in n for u, n in enumerate(near))


def test_the_search_budget_is_checked(monkeypatch):
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="a search budget must be positive and finite seconds"):
            placers_with_budget(bad)
    g, c = load_graph("default"), Cluster.preset("p100", 3)
    TickingClock(1e-4).install(monkeypatch)  # 0.2 s: 2,000 clock reads, on any machine
    placement = placers_with_budget(0.2)["anneal"](g, c, 0)
    assert simulate(g, placement, c).makespan <= simulate(g, place(g, c, "metis"), c).makespan  # its start


def test_no_time_and_no_steps_is_refused():
    g, c = load_graph("synthetic/1"), Cluster.preset("p100", 3)
    with pytest.raises(ValueError, match="needs a time budget or a number of steps"):
        anneal_units(g, c, np.zeros(g.num_units, dtype=np.int64), time_budget=None)
    with pytest.raises(PlacementInfeasibleError):
        place(g, uniform_cluster(2, memory=10), "anneal")
