"""The reference event loop of one replica of a plan (``docs/spec/simulator.md`` section 3b), written for
reading: :func:`simulate_replica_reference`. The compiled loop
(:func:`~placement_env.plan.plan_kernel.simulate_replica_kernel`) takes the same inputs and must give identical
results (``tests/test_plan_step.py``).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

F, B, W = 0, 1, 2


def simulate_replica_reference(kind, chunk, micro, devices, f_time, b_time, w_time, message, saved, kept, recompute,
                               held, latency, bandwidth, split):
    """As :func:`~placement_env.plan.plan_kernel.simulate_replica_kernel` (same arguments, same returns)."""
    s_, n = kind.shape
    k_ = len(f_time)
    f_end: dict[tuple[int, int], float] = {}
    b_end: dict[tuple[int, int], float] = {}
    arrived: list[dict[tuple[int, int], float]] = [{}, {}]  # activations, gradients: (chunk, micro-batch) -> time
    position = [0] * s_
    running = [False] * s_
    last_end, busy, chunk_ready = np.zeros(s_), np.zeros(s_), np.zeros(k_)
    start, end = np.zeros((s_, n)), np.zeros((s_, n))
    memory: list[list[tuple[float, float]]] = [[] for _ in range(s_)]
    accumulating = [False] * s_  # a rank's weight gradients of a micro-batch >= 1 being made: its parameters again
    send_free, recv_free = np.zeros(s_), np.zeros(s_)
    events: list[tuple[float, int, int, tuple[int, int, int]]] = []
    booked = 0
    by_device = sorted(range(s_), key=lambda s: int(devices[s]))

    def ready(s: int, t: float) -> bool:
        """Whether rank ``s``'s next task may start at ``t``: its input is there (and, for a backward, its own
        forward has ended)."""
        kd, c, k = int(kind[s, position[s]]), int(chunk[s, position[s]]), int(micro[s, position[s]])
        if kd == F:
            return c == 0 or arrived[0].get((c, k), math.inf) <= t
        if kd == B:
            return (c, k) in f_end and (c == k_ - 1 or arrived[1].get((c, k), math.inf) <= t)
        return (c, k) in b_end

    def finish(t: float, s: int, i: int) -> None:
        """Rank ``s``'s task ``i`` ends at ``t``: its memory freed, its result sent on."""
        nonlocal booked
        kd, c, k = int(kind[s, i]), int(chunk[s, i]), int(micro[s, i])
        running[s] = False
        last_end[s] = t
        if kd == W or (kd == B and not split):
            memory[s].append((t, -(saved[c] + kept[c]) if recompute[c] else -saved[c]))
            chunk_ready[c] = max(chunk_ready[c], t)
        if kd == F:
            f_end[(c, k)] = t
        elif kd == B:
            b_end[(c, k)] = t
        if kd == W or (kd == F and c == k_ - 1) or (kd == B and c == 0):
            return
        to, direction = (c + 1, 0) if kd == F else (c - 1, 1)
        a, b = c % s_, to % s_
        if a == b:  # the next chunk on the same device: no transfer
            arrived[direction][(to, k)] = t
            return
        begin = max(t, send_free[a], recv_free[b])
        done = begin + float(latency[a, b]) + float(message[min(c, to)]) / float(bandwidth[a, b])
        send_free[a] = recv_free[b] = done
        heapq.heappush(events, (done, 1, booked, (direction, to, k)))
        booked += 1

    t = 0.0
    while True:
        zero = False
        for s in by_device:
            if running[s] or position[s] == n or not ready(s, t):
                continue
            i = position[s]
            kd, c = int(kind[s, i]), int(chunk[s, i])
            position[s] += 1
            seconds = float((f_time, b_time, w_time)[kd][c])
            running[s] = True
            busy[s] += seconds
            if kd == F:
                memory[s].append((t, kept[c] if recompute[c] else saved[c]))
            elif kd == B and recompute[c]:
                memory[s].append((t, saved[c]))
            if int(micro[s, i]) >= 1 and not accumulating[s] and (kd == W or (kd == B and not split)):
                accumulating[s] = True
                memory[s].append((t, float(held[s])))
            start[s, i], end[s, i] = t, t + seconds
            heapq.heappush(events, (t + seconds, 0, int(devices[s]), (s, i, 0)))
            if seconds == 0:  # its end comes before any other start at this instant
                zero = True
                break
        if not events:
            break
        if not zero:
            t = events[0][0]
        while events and events[0][0] <= t:
            _, cls, _, payload = heapq.heappop(events)
            if cls == 0:
                finish(t, payload[0], payload[1])
            else:
                direction, to, k = payload
                arrived[direction][(to, k)] = t
    stuck = next((s for s in range(s_) if position[s] < n), -1)
    activations = np.zeros(s_)
    for s in range(s_):
        level = top = 0.0
        for _, delta in sorted(memory[s], key=lambda e: (e[0], e[1] > 0)):  # frees first at equal times
            level += delta
            top = max(top, level)
        activations[s] = top
    return start, end, last_end, busy, chunk_ready, activations, stuck


__all__ = ["simulate_replica_reference"]
