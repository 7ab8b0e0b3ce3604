"""Environment throughput: steps per second with random actions (no policy).

Run: ``python benchmarks/env.py``. Measures ``DevicePlacement-v0`` and
``DevicePlacementSequential-v0`` on the default graph (300 placement units)
and on a 500-unit graph (the training graph of a 500-op layered DAG), 3 x P100.
"""

from __future__ import annotations

import time

import gymnasium as gym
from machine import machine_line

import placement_env  # noqa: F401 - registers the environments
from placement_env import layered_dag


def steps_per_second(env: gym.Env, seconds: float = 3.0) -> float:
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(20):  # warm-up (kernel load, caches)
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        steps += 1
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t0)


def main() -> None:
    print(machine_line())
    big = layered_dag(0, num_ops=500, name="layered-500")
    for label, graph in (("default graph", "default"), ("500-unit graph", big)):
        for env_id in ("DevicePlacement-v0", "DevicePlacementSequential-v0"):
            env = gym.make(env_id, graph=graph)
            task = env.unwrapped.task  # type: ignore[attr-defined]
            units = task.units[0].num_units
            rate = steps_per_second(env)
            print(f"{env_id:<30} {label:<15} ({units} units, {task.graphs[0].num_nodes} ops): "
                  f"{rate:8,.0f} steps/s")


if __name__ == "__main__":
    main()
