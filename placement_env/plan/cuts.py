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
from .partitions import partition_uniform
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
    if name == "deepspeed-uniform":  # the first layers % k chunks one layer more
        return tuple(partition_uniform(layers, k)) if k <= layers else None
    pre = table.prefix
    zeros, k_zeros = np.zeros(layers + 1), np.zeros(k)
    if name == "parameters":  # partition_balanced: the heaviest chunk's parameters least, cut anywhere
        return cut_prefix(pre["parameter_bytes"], zeros, zeros, zeros, zeros, np.ones(k), k_zeros, np.ones(k),
                          np.zeros(k, dtype=np.bool_), np.full(k, np.inf), k_zeros, 1.0, 0.0, 3,
                          np.ones(layers + 1, dtype=bool), k)
    q = 1.0 / (d * m)

    def per_micro_batch(name: str) -> np.ndarray:
        return pre[name + "_fixed"] + q * (pre[name] - pre[name + "_fixed"])

    forward = per_micro_batch("forward")
    work = forward + per_micro_batch("backward_input") + per_micro_batch("backward_weight")
    if recompute:
        work = work + forward
    boundary = table.costs.boundary_bytes  # after layer i
    inputs = np.concatenate([[table.costs.input_bytes[0]], boundary[:-1], [0.0]])  # of a chunk beginning at layer i
    after = np.concatenate([[0.0], boundary])  # [b]: what a chunk ending before layer b sends on
    speed, latency, bandwidth = np.ones(k), np.zeros(k), np.ones(k)
    sends, memory, held = np.zeros(k, dtype=np.bool_), np.zeros(k), np.zeros(k)
    for c in range(k):
        dev, nxt = devices[c % s][0], devices[(c + 1) % s][0]
        sends[c] = nxt != dev and c < k - 1
        speed[c] = float(cluster.speed[dev])
        if sends[c]:
            latency[c], bandwidth[c] = float(cluster.latency[dev, nxt]), float(cluster.bandwidth[dev, nxt])
        memory[c] = min(float(cluster.memory[dev]) for dev in devices[c % s]) / v
        held[c] = in_flight(schedule, s, c % s, m, v)
    mode = 1 if recompute else 0 if recompute is False else 2
    return cut_prefix(work, after, pre["parameter_bytes"], pre["saved_bytes"], inputs, speed, latency, bandwidth,
                      sends, memory, held, q, param_factor, mode, table.allowed, k)


def cut_prefix(work: np.ndarray, after: np.ndarray, params: np.ndarray, saved: np.ndarray, inputs: np.ndarray,
               speed: np.ndarray, latency: np.ndarray, bandwidth: np.ndarray, sends: np.ndarray, memory: np.ndarray,
               held: np.ndarray, q: float, param_factor: float, mode: int, allowed: np.ndarray,
               k: int) -> tuple[int, ...] | None:
    """:func:`~placement_env.plan.cut_kernel.bottleneck_cut_kernel` (its arguments) as a tuple of boundaries, or
    None when no cut fits."""
    as_float = [np.ascontiguousarray(x, dtype=np.float64) for x in (work, after, params, saved, inputs, speed,
                                                                     latency, bandwidth)]
    found, parts = bottleneck_cut_kernel(*as_float, np.ascontiguousarray(sends, dtype=np.bool_),
                                         np.ascontiguousarray(memory, dtype=np.float64),
                                         np.ascontiguousarray(held, dtype=np.float64), float(q), float(param_factor),
                                         int(mode), np.ascontiguousarray(allowed, dtype=np.bool_), int(k))
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


__all__ = ["bottleneck_cut", "cut_prefix", "in_flight", "layer_cut", "rank_memory", "recompute_choice"]
