"""stable-baselines3 (and sb3-contrib) algorithms train on the environments."""

import gymnasium as gym
import numpy as np
import pytest
from sb3_contrib import MaskablePPO
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv

import placement_env  # noqa: F401
from placement_env import layered_dag

SMALL = layered_dag(3, num_ops=12, name="small")


@pytest.mark.parametrize("algo", [PPO, A2C])
def test_whole_graph_env_trains_with_multi_input_policy(algo):
    env = gym.make("DevicePlacement-v0", graph=SMALL, episode_length=4)
    kwargs = dict(n_steps=32, batch_size=32, n_epochs=2) if algo is PPO else dict(n_steps=8)
    model = algo("MultiInputPolicy", env, seed=0, **kwargs)
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(action)


def test_sequential_env_trains_with_maskable_ppo_and_dqn():
    env = gym.make("DevicePlacementSequential-v0", graph=SMALL, max_devices=4)  # one padded device
    model = MaskablePPO("MultiInputPolicy", env, n_steps=32, batch_size=32, n_epochs=2, seed=0)
    model.learn(total_timesteps=256)
    obs, _ = env.reset(seed=0)
    masks = env.unwrapped.action_masks()
    for _ in range(20):
        action, _ = model.predict(obs, action_masks=masks)
        assert action < 3  # the masked device is never chosen
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            obs, _ = env.reset()
    dqn = DQN("MultiInputPolicy", gym.make("DevicePlacementSequential-v0", graph=SMALL), learning_starts=32,
              buffer_size=500, seed=0)
    dqn.learn(total_timesteps=256)
    assert dqn.num_timesteps >= 256


@pytest.mark.slow
def test_subproc_vec_env():
    # worker processes start fresh: "module:id" makes gymnasium import the package there (and register the id)
    venv = make_vec_env("placement_env:DevicePlacement-v0", n_envs=2, vec_env_cls=SubprocVecEnv,
                        env_kwargs=dict(graph="synthetic/2", episode_length=3))
    try:
        model = PPO("MultiInputPolicy", venv, n_steps=8, batch_size=16, n_epochs=1, seed=0)
        model.learn(total_timesteps=32)
        assert model.num_timesteps >= 32
    finally:
        venv.close()


@pytest.mark.slow
def test_ppo_improves_on_the_starting_placement():
    env = gym.make("DevicePlacement-v0", graph=SMALL, episode_length=8, initial_placement="single")
    _, info = env.reset(seed=0)
    start = info["makespan"]
    model = PPO("MultiInputPolicy", env, n_steps=64, batch_size=64, seed=0)
    model.learn(total_timesteps=512)
    obs, _ = env.reset(seed=1)
    best = np.inf
    for _ in range(8):
        action, _ = model.predict(obs, deterministic=True)
        obs, _, _, _, info = env.step(action)
        best = min(best, info["best_makespan"])
    assert best < start
