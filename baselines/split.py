"""``split``: contiguous pieces of a topological order, one per device, under each device's memory.

The natural placement of a model that does not fit on one device (pipeline-style model parallelism, as
PipeDream's partitioner and Tarnawski et al., "Efficient Algorithms for Device Placement of DNN Graph
Operators", NeurIPS 2020, compute it): the placement units in topological order are cut into at most M
contiguous pieces; piece k goes to the k-th device (in index order, then also in decreasing memory), and a
piece's budgeted memory (:func:`baselines.memory.unit_demand`: static plus activations at the peak) must fit
its device. Two families of cuts are computed exactly on that model:

* **fewest bytes cut**: for each number of pieces K = 1..M, the cuts with the least total bytes crossing them
  (dynamic programming over positions, with a sliding-window minimum: O(M U)); for a chain whose memory needs
  two devices, the cheapest feasible cut;
* **balanced compute**: the smallest bottleneck T such that greedy pieces of compute at most T seconds on their
  device (and within memory) cover all units (bisection on T).

A piece whose ops hold no parameter joins the next piece (:func:`~placement_env.plan.stages.merge_weightless_runs`): a
pipeline stage needs parameters to train. Every candidate is then simulated in one
:func:`~placement_env.simulate_batch` call and the simulator picks: least overflow first, then the shortest step.
Its placement may still overflow (received copies are not in the budget); the placers of :data:`baselines.PLACERS`
then repair it (:mod:`baselines.memory_repair`).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from placement_env.cluster import Cluster
from placement_env.graph.model import ComputationGraph
from placement_env.plan.stages import merge_weightless_runs, unit_can_begin
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.sim.simulator import DEFAULT_PARAM_FACTOR, Simulator

from .memory import MemoryBudget, overflow_bytes, units_in_topological_order


def cut_bytes(graph: ComputationGraph, order: np.ndarray) -> np.ndarray:
    """``c[j]``: bytes on op edges between different units that cross the cut before position ``j`` of ``order``
    (``c[0] = 0``)."""
    position = np.empty(graph.num_units, dtype=np.int64)
    position[order] = np.arange(order.size)
    us, ud = graph.unit_of[graph.edge_src], graph.unit_of[graph.edge_dst]
    crossing = us != ud
    a, b = position[us[crossing]], position[ud[crossing]]
    lo, hi = np.minimum(a, b), np.maximum(a, b)  # the edge crosses cuts lo+1 .. hi
    diff = np.zeros(order.size + 1)
    np.add.at(diff, lo + 1, graph.edge_bytes[crossing])
    np.add.at(diff, hi + 1, -graph.edge_bytes[crossing])
    out = np.cumsum(diff)[: order.size]
    out[0] = 0.0
    return out


def fewest_bytes_cuts(demand: np.ndarray, caps: np.ndarray, cuts: np.ndarray) -> dict[int, list[int]]:
    """For each number of pieces K (1..``len(caps)``) that memory allows: boundaries ``[0, b1, ..., U]`` of K
    non-empty pieces, piece k within ``caps[k]``, with the least total ``cuts[b]`` over inner boundaries.
    ``demand`` is in order (bytes); one dynamic programme over positions for every K."""
    n, pieces = demand.size, caps.size
    prefix = np.concatenate([[0.0], np.cumsum(demand)])
    cut = cuts.tolist()
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(pieces + 1)]
    back = [[-1] * (n + 1) for _ in range(pieces + 1)]
    best[0][0] = 0.0
    found: dict[int, list[int]] = {}
    for k in range(1, pieces + 1):
        # piece k covers [j, i): prefix[i] - prefix[j] <= caps[k-1], i.e. j >= lowest[i]
        lowest = np.searchsorted(prefix, prefix - caps[k - 1] * (1 + 1e-12), side="left").tolist()
        previous, current, links = best[k - 1], best[k], back[k]
        window: deque[tuple[float, int]] = deque()  # (best[k-1][j] + cut[j], j), values increasing
        for i in range(1, n + 1):
            j = i - 1  # admit j = i - 1
            if previous[j] < inf:
                value = previous[j] + cut[j]
                while window and window[-1][0] >= value:
                    window.pop()
                window.append((value, j))
            while window and window[0][1] < lowest[i]:
                window.popleft()
            if window:
                current[i], links[i] = window[0]
        if current[n] < inf:
            bounds = [n]
            for level in range(k, 0, -1):
                bounds.append(back[level][bounds[-1]])
            found[k] = bounds[::-1]
    return found


def balanced_cuts(seconds: np.ndarray, speed: np.ndarray, demand: np.ndarray, caps: np.ndarray,
                  cut_seconds: np.ndarray | None = None) -> list[int] | None:
    """Boundaries of at most ``len(caps)`` pieces, piece k within ``caps[k]``, minimising the largest piece's
    load on its device: its compute time (``seconds`` at speed 1, in order), plus with ``cut_seconds`` (per
    cut position, as :func:`cut_bytes`) the time of the sends and receives at its two cuts, as PipeDream's
    partitioner counts a stage's communication; greedy pieces under a bisected bottleneck. None when memory
    allows no cover."""
    n, m = seconds.size, caps.size
    work = np.concatenate([[0.0], np.cumsum(seconds)])
    prefix = np.concatenate([[0.0], np.cumsum(demand)])
    comm = None if cut_seconds is None else np.concatenate([cut_seconds, [0.0]])  # no cut after the last unit

    def longest(start: int, k: int, bottleneck: float, limit: int) -> int:
        """The last end up to ``limit`` of piece k from ``start`` within the bottleneck (with communication its
        load is not monotone in the end: the cut it ends at may carry less than a shorter piece's)."""
        by_time = int(np.searchsorted(work, work[start] + bottleneck * speed[k] * (1 + 1e-12), side="right")) - 1
        if comm is None:
            return min(by_time, limit)
        ends = np.arange(start + 1, min(by_time, limit) + 1)
        load = (work[ends] - work[start]) / speed[k] + comm[start] + comm[ends]
        ok = np.nonzero(load <= bottleneck * (1 + 1e-12))[0]
        return int(ends[ok[-1]]) if ok.size else start

    def cover(bottleneck: float) -> list[int] | None:
        bounds, start = [0], 0
        for k in range(m):
            if start == n:
                break
            by_memory = int(np.searchsorted(prefix, prefix[start] + caps[k] * (1 + 1e-12), side="right")) - 1
            end = longest(start, k, bottleneck, min(by_memory, n))
            if end <= start:
                return None
            bounds.append(end)
            start = end
        return bounds if start == n else None

    low, high = 0.0, float(work[-1] / speed.min()) + (0.0 if comm is None else 2 * float(comm.max()))
    best = cover(high * (1 + 1e-9))
    if best is None:
        return None
    for _ in range(40):
        mid = (low + high) / 2
        found = cover(mid)
        if found is None:
            low = mid
        else:
            high, best = mid, found
    return best


def split(graph: ComputationGraph, cluster: Cluster, seed: int = 0, *, step: Step = PLAIN_STEP) -> np.ndarray:
    """The best, by the simulator of ``step``, of the contiguous splits of the module docstring (a device per
    node); for a pipelined step also the balanced splits whose stage loads count their sends and receives."""
    budget = MemoryBudget(graph, cluster)
    order = units_in_topological_order(graph)
    demand = budget.demand[order]
    seconds = np.bincount(graph.unit_of, weights=graph.cost, minlength=graph.num_units)[order]
    cuts = cut_bytes(graph, order)
    m = cluster.num_devices
    candidates: list[np.ndarray] = []
    device_orders = [np.arange(m), np.argsort(-cluster.memory, kind="stable")]
    for devices in {tuple(d.tolist()) for d in device_orders}:
        devices_arr = np.asarray(devices, dtype=np.int64)
        caps = cluster.memory[devices_arr].astype(np.float64)
        found = list(fewest_bytes_cuts(demand, caps[: min(m, order.size)], cuts).values())
        balanced = [balanced_cuts(seconds, cluster.speed[devices_arr], demand, caps)]
        if step.pipelined:  # a stage's load: its compute and the sends and receives at its two cuts
            link = cluster.bandwidth[np.ix_(devices_arr, devices_arr)]
            slowest = float(np.min(link[~np.eye(m, dtype=bool)])) if m > 1 else float("inf")
            balanced.append(balanced_cuts(seconds, cluster.speed[devices_arr], demand, caps, cuts / slowest))
        for bounds in found + [b for b in balanced if b is not None]:
            if bounds is not None:
                units = np.empty(graph.num_units, dtype=np.int64)
                for k in range(len(bounds) - 1):
                    units[order[bounds[k]:bounds[k + 1]]] = devices_arr[k]
                candidates.append(units)
    if not candidates:  # no cover within the budgets: fill devices in order by memory share, the repair moves
        share = np.concatenate([[0.0], np.cumsum(demand)]) / max(demand.sum(), 1e-300)
        edges = np.cumsum(cluster.memory) / cluster.memory.sum()
        units = np.empty(graph.num_units, dtype=np.int64)
        units[order] = np.minimum(np.searchsorted(edges, share[:-1], side="right"), m - 1)
        candidates.append(units)
    weight = np.bincount(graph.unit_of, weights=graph.param_bytes, minlength=graph.num_units)[order]
    can_begin = unit_can_begin(graph)
    for units in candidates:  # every stage worth a device: one without parameters joins its neighbour
        units[order] = merge_weightless_runs(units[order], weight, can_begin)
    rows = np.stack([c[graph.unit_of] for c in candidates])
    batch = Simulator(graph, cluster, DEFAULT_PARAM_FACTOR, *step).simulate_batch(rows, check=False)
    best = int(np.lexsort((batch.makespan, overflow_bytes(batch.peak_memory, cluster)))[0])
    return rows[best]
