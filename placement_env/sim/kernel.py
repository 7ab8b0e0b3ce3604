"""The compiled (numba) event loop behind :func:`placement_env.simulate`.

Everything here works in *topological positions*: node ``i`` is the ``i``-th
node of the graph's topological order, so comparing positions is the spec's
topological-index tie-break. The semantics are those of
``docs/spec/simulator.md`` section 3; :mod:`placement_env.sim.reference` is the same
semantics written as a literal priority-queue simulation, and the tests hold
the two to identical results.

How the loop stays cheap (its cost per op is in ``docs/simulator.md``, printed by
``benchmarks/simulator.py``):

* At most one op runs per device, so each device holds exactly one candidate
  next event (its running op's completion, or its next start) and the next
  event is found by scanning the M devices, not by a global event heap.
* Transfers are booked (start and end fixed) when their producer completes,
  in (topological index, destination) order; a consumer's ready time is
  therefore known as soon as its last input is booked, and it goes straight
  into its device's ready queue keyed by (ready time, topological index).
  An idle device starts the queue's minimum at ``max(device free, ready time)``.
* A ready queue is a sorted run in the device's segment (inserted from the
  back, taken from the front): few ops wait at a time and they mostly become
  ready in key order, so an insertion moves next to nothing and taking the
  minimum is free. An insertion that would move more than ``RUN_LIMIT``
  entries turns the run into a binary heap instead (a sorted run already is
  one) until the queue empties, which bounds every operation by
  O(``RUN_LIMIT`` + log size).
* The buffer frees need no second pass over the edges. Ops on one device run
  one at a time, so of a buffer's readers (all on the buffer's device) the one
  that *starts* last also ends last: when an op starts it marks itself the
  last reader of every buffer it reads (``reads`` holds, per in-edge, which
  buffer it was: the producer's output or the received copy, written when the
  producer completed). Afterwards one pass over the transfers and one over
  each device's ops (in execution order) bucket the bytes each event frees.
* Peak memory needs no sort: on each device the op starts and ends, received
  transfer starts and sent transfer ends each come out of the simulation in
  time order, so one merge sweeps them. A buffer lives on the half-open
  interval [alloc, free) ("frees before allocations at equal times"), so the
  level is sampled only when time moves on. The merge picks the next event
  with selects, not jumps (which run it comes from is unpredictable), and
  compares times as integers (see :func:`_merge_peak`).
* Values used together sit together: per out-edge (consumer, its device, its
  in-edge slot) in one array, per device (arrival time, buffer) in one, the
  memory events as (time, bytes) pairs in one. Fewer arrays leave more of the
  loop's base pointers in registers.

``fastmath`` is limited to no-NaN / no-Inf / no-signed-zero assumptions (the
graph and cluster are validated): no reassociation, no reciprocal division,
so results stay bit-identical to the reference.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint32, uint64

_INF = np.inf
MAX_POSITIONS = 2**32  # array positions are uint32 (see _unsigned); Workspace refuses larger graphs
RUN_LIMIT = 32  # most entries one insertion into a sorted ready run may move (see the module docstring)


def _unsigned(*names: str) -> dict:
    """numba ``locals`` declaring these variables uint32.

    They hold array positions (ops, devices, edges, transfers). numba adds a
    negative-index wraparound to every array access through a signed integer;
    through an unsigned one it does not, which makes the whole simulation
    faster (``docs/simulator.md``; ``benchmarks/simulator.py``).
    """
    return {name: uint32 for name in names}


@njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz"},
      locals=_unsigned("base", "i", "p"))
def _sift_up(hkey, hval, base, i, key, val):
    """Move (key, val) up from the hole at position ``i`` of the heap at ``base`` to its place.

    With ``i`` = the heap's size this inserts (key, val) into the heap.
    """
    while i > 0:
        p = (i - 1) >> 1
        pk = hkey[base + p]
        pv = hval[base + p]
        if pk < key or (pk == key and pv < val):
            break
        hkey[base + i] = pk
        hval[base + i] = pv
        i = p
    hkey[base + i] = key
    hval[base + i] = val


@njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz"}, locals=_unsigned("lo", "i"))
def _run_insert(hkey, hval, lo, i, key, val):
    """Insert (key, val) into the sorted run ``hkey/hval[lo:i]``, which grows to ``[lo:i+1]``.

    Keys live in the queue itself (not behind an index), so each step costs
    one load instead of a chain of two: the queues are the loop's hottest structure.
    """
    while i > lo:
        pk = hkey[i - 1]
        pv = hval[i - 1]
        if pk < key or (pk == key and pv < val):
            break
        hkey[i] = pk
        hval[i] = pv
        i -= 1
    hkey[i] = key
    hval[i] = val


@njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz"},
      locals=_unsigned("base", "i", "c", "size"))
def _heap_pop(hkey, hval, base, size):
    """Remove and return the value of the smallest (key, value) of the heap.

    Bottom-up variant: the hole left by the root goes down to a leaf along the
    smaller children (chosen with selects, not jumps), then the last element
    rises from there, usually by zero or one level. This trades the two
    unpredictable comparisons per level of the textbook sift-down for one
    predictable loop.
    """
    top = hval[base]
    size -= 1
    if size == 0:
        return top
    lk = hkey[base + size]
    lv = hval[base + size]
    i = 0
    c = 1
    while c < size:
        ck = hkey[base + c]
        cv = hval[base + c]
        rk = hkey[base + c + 1]  # c + 1 <= size: inside the segment even when it is past the heap
        rv = hval[base + c + 1]
        right = (c + 1 < size) & ((rk < ck) | ((rk == ck) & (rv < cv)))
        c += np.int64(right)
        hkey[base + i] = hkey[base + c]
        hval[base + i] = hval[base + c]
        i = c
        c = 2 * i + 1
    _sift_up(hkey, hval, base, i, lk, lv)
    return top


@njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz"},
      locals=_unsigned("u", "a", "b", "v", "d", "k", "k0", "k1", "nx", "bd", "bk", "h", "j", "w"))
def sim_core(cost, out_bytes, param_bytes, sptr, sdst, sbytes, indeg, iptr, in_slot, place,
             speed, bandwidth, latency, param_factor,
             start, end, ready, remaining, hkey, heap, hoff, devops,
             xsrc, xa, xb, xs, xe, xbytes, xfirst, xcount,
             free_at_op, events,
             busy, peak, reads, last_reader):
    """Simulate one placement; fills ``start``/``end``/transfer arrays/``busy``/``peak``.

    The graph comes as out-edges (``sptr``/``sdst``/``sbytes``, by producer) and
    in-edges (``iptr``: each op's range of in-edge slots; ``in_slot[k]``: the
    slot of out-edge ``k``). Returns ``(makespan, number of transfers)``;
    ``(-1.0, -1)`` would mean a deadlock, which a DAG cannot produce.
    """
    n = cost.shape[0]
    m = speed.shape[0]
    hlen = np.zeros(m, np.int64)  # ready queue of device d: hkey/heap[qfront[d]:qfront[d] + hlen[d]]
    qfront = np.zeros(m, np.int64)  # absolute position of each device's queue front
    heaped = np.zeros(m, np.int64)  # 1 while device d's queue is a binary heap, 0 while a sorted run
    dcnt = np.zeros(m, np.int64)
    running = np.full(m, -1, np.int64)
    dfree = np.zeros(m)
    send_free = np.zeros(m)
    recv_free = np.zeros(m)
    need = np.full(m, -1.0)
    # per device: when the completing op's output arrives there (float at 2d) and which buffer
    # a consumer there reads (int at 2d + 1, through the int64 view)
    arrive = np.zeros(2 * m)
    arrive_id = arrive.view(np.int64)
    static = np.zeros(m)
    # next event of each device: (time, key); key = op (< n) for a completion,
    # n + device for a start, so ties put completions first, by topological index
    cand_t = np.full(m, _INF)
    cand_k = np.zeros(m, np.int64)
    rcnt = np.zeros(m, np.int64)  # transfers each device receives

    counts = np.zeros(m, np.int64)
    for v in range(n):
        d = place[v]
        counts[d] += 1
        static[d] += param_bytes[v] * param_factor
    hoff[0] = 0
    for d in range(m):
        hoff[d + 1] = hoff[d] + counts[d]
        qfront[d] = hoff[d]
        busy[d] = 0.0
        cand_k[d] = n + d

    for v in range(n):
        remaining[v] = indeg[v]
        ready[v] = 0.0
        if indeg[v] == 0:
            d = place[v]
            _run_insert(hkey, heap, hoff[d], hoff[d] + hlen[d], 0.0, v)  # in key order: appends
            hlen[d] += 1
    for d in range(m):
        if hlen[d] > 0:
            cand_t[d] = 0.0

    # per out-edge: consumer, its device, its in-edge slot. The device is read twice per
    # edge below: one load instead of a chain of two (edge -> consumer -> its device)
    erec = np.empty(3 * sdst.shape[0], np.uint32)
    for k in range(sdst.shape[0]):
        w = sdst[k]
        erec[3 * k] = w
        erec[3 * k + 1] = place[w]
        erec[3 * k + 2] = in_slot[k]

    wide = m > 63  # more devices than bits in the per-op destination mask: test need[] instead
    nx = 0
    makespan = 0.0
    for _ in range(2 * n):
        bd = 0
        bt = cand_t[0]
        bk = cand_k[0]
        for d in range(1, m):
            t = cand_t[d]
            k = cand_k[d]
            better = t < bt or (t == bt and k < bk)
            bd = d if better else bd
            bt = t if better else bt
            bk = k if better else bk
        if bt == _INF:  # cannot happen on a DAG
            return -1.0, -1
        if bk < n:  # completion of op bk on device bd at time bt
            u = bk
            a = bd
            running[a] = -1
            dfree[a] = bt
            makespan = max(makespan, bt)
            # one transfer per (tensor, destination device), size = largest edge
            k0 = sptr[u]
            k1 = sptr[u + 1]
            remote = 0  # bit b: a consumer on device b != a (a bit test beats a load; up to 63 devices)
            for k in range(k0, k1):
                b = erec[3 * k + 1]
                remote |= 1 << (b & 63)
                need[b] = max(need[b], sbytes[k])
            need[a] = -1.0  # consumers on the producer's device need no transfer
            remote &= ~(1 << (a & 63))
            xfirst[u] = nx
            for b in range(m if remote != 0 or wide else 0):
                if (need[b] >= 0.0) if wide else ((remote >> b) & 1):
                    nb = need[b]
                    s = max(bt, max(send_free[a], recv_free[b]))
                    e = s + (latency[a, b] + nb / bandwidth[a, b])
                    send_free[a] = e
                    recv_free[b] = e
                    xsrc[nx] = u
                    xa[nx] = a
                    xb[nx] = b
                    xs[nx] = s
                    xe[nx] = e
                    xbytes[nx] = nb
                    arrive[2 * b] = e
                    arrive_id[2 * b + 1] = n + nx
                    rcnt[b] += 1
                    nx += 1
                    need[b] = -1.0
            xcount[u] = nx - xfirst[u]
            arrive[2 * a] = bt  # same-device inputs arrive when the producer ends
            arrive_id[2 * a + 1] = u
            for k in range(k0, k1):
                v = erec[3 * k]
                b = erec[3 * k + 1]
                rv = max(ready[v], arrive[2 * b])
                ready[v] = rv
                j = erec[3 * k + 2]
                reads[j] = arrive_id[2 * b + 1]
                left = remaining[v] - 1
                remaining[v] = left
                if left == 0:
                    h = qfront[b]
                    j = h + hlen[b] - (RUN_LIMIT + 1)  # read only when the run is longer than RUN_LIMIT
                    if heaped[b] == 0 and (hlen[b] <= RUN_LIMIT or hkey[j] < rv or (hkey[j] == rv and heap[j] < v)):
                        _run_insert(hkey, heap, h, h + hlen[b], rv, v)
                    else:
                        heaped[b] = 1
                        _sift_up(hkey, heap, h, hlen[b], rv, v)
                    hlen[b] += 1
                    idle = running[b] < 0
                    cand_t[b] = max(dfree[b], hkey[h]) if idle else cand_t[b]
            h = qfront[a]  # the queue's minimum (read only when it is not empty)
            cand_t[a] = max(bt, hkey[h]) if hlen[a] > 0 else _INF
            cand_k[a] = n + a
        else:  # start the ready op of smallest (ready time, topological index) on device bd
            d = bd
            h = qfront[d]
            if heaped[d] == 0:
                v = heap[h]
                qfront[d] = h + 1
            else:
                v = _heap_pop(hkey, heap, h, hlen[d])
                heaped[d] = np.int64(hlen[d] > 1)  # an empty queue starts again as a sorted run
            hlen[d] -= 1
            dur = cost[v] / speed[d]
            e = bt + dur
            start[v] = bt
            end[v] = e
            running[d] = v
            busy[d] += dur
            j = hoff[d] + dcnt[d]
            devops[j] = v
            dcnt[d] += 1
            cand_t[d] = e
            cand_k[d] = v
            last_reader[v] = v  # its own output, until a reader on its device starts
            for k in range(iptr[v], iptr[v + 1]):  # v starts last, so ends last, among readers so far
                w = reads[k]
                last_reader[w] = v

    _peak_memory(n, m, out_bytes, start, end, hoff, devops, dcnt,
                 nx, xb, xs, xe, xbytes, xfirst, xcount, rcnt, free_at_op,
                 events, static, peak, last_reader, np.full(m, -1, np.int64), np.zeros(m))
    return makespan, nx


@njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz"},
      locals=_unsigned("u", "b", "d", "k", "x", "q", "r", "o", "j", "bid", "xl"))
def _peak_memory(n, m, out_bytes, start, end, hoff, devops, dcnt,
                 nx, xb, xs, xe, xbytes, xfirst, xcount, rcnt, free_at_op,
                 events, static, peak, last_reader, boost_op, boost):
    """Per-device peak = static + max over time of live outputs and received copies (and, from the start of
    op ``boost_op[d]`` when it is >= 0, ``boost[d]`` more bytes on device ``d`` to the end of the step: the
    pipelined step's gradient accumulation, ``docs/spec/simulator.md`` section 3a).

    Every buffer is freed at a known event: the end of its last reader on
    that device (``last_reader``, buffer ``u`` = op ``u``'s output, ``n + x``
    = transfer ``x``'s copy, filled by :func:`sim_core`), or, for an output,
    the end of its last transfer out of the device if that is later.

    Each device's events are laid out as three contiguous time-sorted runs
    of (time, bytes) slots, each closed by a +inf sentinel, then merged by
    :func:`_merge_peak`. Slot ``i`` is ``events[2i]`` (time) and
    ``events[2i + 1]`` (bytes); the op runs take the first ``2n + m`` slots,
    the received-copy runs the next ``x + m``, the sent-output runs the last ``n + m``:

    * received copies (start: +copy), in booking order, which on the receiving
      device is start order; one pass over the transfers writes them and
      credits each copy's bytes to the end of its last reader;
    * the device's ops in execution order (start: +output, end: -freed), and
    * the outputs freed by a transfer's end, in the same order: one op's
      transfers leave one after another on the device's send channel, so the
      last one booked ends last, and the ops' transfers are booked in execution
      order. At most one such entry per op, so device d's run starts at slot ``hoff[d] + d`` of its part.

    Ends that free nothing are left out (written, then overwritten): an event
    that leaves the level unchanged cannot change the peak.
    """
    for v in range(n):
        free_at_op[v] = 0.0
    # first slots of the received-copy and sent-output parts of ``events``
    r0 = 2 * n + m
    s0 = r0 + xe.shape[0] + m
    rbase = np.empty(m, np.int64)
    rfill = np.empty(m, np.int64)
    r = r0
    for d in range(m):
        rbase[d] = r
        rfill[d] = r
        r += rcnt[d] + 1
    for x in range(nx):
        b = xb[x]
        j = rfill[b]
        events[2 * j] = xs[x]
        events[2 * j + 1] = xbytes[x]
        rfill[b] += 1
        j = last_reader[n + x]
        free_at_op[j] += xbytes[x]
    for d in range(m):
        j = rfill[d]
        events[2 * j] = _INF

    obase = np.empty(m, np.int64)
    ocnt = np.empty(m, np.int64)
    sbase = np.empty(m, np.int64)
    scnt = np.empty(m, np.int64)
    o = 0
    for d in range(m):
        obase[d] = o
        q = s0 + hoff[d] + d
        sbase[d] = q
        for k in range(hoff[d], hoff[d] + dcnt[d]):
            u = devops[k]
            ob = out_bytes[u]
            bid = last_reader[u]
            t_free = end[bid]
            # the end of u's last transfer; with none, a slot past them that is read but not used
            xl = xfirst[u] + max(xcount[u], 1) - 1
            t_sent = xe[xl]
            by_transfer = (xcount[u] > 0) & (t_sent > t_free)
            events[2 * q] = t_sent
            events[2 * q + 1] = -ob
            q += np.int64(by_transfer & (ob != 0.0))
            free_at_op[bid] += 0.0 if by_transfer else ob
            # what u's end frees is complete: copies were credited above, outputs by ops that ran before u
            events[2 * o] = start[u]
            events[2 * o + 1] = ob + (boost[d] if np.int64(u) == boost_op[d] else 0.0)
            events[2 * o + 2] = end[u]
            freed = free_at_op[u]
            events[2 * o + 3] = -freed
            o += 1 + np.int64(freed != 0.0)
        ocnt[d] = o - obase[d]
        events[2 * o] = _INF
        o += 1
        scnt[d] = q - sbase[d]
        events[2 * q] = _INF

    for d in range(m):
        # merge the three time-sorted runs. The level after all events of one
        # instant is the live memory until the next instant, so the peak is
        # sampled only when time moves on and equal-time events may come in any order.
        pk = _merge_peak(events, 2 * obase[d], 2 * rbase[d], 2 * sbase[d], ocnt[d] + rcnt[d] + scnt[d])
        peak[d] = static[d] + pk


@njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz"},
      locals={"k": uint64, "r": uint64, "q": uint64, "j": uint64})
def _merge_peak(events: np.ndarray, k: int, r: int, q: int, count: int) -> float:
    """Highest memory level (bytes) over ``count`` events merged from three time-sorted runs.

    ``events`` holds (time, bytes) pairs; ``k``, ``r``, ``q`` are the positions
    of the three runs' first times (even), each run closed by a +inf time.
    Times are >= 0 or +inf, and for those IEEE doubles compare like their
    bit patterns read as int64: integer compares and selects choose the next
    event, which run it comes from decided without a jump (unpredictable,
    so a jump would be mispredicted about once per event). Positions are
    uint64: no negative-index wraparound, no zero extension.
    """
    times = events.view(np.int64)
    level = 0.0
    pk = 0.0
    t_prev = np.int64(0)
    for _ in range(count):
        t_op = times[k]
        t_r = times[r]
        t_q = times[q]
        c_op = (t_op <= t_r) & (t_op <= t_q)
        c_r = (t_r <= t_q) & ~c_op
        t = min(t_op, min(t_r, t_q))
        j = k if c_op else (r if c_r else q)
        if t > t_prev:
            pk = max(pk, level)
            t_prev = t
        level += events[j + 1]
        k += np.uint64(2) if c_op else np.uint64(0)
        r += np.uint64(2) if c_r else np.uint64(0)
        q += np.uint64(0) if (c_op | c_r) else np.uint64(2)
    return max(pk, level)


class Workspace:
    """Buffers for :func:`sim_core` sized for one graph and cluster, reused across calls.

    ``BUFFERS`` lists them in the order of :func:`sim_core`'s parameters, with
    their length (``n`` nodes, ``x`` transfer slots = edges, ``m`` devices; ``ev``:
    the (time, bytes) slot pairs of the memory events, see :func:`_peak_memory`) and type.
    """

    BUFFERS = (
        ("start", "n", np.float64), ("end", "n", np.float64), ("ready", "n", np.float64),
        ("remaining", "n", np.int64), ("hkey", "n+1", np.float64), ("heap", "n+1", np.int64),
        ("hoff", "m+1", np.int64), ("devops", "n", np.int64),
        ("xsrc", "x", np.int64), ("xa", "x", np.int64), ("xb", "x", np.int64), ("xs", "x", np.float64),
        ("xe", "x", np.float64), ("xbytes", "x", np.float64), ("xfirst", "n", np.int64),
        ("xcount", "n", np.int64),
        ("free_at_op", "n", np.float64),
        ("events", "ev", np.float64),
        ("busy", "m", np.float64), ("peak", "m", np.float64),
        ("reads", "x", np.int64), ("last_reader", "n+x", np.int64),
    )

    start: np.ndarray
    end: np.ndarray
    ready: np.ndarray
    remaining: np.ndarray
    hkey: np.ndarray
    heap: np.ndarray
    hoff: np.ndarray
    devops: np.ndarray
    xsrc: np.ndarray
    xa: np.ndarray
    xb: np.ndarray
    xs: np.ndarray
    xe: np.ndarray
    xbytes: np.ndarray
    xfirst: np.ndarray
    xcount: np.ndarray
    free_at_op: np.ndarray
    events: np.ndarray
    busy: np.ndarray
    peak: np.ndarray
    reads: np.ndarray
    last_reader: np.ndarray

    def __init__(self, n: int, e: int, m: int) -> None:
        x = e + 1  # one slot more than transfers can fill: _peak_memory reads one past an op's transfers
        if 3 * n + x + 3 * m >= MAX_POSITIONS:  # the largest: (time, bytes) slots of the memory events
            raise ValueError(f"graph of {n} ops and {e} edges is too large for the simulator "
                             f"(positions must stay below {MAX_POSITIONS})")
        lengths = {"n": n, "n+1": n + 1, "n+x": n + x, "m": m, "m+1": m + 1, "x": x,
                   "ev": 2 * ((2 * n + m) + (x + m) + (n + m))}
        for name, size, dtype in self.BUFFERS:
            setattr(self, name, np.zeros(lengths[size], dtype))

    def buffers(self) -> tuple:
        return tuple(getattr(self, name) for name, _, _ in self.BUFFERS)


@njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz"}, locals=_unsigned("v"))
def sim_batch(cost, out_bytes, param_bytes, sptr, sdst, sbytes, indeg, iptr, in_slot, placements, order,
              speed, bandwidth, latency, param_factor,
              start, end, ready, remaining, hkey, heap, hoff, devops,
              xsrc, xa, xb, xs, xe, xbytes, xfirst, xcount,
              free_at_op, events, busy, peak, reads, last_reader,
              out_makespan, out_peak, out_busy):
    """Simulate every row of ``placements`` (B x N, device per node in node order).

    ``order[k]`` is the node at topological position ``k``; each row is
    gathered into topological positions here (faster than numpy's column
    gather of the whole B x N array, and no B x N copy).
    """
    n = order.shape[0]
    place = np.empty(n, np.int64)
    for i in range(placements.shape[0]):
        for k in range(n):
            v = order[k]
            place[k] = placements[i, v]
        mk, _ = sim_core(cost, out_bytes, param_bytes, sptr, sdst, sbytes, indeg, iptr, in_slot, place,
                         speed, bandwidth, latency, param_factor,
                         start, end, ready, remaining, hkey, heap, hoff, devops,
                         xsrc, xa, xb, xs, xe, xbytes, xfirst, xcount,
                         free_at_op, events, busy, peak, reads, last_reader)
        out_makespan[i] = mk
        out_peak[i, :] = peak
        out_busy[i, :] = busy
