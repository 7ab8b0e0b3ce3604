"""``ParallelPlan-v0`` (issue 64 point 7): a Gymnasium environment whose episode makes a plan's decisions one at a
time, rewarded by the simulator of plans at scale, the planner's optimum in ``info``; an SB3 algorithm trains on
it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import placement_env  # noqa: F401 - registers the ids
from placement_env.envs.parallel_plan import DECISIONS, DEFAULT_PROBLEMS, ParallelPlanEnv
from placement_env.plan.scale.planner import search_scale_plan

SMALL = [DEFAULT_PROBLEMS[1]]  # GPT 1.3B on 16 A100s: planned in a fraction of a second


def test_it_is_a_gymnasium_environment():
    env = gym.make("ParallelPlan-v0", problems=SMALL)
    check_env(env.unwrapped, skip_render_check=True)


def test_the_planner_s_decisions_earn_the_reward_of_one_and_others_less():
    env = ParallelPlanEnv(problems=SMALL)
    shape, cluster, batch = SMALL[0]
    best = search_scale_plan(shape, cluster, batch)
    p = best.parallelism
    wanted = {"tensor": p.tensor, "pipeline": p.pipeline, "data": p.data, "micro_batch": best.micro_batch,
              "schedule": (p.schedule, p.virtual_stages), "recompute": p.recompute, "zero": p.zero,
              "order": best.order}
    _, info = env.reset(seed=0)
    for decision in DECISIONS:
        _, reward, terminated, truncated, info = env.step(info["choices"].index(wanted[decision]))
    assert terminated and not truncated
    assert reward == pytest.approx(1.0) and info["optimum"] == pytest.approx(best.step.seconds)
    rewards = []
    for seed in range(20):  # random plans: never above the optimum, -1 when they do not fit
        rng = np.random.default_rng(seed)
        env.reset(seed=seed)
        done = False
        while not done:
            _, reward, done, _, info = env.step(int(rng.integers(64)))
        rewards.append(reward)
        assert reward == -1.0 or (0 < reward <= 1.0 + 1e-12 and info["fits"])
    assert min(rewards) < 1.0


def test_a_stepped_out_episode_and_bad_input_are_refused():
    env = ParallelPlanEnv(problems=SMALL)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action must be an integer in 0..63"):
        env.step(64)
    for _ in DECISIONS:
        env.step(0)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)
    with pytest.raises(ValueError, match="problem 0 must be"):
        ParallelPlanEnv(problems=[("gpt", None, 8)])


def test_an_sb3_algorithm_trains_on_it():
    from stable_baselines3 import PPO

    env = gym.make("ParallelPlan-v0", problems=SMALL)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu").learn(64)
    observation, _ = env.reset(seed=1)
    done, reward = False, 0.0
    while not done:
        action, _ = model.predict(observation, deterministic=True)
        observation, last, done, _, _ = env.step(action)
        reward = float(last)
    assert -1.0 <= reward <= 1.0 + 1e-12
