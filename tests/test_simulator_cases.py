"""The simulator on cases computed by hand (docs/spec/simulator.md section 3).

Unless said otherwise: links of 100 B/s with 0.5 s latency, so a 100-byte
transfer takes 0.5 + 1 = 1.5 s; devices of speed 1; no parameters.
"""

import numpy as np
import pytest
from helpers import graph, uniform_cluster
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from placement_env import lower_bound, simulate, simulate_batch
from placement_env.sim.reference import simulate_reference


def check_reference(g, p, c, result):
    ref = simulate_reference(g, p, c)
    assert result.makespan == ref["makespan"]
    assert list(result.peak_memory) == ref["peak_memory"]
    assert list(result.schedule.op_start) == ref["start"]


def test_chain_split_across_two_devices():
    g = graph([("a", 1.0, 100, 10), ("b", 2.0, 200), ("c", 3.0, 50)], [("a", "b"), ("b", "c")])
    c = uniform_cluster(2)
    r = simulate(g, [0, 1, 1], c)
    ops = {o.node: (o.device, o.start, o.end) for o in r.schedule.ops()}
    assert ops == {"a": (0, 0.0, 1.0), "b": (1, 2.5, 4.5), "c": (1, 4.5, 7.5)}
    (t,) = r.schedule.transfers()
    assert (t.node, t.src_device, t.dst_device, t.bytes, t.start, t.end) == ("a", 0, 1, 100, 1.0, 2.5)
    assert r.makespan == 7.5
    assert list(r.busy) == [1.0, 5.0]
    # device 0: a's output (100) until its transfer ends + a's parameters x 4 (40)
    # device 1: received copy (100) on [1, 4.5) and b's output (200) on [2.5, 7.5) overlap: 300
    assert list(r.peak_memory) == [140, 300]
    assert not r.oom
    check_reference(g, [0, 1, 1], c, r)


def test_fan_out_to_three_consumers_on_one_remote_device_is_one_transfer():
    g = graph([("a", 1.0, 100), ("b", 1.0, 0), ("c", 1.0, 0), ("d", 1.0, 0)],
              [("a", "b", 50), ("a", "c", 100), ("a", "d", 80)])
    c = uniform_cluster(2)
    r = simulate(g, [0, 1, 1, 1], c)
    (t,) = r.schedule.transfers()
    assert t.bytes == 100  # the largest edge to that device
    assert (t.start, t.end) == (1.0, 2.5)
    # all three ready at 2.5 on device 1, run in topological order
    assert [(o.node, o.start) for o in r.schedule.ops()[1:]] == [("b", 2.5), ("c", 3.5), ("d", 4.5)]
    assert r.makespan == 5.5
    # the single copy (100 B) lives on device 1 until the last consumer ends
    assert r.peak_memory[1] == 100
    check_reference(g, [0, 1, 1, 1], c, r)


def test_two_transfers_compete_for_one_receive_channel():
    g = graph([("a", 1.0, 100), ("b", 1.0, 100), ("c", 1.0, 0)], [("a", "c"), ("b", "c")])
    c = uniform_cluster(3)
    r = simulate(g, [0, 1, 2], c)
    ta, tb = r.schedule.transfers()
    # both requested at 1; a (smaller topological index) is booked first
    assert (ta.node, ta.start, ta.end) == ("a", 1.0, 2.5)
    assert (tb.node, tb.start, tb.end) == ("b", 2.5, 4.0)
    assert r.makespan == 5.0
    check_reference(g, [0, 1, 2], c, r)


def test_two_transfers_compete_for_one_send_channel_in_destination_order():
    g = graph([("a", 1.0, 100), ("b", 1.0, 0), ("c", 1.0, 0)], [("a", "c"), ("a", "b")])
    c = uniform_cluster(3)
    r = simulate(g, [0, 2, 1], c)
    t1, t2 = r.schedule.transfers()
    assert (t1.dst_device, t1.start, t1.end) == (1, 1.0, 2.5)
    assert (t2.dst_device, t2.start, t2.end) == (2, 2.5, 4.0)
    check_reference(g, [0, 2, 1], c, r)


@pytest.mark.parametrize("m, far", [(4, 3), (70, 66)])
def test_transfers_to_high_device_indices(m, far):
    """The kernel tracks each op's destination devices in a 64-bit mask up to 63 devices and falls back to a
    per-device test beyond; both give the spec's booking order (destination index) on the send channel."""
    g = graph([("a", 1.0, 100), ("b", 1.0, 0), ("c", 1.0, 0), ("d", 1.0, 0)], [("a", "b"), ("a", "c"), ("a", "d")])
    c = uniform_cluster(m)
    p = [0, far, 1, 0]
    r = simulate(g, p, c)
    t1, t2 = r.schedule.transfers()
    assert (t1.dst_device, t1.start, t1.end) == (1, 1.0, 2.5)
    assert (t2.dst_device, t2.start, t2.end) == (far, 2.5, 4.0)
    assert r.makespan == 5.0 and r.peak_memory[far] == 100
    check_reference(g, p, c, r)
    assert simulate_batch(g, [p], c).makespan[0] == r.makespan


def test_memory_is_freed_after_the_last_consumer():
    # one device: a 0-1, b 1-2, c 2-5, d 5-6. a's output lives until c ends (5),
    # so at t=5 it is gone before d allocates: peak 110 (a + b), not 160 (a + c + d).
    g = graph([("a", 1.0, 100), ("b", 1.0, 10), ("c", 3.0, 10), ("d", 1.0, 50)],
              [("a", "b"), ("a", "c"), ("c", "d")])
    c = uniform_cluster(1)
    r = simulate(g, [0, 0, 0, 0], c)
    assert [o.start for o in r.schedule.ops()] == [0.0, 1.0, 2.0, 5.0]
    assert r.peak_memory[0] == 110
    assert r.schedule.num_transfers == 0
    check_reference(g, [0, 0, 0, 0], c, r)


def test_zero_cost_ops():
    # a (zero cost) feeds b; c (zero cost, no consumer) is ready at 0 too but has a
    # larger topological index, so it runs after b. Its output lives on [2, 2): nothing.
    g = graph([("a", 0.0, 100), ("b", 2.0, 10), ("c", 0.0, 1000)], [("a", "b")])
    c = uniform_cluster(1)
    r = simulate(g, [0, 0, 0], c)
    assert [(o.start, o.end) for o in r.schedule.ops()] == [(0.0, 0.0), (0.0, 2.0), (2.0, 2.0)]
    assert r.makespan == 2.0
    assert r.peak_memory[0] == 110
    check_reference(g, [0, 0, 0], c, r)


def test_ratio_to_a_zero_lower_bound():
    g = graph([("a", 0.0, 100), ("b", 0.0, 10)], [("a", "b")])  # every op free: the lower bound is 0
    together, apart = simulate(g, [0, 0], uniform_cluster(2)), simulate(g, [0, 1], uniform_cluster(2))
    assert together.lower_bound == 0.0 and together.makespan == 0.0 and together.lb_ratio == 1.0
    assert apart.makespan == 1.5 and apart.lb_ratio == float("inf")  # the transfer alone: 0.5 + 100 / 100 s


def test_out_of_memory_is_flagged_per_device():
    g = graph([("a", 1.0, 100, 1000), ("b", 1.0, 100)], [("a", "b")])
    c = uniform_cluster(2, memory=4000)
    r = simulate(g, [0, 1], c)
    assert r.peak_memory[0] == 4100  # params x 4 + output
    assert r.oom
    assert not simulate(g, [1, 1], uniform_cluster(2, memory=10**6)).oom


def test_param_factor_scales_static_memory_and_must_be_finite_and_non_negative():
    g = graph([("a", 1.0, 100, 1000)])
    assert simulate(g, [0], uniform_cluster(1), param_factor=1).peak_memory[0] == 1100  # params x 1 + output
    assert simulate(g, [0], uniform_cluster(1), param_factor=0).peak_memory[0] == 100
    for bad in (float("nan"), float("inf"), -1.0, "4", None):
        with pytest.raises(ValueError, match=f"param_factor must be a finite number >= 0, got {bad!r}"):
            simulate(g, [0], uniform_cluster(1), param_factor=bad)


def test_device_speed_scales_run_time():
    g = graph([("a", 3.0, 0)])
    c = uniform_cluster(1, speed=2.0)
    assert simulate(g, [0], c).makespan == 1.5


def test_batch_matches_single_on_hand_cases():
    g = graph([("a", 1.0, 100), ("b", 1.0, 100), ("c", 1.0, 0)], [("a", "c"), ("b", "c")])
    c = uniform_cluster(3)
    placements = np.array([[0, 1, 2], [0, 0, 0], [2, 2, 1]])
    batch = simulate_batch(g, placements, c)
    for i, p in enumerate(placements):
        r = simulate(g, p, c)
        assert batch.makespan[i] == r.makespan
        assert np.array_equal(batch.peak_memory[i], r.peak_memory)
        assert np.array_equal(batch.busy[i], r.busy)


@pytest.mark.parametrize("placement, message", [
    ([0, 1], "has 2 entries"),
    ([0, 1, 3], "placed on device 3"),
    ([0, -1, 0], "placed on device -1"),
    ([0, 0.5, 0], "not a device index"),
    ([[0, 1, 0]], r"1-D sequence of device indices, one per node, got shape \(1, 3\)"),
    (0, r"got shape \(\)"),
    (np.zeros(3, bool), "entry for node 'a' is not a device index: False"),
    ([True, False, True], "entry for node 'a' is not a device index: True"),
    ([0, True, 0], "entry for node 'b' is not a device index: True"),  # numpy alone would read it as 1
    ((0, 0, np.bool_(False)), "entry for node 'c' is not a device index: np.False_"),
    ([[0], [0, 1], 0], "placement must be a sequence of device indices, one per node: setting an array"),
    ([0, 0, None], "entry for node 'c' is not a device index: None"),
    (["0", "0", "0"], "entry for node 'a' is not a device index: '0'"),
    ([0, float("nan"), 0], "entry for node 'b' is not a device index: nan"),
    ([0, 2**70, 0], f"node 'b' is placed on device {2**70}, but"),
    (np.array([0, 2**63 + 5, 0], np.uint64), f"node 'b' is placed on device {2**63 + 5}, but"),
    ([0, 1e30, 0], "node 'b' is placed on device 1000000000000000019884624838656, but"),
    ({"a": 0, "b": 0, "c": 0}, "got a mapping; convert .* with placement_env.placement_from_json"),
])
def test_bad_placements_are_rejected(placement, message):
    g = graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "b")])
    with pytest.raises(ValueError, match=message):
        simulate(g, placement, uniform_cluster(3))


def test_a_batch_row_mixing_ints_and_a_bool_is_rejected_by_row_and_node():
    g = graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "b")])
    with pytest.raises(ValueError, match="placements row 1: placement entry for node 'c' is not a device index: True"):
        simulate_batch(g, [[0, 1, 2], [0, 1, True]], uniform_cluster(3))
    assert simulate_batch(g, [[0, 1, 2], [0, 1, 1]], uniform_cluster(3)).makespan.shape == (2,)
    with pytest.raises(ValueError, match="placements must be a B x N array with N = 3 nodes: setting an array"):
        simulate_batch(g, [[0, 1, 2], [0, 1]], uniform_cluster(3))


def test_arguments_in_another_order_name_what_was_expected():
    """simulate(graph, placement, cluster) and lower_bound say which argument is wrong, not an AttributeError deep
    inside."""
    g = graph([("a", 1.0, 1), ("b", 1.0, 1)], [("a", "b")])
    c, p = uniform_cluster(2), [0, 1]
    cases = [
        (lambda: simulate(g, c, p), "cluster must be a Cluster, got list"),
        (lambda: simulate(p, g, c), "graph must be a ComputationGraph, got list"),
        (lambda: simulate_batch(g, c, [p]), "cluster must be a Cluster, got list"),
        (lambda: lower_bound(c, g), "cluster must be a Cluster, got ComputationGraph"),
    ]
    for call, message in cases:
        with pytest.raises(TypeError, match=message):
            call()


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("shape", [(2, 2), (2, 4), (3,)])
def test_batch_of_the_wrong_shape_is_rejected_even_unchecked(shape, check):
    g = graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "b")])
    with pytest.raises(ValueError, match=r"B x N array with N = 3 nodes"):
        simulate_batch(g, np.zeros(shape, np.int64), uniform_cluster(3), check=check)


def test_integral_floats_are_device_indices_and_a_bad_batch_row_is_named():
    g = graph([("a", 1.0, 1), ("b", 1.0, 1), ("c", 1.0, 1)], [("a", "b")])
    c = uniform_cluster(3)
    assert simulate(g, np.array([0.0, 1.0, 2.0], np.float32), c).makespan == simulate(g, [0, 1, 2], c).makespan
    with pytest.raises(ValueError, match=r"^placements row 2: node 'c' is placed on device 3, but"):
        simulate_batch(g, [[0, 0, 0], [1, 1, 1], [0, 1, 3]], c)


def test_split_colocation_group_is_rejected():
    g = graph([("a", 1.0, 1, 0, "g"), ("b", 1.0, 1, 0, "g")], [("a", "b")])
    with pytest.raises(ValueError, match="colocation group 'g' is split"):
        simulate(g, [0, 1], uniform_cluster(2))
    assert simulate(g, [1, 1], uniform_cluster(2)).makespan == 2.0


def test_lower_bound_hand_case():
    from placement_env import lower_bound

    # critical path a-b = 3 s; total 4 s over 2 devices of speed 1 -> 2 s; LB = 3
    g = graph([("a", 1.0, 0), ("b", 2.0, 0), ("c", 1.0, 0)], [("a", "b")])
    assert lower_bound(g, uniform_cluster(2)) == 3.0
    assert lower_bound(g, uniform_cluster(8, speed=4.0)) == 0.75


def test_workspace_refuses_a_graph_beyond_its_32_bit_positions():
    from placement_env.sim.kernel import Workspace

    with pytest.raises(ValueError, match="too large for the simulator"):
        Workspace(2**31, 10, 3)  # refused before anything is allocated


def late_ready_queue(k: int):
    """``k`` ops wait on device 0 for a slow copy while a local chain keeps readying earlier ops.

    ``s`` (device 1) sends ``100 k`` bytes to device 0: the copy arrives at
    ``k + 0.5`` s. The chain ``y0 -> y1 -> ...`` runs on device 0, one second
    per op; ``x_i`` needs ``s`` and ``y_i``, so it joins device 0's ready queue
    at ``i + 1`` s with key ``k + 0.5``, and every later ``y`` (key ``i + 1``)
    must go in front of all the ``x`` already waiting: the insertion pattern
    that turns a sorted ready run into a heap (quadratic time without that).
    Makespan: the chain ends at ``k``, then the ``x`` run back to back from ``k + 0.5``.
    """
    nodes = [("s", 0.0, 100 * k)] + [(f"y{i}", 1.0, 1) for i in range(k)] + [(f"x{i}", 1.0, 1) for i in range(k)]
    edges = [(f"y{i}", f"y{i + 1}") for i in range(k - 1)]
    edges += [("s", f"x{i}") for i in range(k)] + [(f"y{i}", f"x{i}") for i in range(k)]
    return graph(nodes, edges), [1] + [0] * (2 * k)


@pytest.mark.parametrize("k", [5, 33, 34, 200])
def test_ready_queue_past_its_sorted_run_limit(k):
    g, p = late_ready_queue(k)
    c = uniform_cluster(2)
    r = simulate(g, p, c)
    check_reference(g, p, c, r)
    assert r.makespan == 2 * k + 0.5
    assert np.array_equal(simulate_batch(g, np.array([p, p]), c).makespan, [r.makespan] * 2)


def crowded_ready_queue(seed: int, k: int):
    """A random ``late_ready_queue``: most of ``k`` ops wait on device 0 for a copy from ``s`` that arrives
    after a chain of ``k`` ops of random costs (some zero) has run, while each chain op readies the next with an
    earlier key; a few ops depend on each other or sit on device 1. Random costs and sizes give ties, zero-length
    ops and orders that the hand-made case does not. With ``k >= 45`` the queue nearly always passes
    ``RUN_LIMIT`` and becomes a heap (:func:`most_ops_overtaken` tells)."""
    rng = np.random.default_rng(seed)
    nodes = [("s", 0.0, int(rng.integers(200, 400)) * k)]
    nodes += [(f"y{i}", float(rng.choice([0.0, 0.25, 1.0, 2.0])), int(rng.integers(0, 5))) for i in range(k)]
    nodes += [(f"x{i}", float(rng.choice([0.0, 0.5, 1.0])), int(rng.integers(0, 5))) for i in range(k)]
    edges = [(f"y{i}", f"y{i + 1}") for i in range(k - 1)] + [(f"y{i}", f"x{i}") for i in range(k)]
    edges += [("s", f"x{i}") for i in range(k) if rng.random() < 0.9]
    edges += [(f"x{j}", f"x{i}") for i in range(1, k) for j in rng.choice(i, size=min(i, 2), replace=False)
              if rng.random() < 0.1]
    placement = [1] + [0] * k + [int(rng.random() < 0.1) for _ in range(k)]
    return graph(nodes, edges), placement


def most_ops_overtaken(g, p, ref) -> int:
    """The most waiting ops that one op joining a device's ready queue goes in front of, from the reference's schedule.

    An op joins its device's queue when its last producer ends (its inputs are all booked then), keyed by
    (ready time, topological index); it goes in front of the ops of its device that joined strictly before
    and start strictly after, with larger keys. Strict inequalities undercount ties, so a count above
    ``RUN_LIMIT`` means that the kernel's insertion moved more than ``RUN_LIMIT`` entries: the queue became a heap.
    """
    ptr, src, _ = g.predecessors
    arrival = {(u, b): e for u, _, b, _, _, e in ref["transfers"]}
    joined, key = {}, {}
    for v in range(g.num_nodes):
        inputs = src[ptr[v]:ptr[v + 1]].tolist()
        joined[v] = max((ref["end"][u] for u in inputs), default=0.0)
        ready = max((ref["end"][u] if p[u] == p[v] else arrival[(u, p[v])] for u in inputs), default=0.0)
        key[v] = (ready, int(g.topo_index[v]))
    return max(sum(1 for w in range(g.num_nodes) if p[w] == p[v] and joined[w] < joined[v]
                   and ref["start"][w] > joined[v] and key[w] > key[v]) for v in range(g.num_nodes))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(45, 125))
def test_crowded_ready_queues_match_the_reference(seed, k):
    from placement_env.sim.kernel import RUN_LIMIT

    g, p = crowded_ready_queue(seed, k)
    c = uniform_cluster(2)
    ref = simulate_reference(g, p, c)
    assume(most_ops_overtaken(g, p, ref) > RUN_LIMIT)  # the few seeds whose queue stays a sorted run test nothing new
    r = simulate(g, p, c)
    assert r.makespan == ref["makespan"]
    assert list(r.schedule.op_start) == ref["start"]
    assert list(r.peak_memory) == ref["peak_memory"]
    assert list(r.busy) == ref["busy"]
    got = [(g.index_of(t.node), t.src_device, t.dst_device, t.bytes, t.start, t.end) for t in r.schedule.transfers()]
    assert got == [tuple(x) for x in ref["transfers"]]
