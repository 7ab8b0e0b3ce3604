"""The pipeline schedules of a plan, as each rank's sequence of tasks: :func:`rank_sequences`.

``docs/spec/simulator.md`` section 3b: a rank runs its tasks (forward, backward and, under ``zb-h1``, the
weights' gradients on their own) strictly in its sequence, each once it is ready, as the runtimes do.
"""

from __future__ import annotations

import functools

import numpy as np

from placement_env.parallelism import SCHEDULES, schedules_for

PLAN_SCHEDULES = schedules_for("planner")
"""The schedules a plan may name (``1f1b`` first: the default)."""
SPLIT_BACKWARD = tuple(name for name, row in SCHEDULES.items() if row.split_backward)
"""Schedules that run the weights' gradients as tasks of their own."""


Task = tuple[str, int, int]
"""``(kind, chunk, micro-batch)``: kind ``"F"`` (forward), ``"B"`` (backward; the inputs' gradient alone when the
schedule splits the backward) or ``"W"`` (the weights' gradient); chunks numbered over the whole pipeline."""


def checked_plan_schedule(schedule: str, ranks: int, virtual_stages: int, microbatches: int) -> str:
    """``schedule`` when a plan of ``ranks`` ranks, ``virtual_stages`` chunks a rank and ``microbatches``
    micro-batches can run it; else a ``ValueError`` naming what is wrong."""
    if schedule not in PLAN_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; known: {', '.join(PLAN_SCHEDULES)}")
    if schedule == "interleaved-1f1b":
        if virtual_stages < 2:
            raise ValueError(f"schedule interleaved-1f1b needs 2 or more virtual stages a rank, got {virtual_stages}")
        if microbatches % ranks:
            raise ValueError(f"schedule interleaved-1f1b needs the micro-batches ({microbatches}) to be a multiple "
                             f"of the pipeline's ranks ({ranks}), as Megatron-LM's interleaved schedule does")
    elif virtual_stages != 1:
        raise ValueError(f"schedule {schedule} runs one chunk a rank, got {virtual_stages} virtual stages (use "
                         "interleaved-1f1b)")
    return schedule


@functools.lru_cache(maxsize=256)
def sequence_arrays(schedule: str, ranks: int, virtual_stages: int, microbatches: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`rank_sequences` as three read-only (S, n) int64 arrays: kind (0 F, 1 B, 2 W), chunk, micro-batch
    (kept: a planner simulates many plans of one shape)."""
    sequences = rank_sequences(schedule, ranks, virtual_stages, microbatches)
    codes = {"F": 0, "B": 1, "W": 2}
    arrays = (np.array([[codes[t[0]] for t in seq] for seq in sequences], dtype=np.int64),
              np.array([[t[1] for t in seq] for seq in sequences], dtype=np.int64),
              np.array([[t[2] for t in seq] for seq in sequences], dtype=np.int64))
    for array in arrays:
        array.setflags(write=False)
    return arrays


def rank_sequences(schedule: str, ranks: int, virtual_stages: int, microbatches: int) -> list[list[Task]]:
    """Each rank's tasks in the order it runs them under ``schedule`` (checked by
    :func:`checked_plan_schedule`; ``docs/spec/simulator.md`` section 3b): warm-up forwards, then a forward and
    a backward in turn, then the remaining backwards, as ``torch.distributed.pipelining`` builds them
    (``Schedule1F1B``, ``ScheduleInterleaved1F1B``, and ``_get_1f1b_rank_ops`` with zero bubble for ``zb-h1``)."""
    checked_plan_schedule(schedule, ranks, virtual_stages, microbatches)
    s_, v, m = ranks, virtual_stages, microbatches
    sequences = []
    for s in range(s_):
        total = m * v

        def chunk(i: int, backward: bool, s: int = s) -> tuple[int, int]:
            """The i-th forward (backward) task's chunk and micro-batch: micro-batches in rounds of S, each
            round through the rank's chunks in order (backwards: in reverse)."""
            local = (i // s_) % v
            return (v - 1 - local if backward else local) * s_ + s, (i // (s_ * v)) * s_ + i % s_

        if schedule == "gpipe":
            sequences.append([("F", s, k) for k in range(m)] + [("B", s, k) for k in range(m)])
            continue
        if schedule == "interleaved-1f1b":
            warmup = min(2 * (s_ - s - 1) + (v - 1) * s_, total)
        else:
            warmup = min(s_ - s - 1, total)
        deferred = s if schedule in SPLIT_BACKWARD else 0  # zero bubble: the rank's first W's go last
        tasks: list[Task] = [("F", *chunk(i, False)) for i in range(warmup)]
        weights: list[tuple[int, int]] = []
        for i in range(total):
            if warmup + i < total:
                tasks.append(("F", *chunk(warmup + i, False)))
            backward = chunk(i, True)
            tasks.append(("B", *backward))
            if schedule in SPLIT_BACKWARD:
                weights.append(backward)
                if i >= deferred:
                    tasks.append(("W", *weights.pop(0)))
        tasks += [("W", *w) for w in weights]
        sequences.append(tasks)
    return sequences


__all__ = ["PLAN_SCHEDULES", "SPLIT_BACKWARD", "Task", "checked_plan_schedule", "rank_sequences", "sequence_arrays"]
