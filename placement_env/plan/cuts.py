"""Where a configuration's layers are cut into chunks, and what a rank holds: :func:`layer_cut` (by time within
memory, Megatron's uniform split, DeepSpeed's two rules), :func:`bottleneck_cut` (the search, written for
reading; the planner runs its compiled twin :func:`~placement_env.plan.cut_kernel.bottleneck_cut_kernel`),
:func:`rank_memory` and :func:`recompute_choice` (each rank's estimated peak, and where it must recompute).
"""

from __future__ import annotations

import numpy as np

from placement_env.cluster import Cluster

from .cut_kernel import bottleneck_cut_kernel
from .layers import ChunkCosts, LayerTable
from .schedules import SPLIT_BACKWARD


def in_flight(schedule: str, s: int, rank: int, m: int, v: int) -> float:
    """Micro-batches whose activations a rank holds at most (per chunk, for the interleaved schedule)."""
    if schedule == "gpipe":
        return m
    if schedule == "interleaved-1f1b":
        return min(2 * (s - rank - 1) + (v - 1) * s + 1, m * v) / v
    if schedule in SPLIT_BACKWARD:
        return min(s, m)
    return min(s - rank, m)


def rank_memory(costs: ChunkCosts, s: int, d: int, m: int, schedule: str, recompute: bool,
                 param_factor: float) -> np.ndarray:
    """Each rank's estimated peak bytes: its chunks' parameters, and the activations of the micro-batches it
    holds (:func:`in_flight`), recomputing or not."""
    v = costs.num_chunks // s
    q = 1.0 / (d * m)
    held = np.array([in_flight(schedule, s, c % s, m, v) for c in range(costs.num_chunks)])
    saved = np.ceil(q * costs.saved_bytes)
    active = held * np.ceil(q * costs.input_bytes) + saved if recompute else held * saved
    need = costs.parameter_bytes * param_factor + active
    return np.bincount(np.arange(costs.num_chunks) % s, weights=need, minlength=s)


def recompute_choice(costs: ChunkCosts, cluster: Cluster, s: int, d: int, m: int, schedule: str,
                      devices: tuple[tuple[int, ...], ...], recompute: bool | None,
                      param_factor: float) -> tuple[bool, ...] | None:
    """Per rank: recompute as asked, or (None) only where the estimated memory needs it; None when a rank does
    not fit even so."""
    memory = np.array([min(float(cluster.memory[dev]) for dev in devices[rank]) for rank in range(s)])
    plain = rank_memory(costs, s, d, m, schedule, False, param_factor)
    again = rank_memory(costs, s, d, m, schedule, True, param_factor)
    on = np.full(s, bool(recompute)) if recompute is not None else plain > memory
    if (np.where(on, again, plain) > memory).any():
        return None
    return tuple(bool(x) for x in on)


def layer_cut(table: LayerTable, cluster: Cluster, name: str, k: int, s: int, d: int, m: int, schedule: str, v: int,
         devices: tuple[tuple[int, ...], ...], recompute: bool | None,
         param_factor: float) -> tuple[int, ...] | None:
    """Chunk boundaries ``(0, ..., layers)`` of ``k`` chunks by ``name`` (None when none fits memory)."""
    layers = len(table)
    if name == "uniform":
        return table.uniform_cut(k)
    if name == "deepspeed-uniform":  # partition_uniform: the first layers % k chunks one layer more
        size, extra = divmod(layers, k)
        return tuple(c * size + min(c, extra) for c in range(k + 1)) if k <= layers else None
    pre = table.prefix
    if name == "parameters":  # partition_balanced: the heaviest chunk's parameters least, cut anywhere
        weight = pre["parameter_bytes"]
        spans = (weight[None, :] - weight[:, None])[None, :layers, :]
        return cut_tables(spans, np.zeros(k, dtype=np.int64), np.ones(spans.shape, dtype=bool),
                           np.zeros(k, dtype=np.int64), np.ones(layers + 1, dtype=bool), k)
    q = 1.0 / (d * m)

    def per_micro_batch(name: str) -> np.ndarray:
        return pre[name + "_fixed"] + q * (pre[name] - pre[name + "_fixed"])

    forward = per_micro_batch("forward")
    work = forward + per_micro_batch("backward_input") + per_micro_batch("backward_weight")
    if recompute:
        work = work + forward
    boundary = table.costs.boundary_bytes  # after layer i
    inputs = np.concatenate([[table.costs.input_bytes[0]], boundary[:-1]])  # of a chunk beginning at layer i
    span = work[None, :] - work[:, None]  # [a, b]: the layers a .. b-1
    after = np.concatenate([[0.0], boundary])  # [b]: what a chunk ending before layer b sends on
    cost_tables: dict[tuple, int] = {}
    fit_tables: dict[tuple, int] = {}
    costs: list[np.ndarray] = []
    fits: list[np.ndarray] = []
    cost_of, fit_of = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
    saved = np.ceil(q * np.maximum(pre["saved_bytes"][None, :] - pre["saved_bytes"][:, None], 0.0))
    static = (pre["parameter_bytes"][None, :] - pre["parameter_bytes"][:, None]) * param_factor
    for c in range(k):
        dev, nxt = devices[c % s][0], devices[(c + 1) % s][0]
        sends = nxt != dev and c < k - 1
        key = (float(cluster.speed[dev]), sends and float(cluster.latency[dev, nxt]),
               sends and float(cluster.bandwidth[dev, nxt]))
        if key not in cost_tables:
            table_of = span / key[0]
            if sends:
                table_of = table_of + 2 * (key[1] + q * after[None, :] / key[2])
            cost_tables[key] = len(costs)
            costs.append(table_of)
        cost_of[c] = cost_tables[key]
        rank = c % s
        memory = min(float(cluster.memory[dev]) for dev in devices[rank]) / v
        held = in_flight(schedule, s, rank, m, v)
        if (memory, held) not in fit_tables:
            plain = static + held * saved
            again = static + held * np.ceil(q * np.append(inputs, 0.0))[:, None] + saved
            need = again if recompute else plain if recompute is False else np.minimum(plain, again)
            fit_tables[memory, held] = len(fits)
            fits.append(need <= memory)
        fit_of[c] = fit_tables[memory, held]
    return cut_tables(np.stack(costs)[:, :layers, :], cost_of, np.stack(fits)[:, :layers, :], fit_of,
                       table.allowed, k)


def cut_tables(costs: np.ndarray, cost_of: np.ndarray, fits: np.ndarray, fit_of: np.ndarray,
                allowed: np.ndarray, k: int) -> tuple[int, ...] | None:
    """:func:`~placement_env.plan.cut_kernel.bottleneck_cut_kernel` as a tuple of boundaries, or None."""
    found, parts = bottleneck_cut_kernel(np.ascontiguousarray(costs), cost_of, np.ascontiguousarray(fits), fit_of,
                                         allowed, k)
    return tuple(int(x) for x in parts) if found else None


def bottleneck_cut(layers: int, k: int, cost, fits, allowed: np.ndarray | None = None) -> tuple[int, ...] | None:
    """The boundaries of ``k`` contiguous chunks of ``layers`` layers whose largest cost is least, each chunk
    fitting: ``cost(c, a)`` and ``fits(c, a)`` give, for chunk ``c`` beginning at layer ``a``, a value for each
    end ``b = a + 1 .. layers`` (arrays); ``allowed[b]`` (``layers + 1`` entries, default all) says where a chunk
    may end. A binary search over that cost, each probe packing chunks greedily (the longest that fits, in order;
    optimal for costs that grow with a chunk). None when no cut fits."""
    if allowed is None:
        allowed = np.ones(layers + 1, dtype=bool)
    ends_at = np.flatnonzero(allowed[1:]) + 1  # where a chunk may end, the last at ``layers``
    known: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def ends(c: int, a: int) -> tuple[np.ndarray, np.ndarray]:  # the same for every probe: computed once
        if (c, a) not in known:
            known[c, a] = (cost(c, a), fits(c, a))
        return known[c, a]

    def pack(limit: float) -> tuple[int, ...] | None:
        parts, a = [0], 0
        for c in range(k):
            left = k - c - 1  # chunks still to come, each ending at a place of its own
            if ends_at.size - 1 - left < 0:
                return None
            room = int(ends_at[ends_at.size - 1 - left]) - a  # the most layers this chunk may take
            if room < 1:
                return None
            time_of, fitting = ends(c, a)
            ok = (time_of[:room] <= limit) & fitting[:room]
            if c == k - 1:
                if not ok[room - 1] or a + room != layers:
                    return None
                take = room
            else:
                run = room if ok.all() else int(np.argmin(ok))
                places = np.flatnonzero(allowed[a + 1:a + run + 1])
                if places.size == 0:
                    return None
                take = int(places[-1]) + 1
            a += take
            parts.append(a)
        return tuple(parts) if a == layers else None

    hi = float(max(ends(c, 0)[0].max() for c in range(k))) * 4 + 1e-30  # above any chunk's cost
    best = pack(hi)
    if best is None:
        return None
    lo = 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        found = pack(mid)
        if found is not None:
            best, hi = found, mid
        else:
            lo = mid
        if hi - lo <= 1e-4 * hi:
            break
    return best


__all__ = ["bottleneck_cut", "cut_tables", "in_flight", "layer_cut", "rank_memory", "recompute_choice"]
