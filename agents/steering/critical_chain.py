"""The critical chain of a simulated step: which units hold the makespan up, and how (design 2's unit features).

The step's last op to finish ends at the makespan; it began when the later of two things let it: its device
finishing the op before it (*device-bound*), or its last input arriving (*data-bound*; through a transfer when
the input's producer is on another device). Following that binding predecessor back from the last op to an op
that began at 0 gives a chain whose ops and waits add up to the makespan: shortening the step means shortening
that chain. :class:`CriticalChain` simulates a placement (:meth:`Simulator.op_times
<placement_env.sim.simulator.Simulator.op_times>`, the pipelined step's unrolled ops included) and returns, per
unit, :data:`CHAIN_FEATURES`:

``on_chain``
    1 when one of the unit's ops (of any micro-batch) is on the chain.
``chain_transfer``
    1 when the chain enters or leaves one of the unit's ops through a transfer between devices: moving the unit
    to the other end's device takes that transfer off the chain.
``device_bound``
    1 when one of the unit's chain ops waited for its device: moving it to a less busy device starts it sooner.

A predecessor counts as binding when it ended within ``1e-9`` of the makespan before the op began: first an
input made on the op's own device, then the op run before it there (device-bound), else the input that ended last
(through a transfer when made elsewhere). Costs: one simulation of the placement and a pass
over the chain's ops and their inputs (compiled).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.sim.pipeline import PLAIN_STEP, Step, unrolled
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator

CHAIN_FEATURES = ("on_chain", "chain_transfer", "device_bound")


@njit(cache=True)
def trace_chain(start: np.ndarray, end: np.ndarray, device: np.ndarray, previous: np.ndarray, in_ptr: np.ndarray,
                in_src: np.ndarray, op_unit: np.ndarray, num_units: int,
                tolerance: float) -> np.ndarray:  # pragma: no cover - compiled
    """(units, 3) float64 marks of the chain (module docstring): a unit with an op on the chain, at one end of a
    transfer on it, device-bound on it. Per op: ``previous[v]``, the op run before ``v`` on its device (-1: none);
    ``in_src[in_ptr[v]:in_ptr[v + 1]]``, ``v``'s producers; ``op_unit[v]``, its unit."""
    n = start.shape[0]
    marks = np.zeros((num_units, 3))
    if n == 0:
        return marks
    v = 0
    for u in range(1, n):
        if end[u] > end[v]:
            v = u
    for _ in range(n):
        marks[op_unit[v], 0] = 1.0
        began = start[v]
        if began <= tolerance:
            break
        best = -1
        for k in range(in_ptr[v], in_ptr[v + 1]):
            q = in_src[k]
            if best < 0 or end[q] > end[best]:
                best = q
        p = previous[v]
        if best >= 0 and device[best] == device[v] and end[best] >= began - tolerance:
            v = best  # its input, made on its own device just before
        elif p >= 0 and end[p] >= began - tolerance:
            marks[op_unit[v], 2] = 1.0  # its device was busy until it began
            v = p
        elif best >= 0:
            if device[best] != device[v]:  # its last input came through a transfer
                marks[op_unit[v], 1] = 1.0
                marks[op_unit[best], 1] = 1.0
            v = best
        else:
            break
    return marks


class CriticalChain:
    """The critical chain of placements of one problem (module docstring).

    Args:
        graph, cluster: the problem.
        step: micro-batches and schedule (the pipelined step's chain runs through its unrolled ops).
        param_factor: static bytes per parameter byte (the simulator's).
    """

    def __init__(self, graph: ComputationGraph, cluster: Cluster, step: Step = PLAIN_STEP,
                 param_factor: float = DEFAULT_PARAM_FACTOR) -> None:
        self.graph = graph
        self.simulator = Simulator(graph, cluster, param_factor, *step)
        stepped, origin = graph, np.arange(graph.num_nodes)
        if step[0] > 1:
            unrolled_step = unrolled(graph, step[0])
            stepped, origin = unrolled_step.graph, unrolled_step.origin
        self.op_unit = graph.unit_of[origin].astype(np.int64)  # the unit of each op of the step
        order = np.argsort(stepped.edge_dst, kind="stable")
        self.in_src = stepped.edge_src[order].astype(np.int64)
        self.in_ptr = np.zeros(stepped.num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(stepped.edge_dst, minlength=stepped.num_nodes), out=self.in_ptr[1:])

    def unit_features(self, current: np.ndarray) -> np.ndarray:
        """(units, len(CHAIN_FEATURES)) float64 for the unit placement ``current`` (a device per unit)."""
        device = current[self.op_unit]
        start, end, previous = self.simulator.op_times(current[self.graph.unit_of])
        tolerance = 1e-9 * max(float(end.max(initial=0.0)), 1e-300)
        return trace_chain(start, end, device, previous, self.in_ptr, self.in_src, self.op_unit,
                           self.graph.num_units, tolerance)
