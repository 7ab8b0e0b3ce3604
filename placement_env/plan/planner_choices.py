"""What the planner of traced graphs may choose, and the checks of what a caller fixes:
:func:`check_fixed_decisions` (:mod:`placement_env.plan.planner` searches among these)."""

from __future__ import annotations

from collections.abc import Sequence

from .schedules import PLAN_SCHEDULES

MAX_PLAN_LAYERS = 20_000
"""The most layers a traced graph may have for the planner: its cut search is linear in them, its configurations
grow with them (a model of more is planned at scale, from its shape)."""
SPLITS = ("time", "uniform", "deepspeed-uniform", "parameters")
HAND_SPLITS = ("uniform", "deepspeed-uniform", "parameters")
"""The runtimes' own splits (Megatron-LM's and DeepSpeed's two): with 1F1B and m in S x {1, 2, 4, 8}, the grid of
plans a practitioner tries, every one simulated."""
LAYOUTS = ("replicas-across-nodes", "stages-across-nodes")
"""How a plan's devices form stages and replicas: ``replicas-across-nodes`` gives replica r's stage s device
``r S + s`` (a replica's stages on neighbouring devices, within a node when S fits one);
``stages-across-nodes`` gives it device ``s D + r`` (a stage's replicas neighbours)."""
MICROBATCH_FACTORS = (1, 2, 4, 8)  # m from S x these, as a practitioner tries
MAX_MICROBATCHES = 512
VIRTUAL_STAGES = (2, 4)


def check_fixed_decisions(n: int, layers: int, max_chunks: int, batch: int | None, stages: int | None,
                          replicas: int | None, microbatches: int | None, schedule: str | None,
                          virtual_stages: int | None, split: str | Sequence[int] | None, layout: str | None) -> None:
    """``ValueError`` naming a fixed decision out of range."""
    for name, value in (("stages", stages), ("replicas", replicas), ("microbatches", microbatches),
                        ("virtual_stages", virtual_stages)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if (stages or 1) * (replicas or 1) > n:
        raise ValueError(f"{stages or 1} stages x {replicas or 1} replicas = {(stages or 1) * (replicas or 1)} "
                         f"devices; the cluster has {n}")
    if stages is not None and stages * (virtual_stages or 1) > max_chunks:
        raise ValueError(f"{stages} stages x {virtual_stages or 1} virtual stages need as many chunks; the graph's "
                         f"{layers} layers make at most {max_chunks} (a chunk ends before, between or after its "
                         "blocks)")
    if schedule is not None and schedule not in PLAN_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; known: {', '.join(PLAN_SCHEDULES)}")
    if microbatches is not None and batch is not None and batch % ((replicas or 1) * microbatches):
        raise ValueError(f"{replicas or 1} replicas x {microbatches} micro-batches do not divide the graph's batch "
                         f"of {batch}")
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    if isinstance(split, str) and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}, or layers per chunk")
    if split is not None and not isinstance(split, str):
        counts = list(split)
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts) or sum(counts) != layers:
            raise ValueError(f"a split gives each chunk 1 or more layers, {layers} in all; got {counts}")
        if stages is not None and len(counts) != stages * (virtual_stages or 1):
            raise ValueError(f"a split of {len(counts)} chunks for {stages} stages x {virtual_stages or 1} virtual "
                             "stages")


__all__ = ["HAND_SPLITS", "LAYOUTS", "MAX_MICROBATCHES", "MAX_PLAN_LAYERS", "MICROBATCH_FACTORS", "SPLITS",
           "VIRTUAL_STAGES", "check_fixed_decisions"]
