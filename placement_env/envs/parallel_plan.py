"""``ParallelPlan-v0``: plan a transformer's training on a GPU cluster one decision at a time, rewarded by the
simulator of plans at scale, with the planner's optimum in ``info``.

An episode poses one problem (a model's shape, a cluster, a global batch: one of ``problems``, drawn at each
reset) and asks, in order, for the tensor-parallel ranks t, the pipeline ranks S, the replicas d, the micro-batch
size, the schedule (with its virtual stages), recomputation, the ZeRO stage and the rank order; sequence
parallelism is on wherever t >= 2. Each decision's choices are those
:func:`~placement_env.plan.scale.planner.search_scale_plan` tries, so the planner's plan is always within reach
and the reward never exceeds 1.

Action space:
    ``Discrete(MAX_CHOICES)``: the index of a choice of the current decision, taken modulo the number of its
    choices (``info["choices"]`` names them).

Observation space:
    ``Box`` of ``OBSERVATION_SIZE`` floats: the problem (logarithms of layers, hidden size, heads, vocabulary,
    sequence, parameters, GPUs, GPUs a node, network bandwidth, peak FLOP/s, batch), each decision made so far as
    its choice's position in ``[0, 1]`` (-1 while open), and the current decision one-hot.

Rewards:
    0 for every decision but the last; after it, ``optimum / seconds`` (1 when the plan is as fast as the
    planner's) for a plan that fits in memory, ``-1`` for one that does not or that cannot run.

Episode end:
    terminated after the last decision; never truncated.

``info`` at the end: ``optimum`` (the planner's seconds), ``seconds`` (the plan's, or None), ``plan`` (its
description), ``fits``.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from placement_env.parallelism import RECOMPUTATION, Parallelism
from placement_env.plan.scale.gpu_model import GPUS, GpuCluster
from placement_env.plan.scale.model_shape import TransformerShape
from placement_env.plan.scale.planner import (
    MICRO_BATCHES,
    data_counts,
    pipeline_choices,
    schedule_choices,
    search_scale_plan,
    tensor_choices,
)
from placement_env.plan.scale.step import ORDERS, simulate_scale

DECISIONS = ("tensor", "pipeline", "data", "micro_batch", "schedule", "recompute", "zero", "order")
MAX_CHOICES = 64
OBSERVATION_SIZE = 11 + 2 * len(DECISIONS)
ZERO_CHOICES = (1, 2, 3)  # the planner's: ZeRO 0 takes ZeRO 1's seconds with more memory

DEFAULT_PROBLEMS = (
    (TransformerShape(layers=30, hidden=3072, heads=32, tied_embeddings=True, name="GPT 3.6B"),
     GpuCluster(GPUS["a100-80gb"], 64, 8, 12.5e9), 512),
    (TransformerShape(layers=24, hidden=2048, heads=16, tied_embeddings=True, name="GPT 1.3B"),
     GpuCluster(GPUS["a100-80gb"], 16, 8, 25e9), 256),
    (TransformerShape(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocabulary=128256, sequence=4096,
                      gated=True, biases=False, learned_positions=False, name="llama-3-8b"),
     GpuCluster(GPUS["h100-80gb"], 32, 8, 50e9), 256),
)
"""The problems an episode draws from by default: GPT 3.6B on 64 A100s (vTrain's cluster), GPT 1.3B on 16 A100s,
a Llama-3-8B shape on 32 H100s."""


class ParallelPlanEnv(gym.Env):
    """Plan t x S x d, micro-batches, schedule, recomputation, ZeRO and rank order one decision at a time (module
    docstring). ``problems``: ``(shape, cluster, global batch)`` triples (default :data:`DEFAULT_PROBLEMS`)."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, problems: Any = None, render_mode: str | None = None) -> None:
        self.problems = list(problems) if problems is not None else list(DEFAULT_PROBLEMS)
        if not self.problems:
            raise ValueError("problems must hold at least one (shape, cluster, global batch)")
        for k, problem in enumerate(self.problems):
            if (not isinstance(problem, tuple) or len(problem) != 3 or not isinstance(problem[0], TransformerShape)
                    or not isinstance(problem[1], GpuCluster) or not isinstance(problem[2], int)):
                raise ValueError(f"problem {k} must be (TransformerShape, GpuCluster, global batch), got {problem!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        self.action_space = gym.spaces.Discrete(MAX_CHOICES)
        self.observation_space = gym.spaces.Box(-1.0, 100.0, shape=(OBSERVATION_SIZE,), dtype=np.float32)
        self._optima: dict[int, float] = {}
        self._problem = 0
        self._made: dict[str, Any] = {}
        self._positions: list[float] = []

    # -- the problem and its decisions ---------------------------------------------------------------------------

    def optimum(self, index: int) -> float:
        """The planner's seconds on problem ``index`` (planned once, then kept)."""
        if index not in self._optima:
            shape, cluster, batch = self.problems[index]
            self._optima[index] = search_scale_plan(shape, cluster, batch).step.seconds
        return self._optima[index]

    def choices(self) -> list[Any]:
        """The current decision's choices, given those made (module docstring)."""
        shape, cluster, batch = self.problems[self._problem]
        decision = DECISIONS[len(self._made)]
        made = self._made
        if decision == "tensor":
            return tensor_choices(shape, cluster)
        if decision == "pipeline":
            return pipeline_choices(shape, cluster.gpus // made["tensor"])
        if decision == "data":
            return data_counts(batch, cluster.gpus // (made["tensor"] * made["pipeline"])) or [1]
        if decision == "micro_batch":
            return [b for b in MICRO_BATCHES if (batch // made["data"]) % b == 0] or [1]
        if decision == "schedule":
            m = self._microbatches()
            return schedule_choices(shape, made["pipeline"], m) or [("1f1b", 1)]
        if decision == "recompute":
            return list(RECOMPUTATION)
        if decision == "zero":
            return list(ZERO_CHOICES)
        return list(ORDERS)

    def _microbatches(self) -> int:
        batch = self.problems[self._problem][2]
        return max(1, batch // (self._made["data"] * self._made["micro_batch"]))

    def _observation(self) -> np.ndarray:
        shape, cluster, batch = self.problems[self._problem]
        problem = [math.log(shape.layers), math.log(shape.hidden), math.log(shape.heads), math.log(shape.vocabulary),
                   math.log(shape.sequence), math.log(shape.parameters), math.log(cluster.gpus),
                   math.log(cluster.per_node), math.log(cluster.network_bandwidth),
                   math.log(cluster.gpu.peak_flops), math.log(batch)]
        decided = self._positions + [-1.0] * (len(DECISIONS) - len(self._positions))
        current = [1.0 if k == len(self._made) else 0.0 for k in range(len(DECISIONS))]
        return np.array(problem + decided + current, dtype=np.float32)

    # -- the Gymnasium interface ---------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._problem = int(self.np_random.integers(len(self.problems)))
        self._made, self._positions = {}, []
        return self._observation(), {"problem": self._problem, "choices": self.choices()}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if len(self._made) >= len(DECISIONS):
            raise RuntimeError("the episode has ended: call reset() first")
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an integer in 0..{MAX_CHOICES - 1}, got {action!r}")
        options = self.choices()
        k = int(action) % len(options)
        self._made[DECISIONS[len(self._made)]] = options[k]
        self._positions.append(k / max(1, len(options) - 1))
        if len(self._made) < len(DECISIONS):
            return self._observation(), 0.0, False, False, {"choices": self.choices()}
        reward, info = self._judged()
        return self._observation(), reward, True, False, info

    def _judged(self) -> tuple[float, dict]:
        shape, cluster, batch = self.problems[self._problem]
        made = self._made
        schedule, v = made["schedule"]
        optimum = self.optimum(self._problem)
        info: dict[str, Any] = {"optimum": optimum, "seconds": None, "fits": False, "problem": self._problem}
        try:
            p = Parallelism(pipeline=made["pipeline"], data=made["data"], tensor=made["tensor"],
                            microbatches=self._microbatches(), schedule=schedule, virtual_stages=v,
                            recompute=made["recompute"], zero=made["zero"], sequence_parallel=made["tensor"] > 1)
            step = simulate_scale(shape, p, cluster, batch, order=made["order"])
        except ValueError as error:
            info["plan"] = f"cannot run: {error}"
            return -1.0, info
        info.update(seconds=step.seconds, fits=step.fits,
                    plan=f"{p.describe()}, micro-batch {made['micro_batch']}, {made['order']}")
        return (optimum / step.seconds if step.fits else -1.0), info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        shape, cluster, batch = self.problems[self._problem]
        made = ", ".join(f"{k}={v}" for k, v in self._made.items()) or "nothing yet"
        return f"{shape.name} on {cluster.gpus} x {cluster.gpu.name}, batch {batch}: {made}"


__all__ = ["DECISIONS", "DEFAULT_PROBLEMS", "MAX_CHOICES", "ParallelPlanEnv"]
