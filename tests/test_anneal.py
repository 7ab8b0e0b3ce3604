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


@pytest.mark.parametrize("interrupt", ["KeyboardInterrupt", "Terminated"])
def test_an_interrupted_annealing_carries_its_best_placement_on_the_same_interrupt(interrupt):
    from baselines.anneal import unit_neighbours
    from baselines.interrupts import best_of
    from placement_env.cli import Terminated

    g, c = load_graph("synthetic/1"), Cluster.preset("p100", 3)
    start = g.unit_placement(place(g, c, "round-robin"))
    near, calls = nearest_units(g, 11), [0]
    kind = {"KeyboardInterrupt": KeyboardInterrupt, "Terminated": Terminated}[interrupt]

    def stopped_at_step_six(current, batch, rng):
        calls[0] += 1
        if calls[0] == 6:
            raise kind
        return unit_neighbours(current, near, c.num_devices, batch, rng)

    with pytest.raises(kind) as stop:
        anneal_units(g, c, start, time_budget=None, max_steps=50, proposals=stopped_at_step_six)
    assert type(stop.value) is kind  # the interrupt itself, so that SIGTERM still exits 143
    found = best_of(stop.value)
    assert found is not None
    placement, makespan, overflow = found
    assert simulate(g, placement, c).makespan == pytest.approx(makespan, rel=1e-12) and overflow == 0
    calls[0] = -10**9  # the same search, not stopped: its best after the five steps the stopped one finished
    whole = anneal_units(g, c, start, time_budget=None, max_steps=50, proposals=stopped_at_step_six)
    assert makespan == whole.history[5] < simulate(g, g.expand_unit_placement(start), c).makespan


def test_the_best_of_the_starts_goes_with_an_interrupt_during_a_later_search():
    from baselines.interrupts import best_of
    from baselines.placers import PLACERS
    from baselines.starts import best_of_starts

    g, c = load_graph("synthetic/1"), Cluster.preset("p100", 3)
    searched: list[float] = []

    def search(placement, seconds):
        if searched:
            raise KeyboardInterrupt
        result = anneal(g, c, placement, time_budget=None, max_steps=20)
        searched.append(result.makespan)
        return result

    with pytest.raises(KeyboardInterrupt) as stop:
        best_of_starts(g, c, 0, {name: PLACERS[name] for name in ("m-topo", "heft", "metis")}, 3, search, None)
    found = best_of(stop.value)
    assert found is not None
    placement, makespan, _ = found
    assert makespan == searched[0] == pytest.approx(simulate(g, placement, c).makespan, rel=1e-12)
