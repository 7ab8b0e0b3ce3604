"""Each device's memory over a step (memory_timeline) and the step as a Chrome trace (chrome_trace)."""

import gzip
import json

import numpy as np
import pytest
from helpers import graph, uniform_cluster
from hypothesis import given, settings
from test_simulator_properties import problems

from placement_env import chrome_trace, memory_timeline, simulate, write_chrome_trace


def chain_split_across_two_devices():
    """The hand case of test_simulator_cases: a -> b -> c on [0, 1, 1], a 100-byte transfer on [1.0, 2.5)."""
    g = graph([("a", 1.0, 100, 10), ("b", 2.0, 200), ("c", 3.0, 50)], [("a", "b"), ("b", "c")])
    c = uniform_cluster(2)
    return g, c, simulate(g, [0, 1, 1], c)


def test_timeline_of_a_chain_split_across_two_devices():
    g, c, r = chain_split_across_two_devices()
    (t0, used0), (t1, used1) = memory_timeline(g, r)
    # device 0: a's parameters x 4 (40) all along; a's output (100) from its start until its transfer ends
    assert t0.tolist() == [0.0, 2.5] and used0.tolist() == [140.0, 40.0]
    # device 1: the copy of a (100) on [1, 4.5), b's output (200) on [2.5, 7.5), c's (50) on [4.5, 7.5)
    assert t1.tolist() == [0.0, 1.0, 2.5, 4.5, 7.5]
    assert used1.tolist() == [0.0, 100.0, 300.0, 250.0, 0.0]
    assert [used0.max(), used1.max()] == list(r.peak_memory) == [140, 300]


def test_timeline_uses_the_param_factor_the_step_was_simulated_with():
    g = graph([("a", 1.0, 100, 10)])
    r = simulate(g, [0], uniform_cluster(1), param_factor=1.0)
    ((times, used),) = memory_timeline(g, r)
    assert times.tolist() == [0.0, 1.0] and used.tolist() == [110.0, 10.0]


def test_zero_length_buffers_leave_the_timeline_alone():
    # a zero-cost op with no consumer holds its output on [0, 0): nothing, as for the peak
    g = graph([("a", 0.0, 500), ("b", 1.0, 70)])
    r = simulate(g, [0, 0], uniform_cluster(1))
    ((times, used),) = memory_timeline(g, r)
    assert times.tolist() == [0.0, 1.0] and used.tolist() == [70.0, 0.0]
    assert r.peak_memory[0] == 70


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(problems())
def test_timeline_peaks_at_the_simulated_peak_and_ends_with_the_parameters(problem):
    g, c, p = problem
    r = simulate(g, p, c)
    timeline = memory_timeline(g, r)
    assert len(timeline) == c.num_devices
    for d, (times, used) in enumerate(timeline):
        static = float(np.sum(g.param_bytes[np.asarray(p) == d])) * 4.0
        assert times[0] == 0.0 and np.all(np.diff(times) > 0)
        assert used.max() == r.peak_memory[d]
        assert used[-1] == static  # every buffer is freed by the end of the step
        assert times[-1] <= max(r.makespan, float(r.schedule.transfer_end.max(initial=0.0)))


def test_chrome_trace_holds_every_op_transfer_and_memory_level():
    g, c, r = chain_split_across_two_devices()
    trace = chrome_trace(g, c, r)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    ops = {e["name"]: (e["pid"], e["tid"], e["ts"], e["dur"], e["cat"]) for e in slices if e["cat"] != "transfer"}
    assert ops == {"a": (0, 0, 0.0, 1e6, "op"), "b": (1, 0, 2.5e6, 2e6, "op"), "c": (1, 0, 4.5e6, 3e6, "op")}
    transfers = [(e["name"], e["pid"], e["tid"], e["ts"], e["dur"], e["args"]["bytes"])
                 for e in slices if e["cat"] == "transfer"]
    assert transfers == [("a -> d1", 0, 1, 1e6, 1.5e6, 100.0), ("a <- d0", 1, 2, 1e6, 1.5e6, 100.0)]
    counters = [(e["pid"], e["ts"], e["args"]["bytes"]) for e in trace["traceEvents"] if e["ph"] == "C"]
    assert counters == [(0, 0.0, 140.0), (0, 2.5e6, 40.0),
                        (1, 0.0, 0.0), (1, 1e6, 100.0), (1, 2.5e6, 300.0), (1, 4.5e6, 250.0), (1, 7.5e6, 0.0)]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"
             and e["name"] in ("process_name", "thread_name")}
    assert names[(0, None)] == "d0" and names[(1, 2)] == "receive" and names[(0, 1)] == "send"
    assert trace["otherData"]["makespan_s"] == 7.5 and trace["otherData"]["peak_memory_bytes"] == [140.0, 300.0]
    assert json.loads(json.dumps(trace)) == trace  # plain JSON


def test_write_chrome_trace_gzips_by_name(tmp_path):
    g, c, r = chain_split_across_two_devices()
    write_chrome_trace(tmp_path / "step.json.gz", g, c, r)
    with gzip.open(tmp_path / "step.json.gz", "rt") as f:
        assert json.load(f) == chrome_trace(g, c, r)


def test_a_result_of_another_graph_or_cluster_is_refused():
    g, c, r = chain_split_across_two_devices()
    other = graph([("x", 1.0, 1)], name="other")
    with pytest.raises(ValueError, match="not of graph 'other'"):
        memory_timeline(other, r)
    with pytest.raises(ValueError, match="not of graph 'other'"):
        chrome_trace(other, c, r)
    with pytest.raises(ValueError, match="not of 'cluster' \\(3 devices\\)"):
        chrome_trace(g, uniform_cluster(3), r)
    same_ids = graph([("a", 1.0, 100, 10), ("b", 2.0, 200), ("c", 3.0, 50)], [("b", "c")], name="rewired")
    with pytest.raises(ValueError, match="sends node 'a' to device 1, where it has no consumer: "
                                         "the schedule is not one of graph 'rewired'"):
        memory_timeline(same_ids, r)
