import sys

import gymnasium as gym
from stable_baselines3 import PPO

import placement_env  # noqa: F401 - registers DevicePlacement-v0
from baselines import place
from placement_env import simulate

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
env = gym.make("DevicePlacement-v0", graph="synthetic/0", episode_length=8)  # a synthetic DAG, 3 P100s
model = PPO("MultiInputPolicy", env, n_steps=256, batch_size=64, seed=0)
model.learn(total_timesteps=steps)

obs, info = env.reset(seed=0)
start = float(info["makespan"])  # the starting placement: everything on one GPU
for _ in range(8):
    action, _state = model.predict(obs, deterministic=True)
    obs, _reward, _terminated, _truncated, info = env.step(action)

task = env.unwrapped.task  # type: ignore[attr-defined]
graph, cluster = task.graphs[0], task.cluster
print(f"{'start (one GPU)':<16} {start * 1e3:8.2f} ms")
print(f"{'PPO, best seen':<16} {info['best_makespan'] * 1e3:8.2f} ms")
for name in ("round-robin", "heft", "m-etf", "local-search"):
    makespan = simulate(graph, place(graph, cluster, name), cluster).makespan
    print(f"{name:<16} {makespan * 1e3:8.2f} ms")
