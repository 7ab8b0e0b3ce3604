"""The search placers keep their wall-clock budgets: the clock that sizes their steps, the start placers they
run, the lazy nearest units of the annealing, and the notice and progress of ``python -m baselines``.

Times are a fake clock advanced by what each simulation is made to cost, so the budgets are checked exactly
and no test depends on the machine's speed (the measured seconds on real big graphs:
``benchmarks/search_budget.py``).
"""

import importlib
import time
from collections import deque

import numpy as np
import pytest
from helpers import graph

import baselines.__main__ as baselines_command
import baselines.starts as starts_module
from baselines import PlacementInfeasibleError, anneal, refine
from baselines.anneal import nearest_units
from baselines.placers import CONSTRUCTIVE, QUICK_STARTS, SEARCH_STARTS, search_placers
from baselines.search_clock import FIRST_STEP_FACTOR, PROBE_SHARE, SearchClock
from baselines.starts import ranked_starts
from placement_env import Cluster, layered_dag, load_graph, simulate

anneal_module = importlib.import_module("baselines.anneal")  # the package's `anneal` is the function
local_search_module = importlib.import_module("baselines.local_search")


class FakeClock:
    """``time.perf_counter`` that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(time, "perf_counter", fake)
    return fake


def test_the_clock_grants_what_fits_in_the_time_left(clock):
    c = SearchClock(10.0)
    assert c.step(64) == 64  # nothing measured yet: the whole batch
    clock.now += 2.0  # the step took 2 s for 64 evaluations
    assert c.step(64) == 64 and c.per_evaluation == pytest.approx(2.0 / 64)
    clock.now += 7.0  # slower: 7 s for 64; 1 s left fits 9 of them
    assert c.step(64) == int(1.0 / (7.0 / 64))
    clock.now += 1.0
    assert c.step(64) == 0  # the budget is spent


def test_a_first_step_that_would_take_much_of_the_budget_is_a_probe(clock):
    c = SearchClock(8.0)
    c.time_simulation(0.05)  # an evaluation expected to take FIRST_STEP_FACTOR x 0.05 s: 64 of them 6.4 s
    assert c.per_evaluation == pytest.approx(FIRST_STEP_FACTOR * 0.05)
    assert c.step(64) == int(64 * PROBE_SHARE)
    clock.now += 8 * 0.12  # measured: 0.12 s an evaluation; 7.04 s left fits 58
    assert c.step(64) == int((8.0 - 0.96) / 0.12)
    small = SearchClock(8.0)
    small.time_simulation(1e-5)  # a small graph: the whole batch at once, as without a budget
    assert small.step(64) == 64


def test_without_a_budget_every_step_is_whole_and_a_zero_budget_none(clock):
    free = SearchClock(None)
    clock.now += 1e6
    assert free.step(32) == 32 and free.progress() == 0.0
    assert SearchClock(0.0).step(32) == 0
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="a search budget must be zero or more seconds"):
            SearchClock(bad)


def costly_simulations(monkeypatch, clock, seconds_per_row: float) -> list[int]:
    """Make every batched simulation of the searches advance the fake clock by ``seconds_per_row`` a row;
    returns the list the batch sizes are recorded in."""
    sizes: list[int] = []
    real = local_search_module.judge_unit_placements

    def judged(simulator, rows):
        sizes.append(len(rows))
        clock.now += seconds_per_row * len(rows)
        return real(simulator, rows)

    monkeypatch.setattr(local_search_module, "judge_unit_placements", judged)
    monkeypatch.setattr(anneal_module, "judge_unit_placements", judged)
    return sizes


@pytest.mark.parametrize("search", ["anneal", "refine"])
@pytest.mark.parametrize("seconds_per_row", [0.001, 0.05, 0.3])
def test_a_search_ends_within_its_budget_however_long_a_simulation_takes(monkeypatch, clock, search,
                                                                         seconds_per_row):
    g, c = layered_dag(2, num_ops=60), Cluster.preset("p100", 3)
    start = np.zeros(g.num_nodes, dtype=np.int64)
    sizes = costly_simulations(monkeypatch, clock, seconds_per_row)
    began = clock.now
    if search == "anneal":
        result = anneal(g, c, start, seed=1, time_budget=4.0)
    else:
        result = refine(g, c, start, seed=1, max_rounds=2**62, patience=2**62, time_budget=4.0)
    # the two one-row simulations (judging the start, timing one) and the steps: all within the budget
    assert clock.now - began <= 4.0 + 1e-9
    assert result.evaluations == sum(sizes) - 1  # the timing simulation is not counted
    if seconds_per_row <= 0.05:
        assert result.rounds >= 2 and result.makespan <= simulate(g, start, c).makespan
    else:  # one evaluation in 0.3 s: a probe, then what fits
        assert sizes[2] < (64 if search == "anneal" else 32) and result.rounds >= 1


def test_steps_are_whole_batches_when_time_is_plenty(monkeypatch, clock):
    g, c = load_graph("synthetic/1"), Cluster.preset("p100", 3)
    start = np.zeros(g.num_nodes, dtype=np.int64)
    sizes = costly_simulations(monkeypatch, clock, 1e-4)
    timed = anneal(g, c, start, seed=3, time_budget=1.0)
    assert timed.rounds > 100 and set(sizes[2:-1]) == {64}  # only the last step may be cut to the time left


def timed_placer(clock, seconds: float, name: str, ran: list[str]):
    def placer(g, c, seed=0):
        ran.append(name)
        clock.now += seconds
        return CONSTRUCTIVE["single"](g, c, seed)
    return placer


def test_start_placers_stop_before_one_expected_to_pass_half_the_budget(clock):
    g, c = load_graph("default"), Cluster.preset("p100", 3)
    ran: list[str] = []
    placers = {"a": timed_placer(clock, 0.1, "a", ran), "b": timed_placer(clock, 0.05, "b", ran),
               "c": timed_placer(clock, 0.2, "c", ran), "d": timed_placer(clock, 0.01, "d", ran)}
    # budget 4 s, starts within 2 s: after a (0.1 s) b may take 1 s: it runs, and c too (elapsed 0.15 s + 1 s);
    # after c (0.2 s, elapsed 0.35 s) d may take 2 s: it does not begin
    ranked_starts(g, c, placers, budget_seconds=4.0)
    assert ran == ["a", "b", "c"]
    ran.clear()
    ranked_starts(g, c, placers)  # without a budget every placer runs
    assert ran == ["a", "b", "c", "d"]


def test_a_start_that_fits_is_found_even_past_the_budget(clock):
    g, c = load_graph("default"), Cluster.preset("p100", 3)
    ran: list[str] = []

    def infeasible(g, c, seed=0):
        ran.append("oom")
        clock.now += 10.0
        raise PlacementInfeasibleError("does not fit")

    found, _ = ranked_starts(g, c, {"oom": infeasible, "late": timed_placer(clock, 1.0, "late", ran)},
                             budget_seconds=1.0)
    assert ran == ["oom", "late"] and [name for _, name, _ in found] == ["late"]


def test_a_large_graph_starts_only_from_the_quick_placers(monkeypatch):
    g, c = load_graph("default"), Cluster.preset("p100", 3)
    starts = {name: CONSTRUCTIVE[name] for name in SEARCH_STARTS}
    monkeypatch.setattr(starts_module, "LARGE_GRAPH_OPS", g.num_nodes - 1)
    found, _ = ranked_starts(g, c, starts, quick=QUICK_STARTS)
    assert {name for _, name, _ in found} <= set(QUICK_STARTS)
    monkeypatch.setattr(starts_module, "LARGE_GRAPH_OPS", g.num_nodes)
    found, _ = ranked_starts(g, c, starts, quick=QUICK_STARTS)
    assert not {name for _, name, _ in found} <= set(QUICK_STARTS)  # below the size, the structured ones too
    monkeypatch.setattr(starts_module, "LARGE_GRAPH_OPS", g.num_nodes - 1)
    placement = search_placers(0.5)["anneal"](g, c, 0)  # the placer passes the quick starts on
    assert simulate(g, placement, c).makespan <= simulate(g, CONSTRUCTIVE["m-topo"](g, c, 0), c).makespan


def eager_nearest_units(g, count):
    """The annealing's blocks as 0.1.x built them, for every unit at once: the reference of the lazy ones."""
    from placement_env.graph.units import unit_graph

    units = unit_graph(g)
    neighbours: list[list[int]] = [[] for _ in range(units.num_units)]
    for a, b in units.edges.T.tolist():
        neighbours[a].append(b)
        neighbours[b].append(a)
    out = []
    for start in range(units.num_units):
        seen, queue, order = {start}, deque([start]), list[int]()
        while queue and len(order) < count:
            for v in neighbours[queue.popleft()]:
                if v not in seen:
                    seen.add(v)
                    order.append(v)
                    queue.append(v)
                    if len(order) == count:
                        break
        out.append(order)
    return out


@pytest.mark.parametrize("g", [
    layered_dag(0, num_ops=30),
    load_graph("synthetic/1"),  # a training graph: forward and backward ops grouped, so the unit graph has cycles
    graph([("a", 1.0, 1, 0, "g"), ("b", 1.0, 1), ("c", 1.0, 1, 0, "g"), ("d", 1.0, 1), ("e", 1.0, 1)],
          [("a", "b"), ("b", "c"), ("c", "d"), ("e", "d")]),
], ids=["layered", "training", "grouped"])
@pytest.mark.parametrize("count", [1, 5, 11])
def test_the_lazy_nearest_units_are_the_eager_breadth_first_ones(g, count):
    near = nearest_units(g, count)
    expected = eager_nearest_units(g, count)
    assert len(near) == len(expected) == g.num_units
    for unit in reversed(range(g.num_units)):  # in any order of asking
        assert near[unit].tolist() == expected[unit]
    with pytest.raises(IndexError, match="out of range"):
        near[g.num_units]


def test_the_command_gives_a_notice_and_progress_for_a_large_graph(monkeypatch, capsys):
    monkeypatch.setattr(baselines_command, "LARGE_GRAPH_OPS", 10)
    assert baselines_command.main(["--graph", "default", "--devices", "2", "--placers", "single,anneal",
                                   "--budget-seconds", "0.5"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0].startswith(f"notice: graph {load_graph('default').name!r} has ")
    assert "the search placers start only from single, m-topo" in lines[0]
    assert lines[1].startswith("[1/2] single ... ") and lines[1].endswith(" s")
    assert lines[2].startswith("[2/2] anneal ... ")
    assert "anneal" in captured.out
    monkeypatch.setattr(baselines_command, "LARGE_GRAPH_OPS", 10**9)
    baselines_command.main(["--graph", "default", "--devices", "2", "--placers", "single"])
    assert capsys.readouterr().err == ""  # a graph of usual size: the table alone


def test_loading_the_kernel_is_not_timed_as_a_start_placer(monkeypatch, clock):
    """The first simulation of a process loads the compiled kernel (half a second, more on a busy machine): timed
    inside the first start placer, it would make every later one look too slow to begin. Here the load takes
    1.5 s of a 4-s budget on the fake clock and each placer 0.01 s: all four run."""
    loaded: list[bool] = []

    class LoadingSimulator(starts_module.Simulator):
        def run(self, placement):
            if not loaded:
                loaded.append(True)
                clock.now += 1.5
            return super().run(placement)

    monkeypatch.setattr(starts_module, "Simulator", LoadingSimulator)
    g, c = load_graph("default"), Cluster.preset("p100", 3)
    ran: list[str] = []
    placers = {name: timed_placer(clock, 0.01, name, ran) for name in "abcd"}
    ranked_starts(g, c, placers, budget_seconds=4.0)
    assert loaded and ran == ["a", "b", "c", "d"]
