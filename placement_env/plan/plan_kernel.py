"""The compiled (numba) event loop of one replica of a plan (``docs/spec/simulator.md`` section 3b).

The same events, in the same order, as :func:`placement_env.plan.plan_reference.simulate_replica_reference`,
which the tests hold it to (identical results, not close): each rank runs its sequence of tasks strictly in
order; a binary heap of events ``(time, class, key)`` (task ends keyed by device index, then transfer ends keyed
by booking number); a task starts, ranks in device order, once ready; a zero-length task's end is processed
before any further start at that instant; transfers are booked when their producer ends, on one send and one
receive channel per rank.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_F, _B, _W = 0, 1, 2


@njit(cache=True)
def _push(h_time, h_cls, h_key, h_a, h_b, h_c, size, time, cls, key, a, b, c):
    i = size
    h_time[i], h_cls[i], h_key[i], h_a[i], h_b[i], h_c[i] = time, cls, key, a, b, c
    while i > 0:
        parent = (i - 1) // 2
        if (h_time[parent], h_cls[parent], h_key[parent]) <= (h_time[i], h_cls[i], h_key[i]):
            break
        for arr in (h_cls, h_key, h_a, h_b, h_c):
            arr[parent], arr[i] = arr[i], arr[parent]
        h_time[parent], h_time[i] = h_time[i], h_time[parent]
        i = parent
    return size + 1


@njit(cache=True)
def _pop(h_time, h_cls, h_key, h_a, h_b, h_c, size):
    """Remove the smallest event (the caller has read it at index 0); the new size."""
    size -= 1
    h_time[0], h_cls[0], h_key[0], h_a[0], h_b[0], h_c[0] = (h_time[size], h_cls[size], h_key[size], h_a[size],
                                                              h_b[size], h_c[size])
    i = 0
    while True:
        left, right, smallest = 2 * i + 1, 2 * i + 2, i
        if left < size and (h_time[left], h_cls[left], h_key[left]) < (h_time[smallest], h_cls[smallest],
                                                                       h_key[smallest]):
            smallest = left
        if right < size and (h_time[right], h_cls[right], h_key[right]) < (h_time[smallest], h_cls[smallest],
                                                                          h_key[smallest]):
            smallest = right
        if smallest == i:
            return size
        for arr in (h_cls, h_key, h_a, h_b, h_c):
            arr[smallest], arr[i] = arr[i], arr[smallest]
        h_time[smallest], h_time[i] = h_time[i], h_time[smallest]
        i = smallest


@njit(cache=True)
def simulate_replica_kernel(kind, chunk, micro, devices, f_time, b_time, w_time, message, saved, kept, recompute,
                            held, latency, bandwidth, split):
    """One replica's tasks and transfers.

    Args:
        kind, chunk, micro: (S, n) each rank's sequence (kind 0 F, 1 B, 2 W; chunk; micro-batch).
        devices: (S,) the cluster device of each rank (its index orders starts and ends at one instant).
        f_time, b_time, w_time: (K,) seconds of each chunk's tasks on its rank (recomputation and, unless
            ``split``, the weights' gradient already in ``b_time``).
        message: (K,) bytes chunk c sends to c + 1 (and receives back). ``saved``, ``kept``: (K,) activation
            bytes held per micro-batch, and a recomputing chunk's input bytes; ``recompute``: (K,) bool.
        held: (S,) each rank's parameter bytes, held once more from its first task that makes the weights'
            gradients of a micro-batch >= 1 (the gradient accumulation).
        latency, bandwidth: (S, S) between the ranks' devices.
        split: whether weight tasks are tasks of their own.

    Returns:
        ``(start, end, last_end, busy, chunk_ready, activations, stuck)``: (S, n) each task's start and end;
        (S,) each rank's last end, busy seconds and peak dynamic bytes (activations and the gradient
        accumulation); (K,) the end of each chunk's last
        backward (weight) task; the first rank left with tasks (-1 when none).
    """
    s_, n = kind.shape
    k_ = f_time.shape[0]
    m = 0
    for s in range(s_):
        for i in range(n):
            m = max(m, micro[s, i] + 1)
    f_end = np.full((k_, m), -1.0)
    b_end = np.full((k_, m), -1.0)
    forward_in = np.full((k_, m), np.inf)
    backward_in = np.full((k_, m), np.inf)
    position = np.zeros(s_, dtype=np.int64)
    running = np.zeros(s_, dtype=np.bool_)
    last_end = np.zeros(s_)
    busy = np.zeros(s_)
    chunk_ready = np.zeros(k_)
    start = np.zeros((s_, n))
    end = np.zeros((s_, n))
    mem_t = np.zeros((s_, 3 * n + 1))
    mem_d = np.zeros((s_, 3 * n + 1))
    accumulating = np.zeros(s_, dtype=np.bool_)
    mem_n = np.zeros(s_, dtype=np.int64)
    send_free = np.zeros(s_)
    recv_free = np.zeros(s_)
    capacity = s_ * n + s_ + 1
    h_time = np.zeros(capacity)
    h_cls = np.zeros(capacity, dtype=np.int64)
    h_key = np.zeros(capacity, dtype=np.int64)
    h_a = np.zeros(capacity, dtype=np.int64)
    h_b = np.zeros(capacity, dtype=np.int64)
    h_c = np.zeros(capacity, dtype=np.int64)
    size = 0
    booked = 0
    by_device = np.argsort(devices, kind="mergesort")
    t = 0.0
    while True:
        zero = False
        for idx in range(s_):
            s = by_device[idx]
            if running[s] or position[s] == n:
                continue
            i = position[s]
            kd, c, k = kind[s, i], chunk[s, i], micro[s, i]
            if kd == _F:
                ready = c == 0 or forward_in[c, k] <= t
            elif kd == _B:
                ready = f_end[c, k] >= 0 and (c == k_ - 1 or backward_in[c, k] <= t)
            else:
                ready = b_end[c, k] >= 0
            if not ready:
                continue
            position[s] += 1
            seconds = f_time[c] if kd == _F else (b_time[c] if kd == _B else w_time[c])
            running[s] = True
            busy[s] += seconds
            if kd == _F:
                mem_t[s, mem_n[s]], mem_d[s, mem_n[s]] = t, kept[c] if recompute[c] else saved[c]
                mem_n[s] += 1
            elif kd == _B and recompute[c]:
                mem_t[s, mem_n[s]], mem_d[s, mem_n[s]] = t, saved[c]
                mem_n[s] += 1
            if k >= 1 and not accumulating[s] and (kd == _W or (kd == _B and not split)):
                accumulating[s] = True
                mem_t[s, mem_n[s]], mem_d[s, mem_n[s]] = t, held[s]
                mem_n[s] += 1
            start[s, i], end[s, i] = t, t + seconds
            size = _push(h_time, h_cls, h_key, h_a, h_b, h_c, size, t + seconds, 0, devices[s], s, i, 0)
            if seconds == 0:
                zero = True
                break
        if size == 0:
            break
        if not zero:
            t = h_time[0]
        while size > 0 and h_time[0] <= t:
            cls, a, b, c = h_cls[0], h_a[0], h_b[0], h_c[0]
            size = _pop(h_time, h_cls, h_key, h_a, h_b, h_c, size)
            if cls == 1:  # a transfer ends: a is 0 for activations, 1 for a gradient; (b, c) its chunk, micro-batch
                if a == 0:
                    forward_in[b, c] = t
                else:
                    backward_in[b, c] = t
                continue
            s, i = a, b
            kd, ch, k = kind[s, i], chunk[s, i], micro[s, i]
            running[s] = False
            last_end[s] = t
            frees = kd == _W or (kd == _B and not split)
            if frees:
                mem_t[s, mem_n[s]] = t
                mem_d[s, mem_n[s]] = -(saved[ch] + kept[ch]) if recompute[ch] else -saved[ch]
                mem_n[s] += 1
                chunk_ready[ch] = max(chunk_ready[ch], t)
            if kd == _F:
                f_end[ch, k] = t
            elif kd == _B:
                b_end[ch, k] = t
            if kd == _W or (kd == _F and ch == k_ - 1) or (kd == _B and ch == 0):
                continue
            to = ch + 1 if kd == _F else ch - 1
            ra, rb = ch % s_, to % s_
            direction = 0 if kd == _F else 1
            if ra == rb:
                if direction == 0:
                    forward_in[to, k] = t
                else:
                    backward_in[to, k] = t
                continue
            begin = max(t, max(send_free[ra], recv_free[rb]))
            finish = begin + latency[ra, rb] + message[min(ch, to)] / bandwidth[ra, rb]
            send_free[ra] = finish
            recv_free[rb] = finish
            size = _push(h_time, h_cls, h_key, h_a, h_b, h_c, size, finish, 1, booked, direction, to, k)
            booked += 1
    stuck = -1
    for s in range(s_):
        if position[s] < n:
            stuck = s
            break
    activations = np.zeros(s_)
    for s in range(s_):
        count = mem_n[s]
        times, deltas = mem_t[s, :count], mem_d[s, :count]
        order = np.argsort(deltas > 0, kind="mergesort")  # frees first at equal times ...
        order = order[np.argsort(times[order], kind="mergesort")]  # ... then by time, stably
        level = 0.0
        top = 0.0
        for j in order:
            level += deltas[j]
            top = max(top, level)
        activations[s] = top
    return start, end, last_end, busy, chunk_ready, activations, stuck
