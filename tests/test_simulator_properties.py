"""Properties of the simulator on random DAGs and placements (hypothesis)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_env import Cluster, ComputationGraph, Device, Edge, Node, lower_bound, simulate, simulate_batch
from placement_env.sim.reference import simulate_reference


@st.composite
def dags(draw, max_nodes=18):
    n = draw(st.integers(1, max_nodes))
    costs = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 5.0)), min_size=n, max_size=n))
    outs = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n))
    params = draw(st.lists(st.one_of(st.just(0), st.integers(1, 10**6)), min_size=n, max_size=n))
    groups = draw(st.lists(st.one_of(st.none(), st.sampled_from("ABC")), min_size=n, max_size=n))
    edges = []
    for v in range(1, n):
        for u in draw(st.sets(st.integers(0, v - 1), max_size=3)):
            nbytes = draw(st.one_of(st.none(), st.integers(0, 10**6)))
            edges.append(Edge(f"n{u}", f"n{v}", nbytes))
    # shuffle node order so that node index != topological index
    order = draw(st.permutations(range(n)))
    nodes = [Node(f"n{i}", "op", costs[i], outs[i], params[i], groups[i]) for i in order]
    return ComputationGraph(nodes, edges, name="h")


@st.composite
def clusters(draw):
    m = draw(st.integers(1, 4))
    speeds = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=m, max_size=m))
    bw = np.array(draw(st.lists(st.sampled_from([1e5, 1e6, 5e6]), min_size=m * m, max_size=m * m))).reshape(m, m)
    lat = np.array(draw(st.lists(st.sampled_from([0.0, 1e-3, 0.1]), min_size=m * m, max_size=m * m))).reshape(m, m)
    return Cluster([Device(f"d{i}", s, 4 * 10**6) for i, s in enumerate(speeds)], bw, lat)


@st.composite
def problems(draw):
    g = draw(dags())
    c = draw(clusters())
    units = draw(st.lists(st.integers(0, c.num_devices - 1), min_size=g.num_units, max_size=g.num_units))
    return g, c, g.expand_unit_placement(units)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_compiled_simulator_equals_the_literal_reference(problem):
    g, c, p = problem
    r = simulate(g, p, c)
    ref = simulate_reference(g, p, c)
    assert r.makespan == ref["makespan"]
    assert list(r.schedule.op_start) == ref["start"]
    assert list(r.schedule.op_end) == ref["end"]
    assert list(r.peak_memory) == ref["peak_memory"]
    assert list(r.busy) == ref["busy"]
    got = [(g.index_of(t.node), t.src_device, t.dst_device, t.bytes, t.start, t.end) for t in r.schedule.transfers()]
    assert got == [tuple(x) for x in ref["transfers"]]


@settings(max_examples=200, deadline=None)
@given(problems())
def test_makespan_is_at_least_the_lower_bound(problem):
    g, c, p = problem
    assert simulate(g, p, c).makespan >= lower_bound(g, c) * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(dags(), st.integers(1, 4))
def test_everything_on_one_device_of_speed_one_is_the_sum_of_costs(g, m):
    c = Cluster([Device(f"d{i}", 1.0, 10**12) for i in range(m)], np.full((m, m), 1e6), np.full((m, m), 1e-3))
    r = simulate(g, np.full(g.num_nodes, m - 1), c)
    assert np.isclose(r.makespan, g.total_cost, rtol=1e-12, atol=0)
    assert r.schedule.num_transfers == 0
    assert np.isclose(r.busy[m - 1], g.total_cost, rtol=1e-12, atol=0)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(problems())
def test_same_input_gives_the_same_schedule(problem):
    g, c, p = problem
    a, b = simulate(g, p, c), simulate(g, p, c)
    assert a.makespan == b.makespan
    assert a.schedule.ops() == b.schedule.ops()
    assert a.schedule.transfers() == b.schedule.transfers()


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(problems(), st.integers(0, 2**31))
def test_batched_and_single_entry_points_agree_exactly(problem, seed):
    g, c, p = problem
    rng = np.random.default_rng(seed)
    rows = [p] + [g.expand_unit_placement(rng.integers(0, c.num_devices, g.num_units)) for _ in range(4)]
    batch = simulate_batch(g, np.stack(rows), c)
    for i, row in enumerate(rows):
        r = simulate(g, row, c)
        assert batch.makespan[i] == r.makespan
        assert np.array_equal(batch.peak_memory[i], r.peak_memory)
        assert np.array_equal(batch.busy[i], r.busy)
        assert batch.oom[i] == r.oom


@settings(max_examples=100, deadline=None)
@given(problems())
def test_op_times_are_the_schedules_with_each_devices_previous_op(problem):
    from placement_env.sim.simulator import Simulator

    g, c, p = problem
    schedule = simulate(g, p, c).schedule
    start, end, previous = Simulator(g, c).op_times(np.asarray(p, dtype=np.int64))
    assert np.array_equal(start, schedule.op_start) and np.array_equal(end, schedule.op_end)
    for d in range(c.num_devices):  # each device's ops form one chain through previous, in the order they ran
        ops = set(np.nonzero(np.asarray(p) == d)[0].tolist())
        pointed = {int(previous[v]) for v in ops} - {-1}
        assert pointed <= ops and len(pointed) == max(len(ops) - 1, 0)  # one first op, the rest each after one
        for v in ops:
            u = int(previous[v])
            assert u == -1 or (start[u] <= start[v] and end[u] <= start[v] + 1e-12)
