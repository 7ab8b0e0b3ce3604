"""The compiled (numba) event loop of the pipelined step (``docs/spec/simulator.md`` section 3a).

It runs the unrolled graph of :mod:`placement_env.sim.pipeline` in its topological positions (as
:mod:`placement_env.sim.kernel` does the plain step) and is held to :func:`placement_env.sim.reference.
simulate_reference` with ``microbatches > 1`` by the tests (identical results, not close). The plain kernel's
device-scan cannot be reused: it queues an op as soon as its inputs' arrival times are known and starts the
queue's earliest, while a schedule chooses among the ops that *are* ready when a device frees, so a later
arrival with a smaller key must wait to be seen. Here:

* one binary heap of events ``(time, phase * S + key)``: op completions (key: position) and transfer
  completions (key: booking number), the spec's order at equal times; at most one of each per device (a
  device runs one op at a time, and the transfers into it end in booking order, so only the next one is an
  event: the heap stays at 2 M entries); a device start is only ever requested
  for the current instant and runs after its completions, so it is a flag per device, taken lowest device
  first once no completion is left at that instant (heap traffic halved). Transfers are booked
  when their producer completes, in destination order (as the spec's booking phase orders them: bookings at
  one instant follow the completions in position order, and only bookings read the channels);
* per device, class (0, 1, 2) and micro-batch a queue of the ready ops keyed by the schedule key (a sorted
  run that turns into a binary heap as the plain kernel's queues do: within one micro-batch ops mostly become
  ready in topological order, so an insertion moves next to nothing), so the schedule's choice is a scan for
  the first non-empty queue and a capped forward op (1F1B) lets the next
  class go first;
* a queue is a chunk (one class and micro-batch of a device): ``lastq[d]`` names the queue of the op the device
  started last, and a ready op there goes before the schedule's scan (a started chunk runs on); under GPipe
  ``fwd_left[d]`` counts the device's forward ops not yet ended, and its backward class is skipped until 0;
* no helper function takes the loop's own arrays: numba increments and decrements an array's reference count,
  an atomic instruction each, for every array passed to a function it does not inline, which cost a fifth of
  the run when queueing a ready op was such a helper (found with ``perf``); ops that become ready are listed
  and queued at the top of the loop instead, and each op's class is computed once per graph, not per placement;
* the memory sweep is the plain kernel's :func:`~placement_env.sim.kernel._peak_memory`: its assumptions
  (transfers booked in execution order, one channel per direction) hold here too; the gradient accumulation
  (a device's parameter bytes once more from its first backward op of a micro-batch >= 1) rides on that op's
  start (``accumulates``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from placement_env.sim.kernel import RUN_LIMIT, Workspace, _heap_pop, _peak_memory, _run_insert, _sift_up, _unsigned
from placement_env.sim.pipeline import FORWARD, Unrolled, schedule_keys

_INF = np.inf
_OP_DONE, _TRANSFER_DONE, _START = 0, 1, 3


@njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz"},
      locals=_unsigned("u", "a", "b", "v", "d", "k", "c", "j", "w", "x"))
def pipeline_core(cost, out_bytes, param_bytes, sptr, sdst, sbytes, indeg, iptr, in_slot, place,
                  key, klass, micro, forward, first, capped, microbatches,
                  speed, bandwidth, latency, param_factor,
                  start, end, remaining, hoff, devops, xsrc, xa, xb, xs, xe, xbytes, xfirst, xcount,
                  free_at_op, events, busy, peak, reads, last_reader,
                  etime, ekey, rkey, rval, xnext):
    """Simulate one placement of an unrolled step (positions as in the plain kernel); fills the same
    arrays. ``key``: the schedule key of each position; ``klass``: its class (``key // (n (microbatches + 1))``:
    which of forward, backward and update a device prefers); ``micro``: its micro-batch (``microbatches`` for
    an update op); ``forward``: 1 for a forward op; ``first``: the graph's topological index of the op a
    forward position copies (stage order); ``capped``: 1 for 1F1B's limit of micro-batches in flight.
    ``etime`` / ``ekey``: the event heap; ``rkey`` / ``rval``: the ready queues; ``xnext``: each transfer's
    successor on its receive channel. Returns
    ``(makespan, transfers)``, ``(-1.0, -1)`` for a deadlock (which the rule cannot produce)."""
    n = cost.shape[0]
    m = speed.shape[0]
    mb = microbatches
    wide = m > 63
    S = n + sdst.shape[0] + m + 1  # secondary event key = phase * S + key
    nq = 3 * m * (mb + 1)  # ready queue of (device d, class c, micro-batch k): (3d + c)(m + 1) + k
    counts = np.zeros(nq, np.int64)
    dcount = np.zeros(m, np.int64)
    static = np.zeros(m)
    held = np.zeros(m)  # parameter bytes per device: the gradients a later micro-batch makes before adding them
    accumulates = np.full(m, -1, np.int64)  # the first backward op of a micro-batch >= 1 each device starts
    left = np.zeros(m * (mb + 1), np.int64)
    fwd_left = np.zeros(m, np.int64)  # forward ops of each device not yet ended (GPipe holds backward ops until 0)
    gpipe = capped == 0
    firstd = np.full(m, np.iinfo(np.int64).max)
    for v in range(n):
        d = place[v]
        counts[(3 * d + klass[v]) * (mb + 1) + micro[v]] += 1
        dcount[d] += 1
        fwd_left[d] += forward[v]
        static[d] += param_bytes[v] * param_factor
        held[d] += param_bytes[v]
        left[d * (mb + 1) + micro[v]] += 1
        if forward[v] == 1 and first[v] < firstd[d]:
            firstd[d] = first[v]
    caps = np.full(m, mb + 1, np.int64)
    if capped == 1:
        stages = 0
        for d in range(m):
            stages += int(firstd[d] < np.iinfo(np.int64).max)
        for d in range(m):
            if firstd[d] < np.iinfo(np.int64).max:
                s = 0
                for e in range(m):
                    s += int(firstd[e] < firstd[d])
                caps[d] = stages - s
    qoff = np.zeros(nq + 1, np.int64)  # queue q at rkey/rval[qoff[q]:qoff[q] + qlen[q]] (its front moves)
    for q in range(nq):
        qoff[q + 1] = qoff[q] + counts[q]
    qlen = np.zeros(nq + 1, np.int64)  # queue nq: always empty, the chunk of a device that has run nothing yet
    lastq = np.full(m, nq, np.int64)  # the queue (chunk) of the op each device started last
    heaped = np.zeros(nq, np.int64)  # 1 while queue q is a binary heap, 0 while a sorted run
    ccount = np.zeros(3 * m, np.int64)  # ready ops of (device d, class c) at 3d + c
    low = np.zeros(3 * m, np.int64)  # and the lowest micro-batch among them
    hoff[0] = 0
    for d in range(m):
        hoff[d + 1] = hoff[d] + dcount[d]
        busy[d] = 0.0
    dcnt = np.zeros(m, np.int64)
    retired = np.zeros(m, np.int64)
    running = np.full(m, -1, np.int64)
    send_free = np.zeros(m)
    recv_free = np.zeros(m)
    need = np.full(m, -1.0)
    rcnt = np.zeros(m, np.int64)
    xto = np.zeros(m, np.int64)  # the transfer of the completing op to each device
    # transfers into one device end in booking order (its receive channel runs them one after another), so
    # each device's arrivals wait in a list (xnext) and only its next one is an event
    fifo_tail = np.full(m, -1, np.int64)
    elen = 0

    # ops whose last input has just arrived on their device, queued at the top of the loop (one place: a
    # helper taking the queues' arrays would pay an atomic reference count per array per call)
    fresh = np.empty(n, np.int64)
    nfresh = 0
    for v in range(n):
        remaining[v] = indeg[v]
        if indeg[v] == 0:
            fresh[nfresh] = v
            nfresh += 1
    # device starts pending at the current time (a start is only ever requested for the current time, and
    # comes after every completion at that time): a flag per device instead of heap events
    pending = np.ones(m, np.int64)
    npending = m

    nx = 0
    makespan = 0.0
    t = 0.0
    while True:
        for i in range(nfresh):  # queue each: a sorted run while an insertion moves at most RUN_LIMIT
            v = fresh[i]  # entries (ops mostly become ready in key order), a binary heap until it empties
            b = place[v]
            dc = 3 * b + klass[v]
            k = micro[v]
            kv = np.float64(key[v])
            ccount[dc] += 1  # ready ops of (device, class) dc, and the lowest micro-batch among them
            if ccount[dc] == 1 or k < low[dc]:
                low[dc] = k
            q = dc * (mb + 1) + k
            h = qoff[q]
            size = qlen[q]
            jr = h + size - (RUN_LIMIT + 1)  # read only when the run is longer than RUN_LIMIT
            if heaped[q] == 0 and (size <= RUN_LIMIT or rkey[jr] < kv):
                _run_insert(rkey, rval, h, h + size, kv, v)
            else:
                heaped[q] = 1
                _sift_up(rkey, rval, h, size, kv, v)
            qlen[q] = size + 1
            if running[b] < 0:  # ask an idle device to start (a busy one looks again when its op ends)
                npending += 1 - pending[b]
                pending[b] = 1
        nfresh = 0
        if elen == 0 and npending == 0:
            break
        if elen > 0 and (npending == 0 or etime[0] == t):  # a completion now (or the next event)
            t = etime[0]
            ev = _heap_pop(etime, ekey, 0, elen)
            elen -= 1
            phase = _OP_DONE if ev < S else _TRANSFER_DONE  # no division: only two kinds of events
        else:
            phase = _START
            ev = 0
            while pending[ev] == 0:
                ev += 1
            pending[ev] = 0
            npending -= 1
        if phase == _OP_DONE:
            u = ev - _OP_DONE * S
            a = place[u]
            running[a] = -1
            makespan = max(makespan, t)
            j = a * (mb + 1) + micro[u]
            left[j] -= 1
            fwd_left[a] -= forward[u]
            while retired[a] < mb and left[a * (mb + 1) + retired[a]] == 0:
                retired[a] += 1
            remote = 0  # bit b: a consumer on device b != a (up to 63 devices; all of them tested beyond)
            for k in range(sptr[u], sptr[u + 1]):
                b = place[sdst[k]]
                if b != a:
                    need[b] = max(need[b], sbytes[k])
                    remote |= 1 << (b & 63)
            xfirst[u] = nx
            for b in range(m if remote != 0 else 0):
                if (need[b] >= 0.0) if wide else ((remote >> b) & 1):
                    nb = need[b]
                    s0 = max(t, max(send_free[a], recv_free[b]))
                    e0 = s0 + (latency[a, b] + nb / bandwidth[a, b])
                    send_free[a] = e0
                    recv_free[b] = e0
                    xsrc[nx] = u
                    xa[nx] = a
                    xb[nx] = b
                    xs[nx] = s0
                    xe[nx] = e0
                    xbytes[nx] = nb
                    rcnt[b] += 1
                    xto[b] = nx
                    xnext[nx] = -1
                    if fifo_tail[b] < 0:  # b's channel was idle: this transfer's end is b's next arrival
                        _sift_up(etime, ekey, 0, elen, e0, _TRANSFER_DONE * S + nx)
                        elen += 1
                    else:
                        xnext[fifo_tail[b]] = nx
                    fifo_tail[b] = nx
                    nx += 1
                    need[b] = -1.0
            xcount[u] = nx - xfirst[u]
            for k in range(sptr[u], sptr[u + 1]):
                v = sdst[k]
                b = place[v]
                if b == a:
                    reads[in_slot[k]] = u
                    remaining[v] -= 1
                    if remaining[v] == 0:
                        fresh[nfresh] = v
                        nfresh += 1
                else:  # the copy booked for device b above
                    reads[in_slot[k]] = n + xto[b]
            npending += 1 - pending[a]
            pending[a] = 1
        elif phase == _TRANSFER_DONE:
            x = ev - _TRANSFER_DONE * S
            u = xsrc[x]
            b = xb[x]
            if xnext[x] >= 0:  # the next arrival on b's receive channel
                _sift_up(etime, ekey, 0, elen, xe[xnext[x]], _TRANSFER_DONE * S + xnext[x])
                elen += 1
            else:
                fifo_tail[b] = -1
            for k in range(sptr[u], sptr[u + 1]):
                v = sdst[k]
                if place[v] == b:
                    remaining[v] -= 1
                    if remaining[v] == 0:
                        fresh[nfresh] = v
                        nfresh += 1
        else:  # start, on device d, the ready op the schedule ranks first among those that may start
            d = ev
            if running[d] >= 0:
                continue
            q = -1
            if qlen[lastq[d]] > 0:  # the chunk of the op that just ended here runs on (lastq: a sentinel at first)
                q = lastq[d]
                dc = q // (mb + 1)
            else:
                for c in range(3):
                    dc = 3 * d + c
                    if ccount[dc] == 0 or (c == 1 and gpipe and fwd_left[d] > 0):  # GPipe: no backward yet
                        continue
                    q = dc * (mb + 1) + low[dc]  # the lowest micro-batch with a ready op of class c
                    v = rval[qoff[q]]
                    if forward[v] == 1 and micro[v] >= retired[d] + caps[d]:
                        q = -1
                        continue
                    break
            if q < 0:
                continue
            chosen = rval[qoff[q]]
            if heaped[q] == 0:
                qoff[q] += 1
            else:
                _heap_pop(rkey, rval, qoff[q], qlen[q])
                heaped[q] = np.int64(qlen[q] > 1)  # an empty queue starts again as a sorted run
            qlen[q] -= 1
            ccount[dc] -= 1
            if ccount[dc] > 0:
                while qlen[dc * (mb + 1) + low[dc]] == 0:
                    low[dc] += 1
            lastq[d] = q
            if chosen < 0:
                continue
            v = chosen
            if accumulates[d] < 0 and forward[v] == 0 and micro[v] >= 1 and micro[v] < mb:  # a backward op
                accumulates[d] = v
            dur = cost[v] / speed[d]
            e1 = t + dur
            start[v] = t
            end[v] = e1
            running[d] = v
            busy[d] += dur
            devops[hoff[d] + dcnt[d]] = v
            dcnt[d] += 1
            last_reader[v] = v
            for k in range(iptr[v], iptr[v + 1]):
                w = reads[k]
                last_reader[w] = v
            _sift_up(etime, ekey, 0, elen, e1, _OP_DONE * S + v)
            elen += 1

    for d in range(m):
        if dcnt[d] != dcount[d]:
            return -1.0, -1
    _peak_memory(n, m, out_bytes, start, end, hoff, devops, dcnt,
                 nx, xb, xs, xe, xbytes, xfirst, xcount, rcnt, free_at_op,
                 events, static, peak, last_reader, accumulates, held)
    return makespan, nx


@njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz"}, locals=_unsigned("v"))
def pipeline_batch(cost, out_bytes, param_bytes, sptr, sdst, sbytes, indeg, iptr, in_slot, placements, gather,
                   key, klass, micro, forward, first, capped, microbatches,
                   speed, bandwidth, latency, param_factor,
                   start, end, remaining, hoff, devops, xsrc, xa, xb, xs, xe, xbytes, xfirst, xcount,
                   free_at_op, events, busy, peak, reads, last_reader, etime, ekey, rkey, rval, xnext,
                   out_makespan, out_peak, out_busy):
    """Simulate every row of ``placements`` (B x N, a device per node of the graph, in node order);
    ``gather[k]``: the graph node that unrolled position ``k`` copies."""
    n = gather.shape[0]
    place = np.empty(n, np.int64)
    for i in range(placements.shape[0]):
        for k in range(n):
            place[k] = placements[i, gather[k]]
        mk, _ = pipeline_core(cost, out_bytes, param_bytes, sptr, sdst, sbytes, indeg, iptr, in_slot, place,
                              key, klass, micro, forward, first, capped, microbatches,
                              speed, bandwidth, latency, param_factor,
                              start, end, remaining, hoff, devops, xsrc, xa, xb, xs, xe, xbytes, xfirst, xcount,
                              free_at_op, events, busy, peak, reads, last_reader, etime, ekey, rkey, rval,
                              xnext)
        out_makespan[i] = mk
        out_peak[i, :] = peak
        out_busy[i, :] = busy


class PipelineWorkspace:
    """Buffers of :func:`pipeline_core` for an unrolled graph of ``n`` ops and ``e`` edges on ``m`` devices."""

    def __init__(self, n: int, e: int, m: int) -> None:
        self.plain = Workspace(n, e, m)
        x = e + 1
        self.etime = np.zeros(2 * m + 2)  # at most one op completion and one arrival per device
        self.ekey = np.zeros(2 * m + 2, np.int64)
        self.rkey = np.zeros(n + 1)
        self.rval = np.zeros(n + 1, np.int64)
        self.xnext = np.zeros(x, np.int64)

    def buffers(self) -> tuple:
        w = self.plain
        return (w.start, w.end, w.remaining, w.hoff, w.devops, w.xsrc, w.xa, w.xb, w.xs, w.xe, w.xbytes,
                w.xfirst, w.xcount, w.free_at_op, w.events, w.busy, w.peak, w.reads, w.last_reader,
                self.etime, self.ekey, self.rkey, self.rval, self.xnext)


def schedule_arrays(step: Unrolled, schedule: str, order: np.ndarray) -> tuple:
    """``(gather, key, klass, micro, forward, first, capped)`` of :func:`pipeline_batch` in the unrolled graph's
    topological positions (``order``: the node at each position)."""
    forward = (step.kind == FORWARD).astype(np.int64)
    key = schedule_keys(step, schedule)[order]
    klass = key // (step.graph.num_nodes * (step.microbatches + 1))
    return (step.origin[order].copy(), key.copy(), klass, step.micro[order].copy(),
            forward[order].copy(), step.origin_topo[order].copy(), np.int64(schedule == "1f1b"))
