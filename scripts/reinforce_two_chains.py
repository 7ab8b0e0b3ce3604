"""REINFORCE (the paper's agent) with FADP-GT on the learning test's graphs, under several settings.

Run: ``python scripts/reinforce_two_chains.py`` (about three minutes on one core).

The last setting is the one ``tests/test_policy.py`` holds to the optimum: the
policy head's stay prior (``expected_moves=1``: an untrained policy moves about
one unit per placement), no uniform exploration and a learning rate of 3e-4.

For comparison, the same 1,024 placements with stable-baselines3: PPO as in
``tests/test_policy.py`` (64 placements per update, 10 epochs over each
batch), PPO with one epoch, and A2C.

Prints, per setting, the greedy placement's makespan after training, the best
makespan sampled in the last episode, and the mean probability the trained
policy gives device 1 for each chain's units. Graphs: ``placement_env.two_chains``
(``heavy-light`` is the learning test of ``tests/test_policy.py``: optimum 4 s,
everything on the fast device 6 s; ``equal``: optimum 8 s, everything on one
device 16 s).

Every run starts from the environment's default placement (everything on the
fastest device) with one whole-graph placement per step.
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import torch

import placement_env  # noqa: F401  (registers the environments)
from agents import ReinforceConfig, make_sb3, train_reinforce
from agents.algorithms.rollout import greedy_placement
from placement_env import simulate, two_chains

LENGTH = 8


SETTINGS: list[tuple[str, dict[str, Any], int, int]] = [  # (label, ReinforceConfig overrides, placements per
    # episode, episodes)
    ("paper defaults (lr 1e-3, epsilon 0.1)", {}, 1, 1024),
    ("learning rate 1e-4", {"learning_rate": 1e-4}, 1, 1024),
    ("epsilon 0.0", {"epsilon": 0.0}, 1, 1024),
    ("epsilon 0.5", {"epsilon": 0.5}, 1, 1024),
    ("no baseline", {"baseline_decay": 0.0}, 1, 1024),
    ("4 placements per episode", {}, 4, 256),
    ("8 placements per episode", {}, 8, 128),
    ("4,096 episodes", {}, 1, 4096),
    ("stay prior, epsilon 0, lr 1e-3", {"expected_moves": 1.0, "epsilon": 0.0}, 1, 1024),
    ("stay prior, epsilon 0, lr 3e-4 (test)", {"expected_moves": 1.0, "epsilon": 0.0, "learning_rate": 3e-4},
     1, 1024),
]


SB3_SETTINGS = [  # (label, algorithm, keyword arguments)
    ("PPO, 10 epochs per batch (the test's)", "ppo", {"n_steps": 64, "batch_size": 64}),
    ("PPO, 1 epoch per batch", "ppo", {"n_steps": 64, "batch_size": 64, "n_epochs": 1}),
    ("A2C, 8 placements per update", "a2c", {"n_steps": 8}),
]


def sb3_makespan(graph, cluster, algo: str, kwargs: dict, steps: int = 1024) -> float:
    """Train ``algo`` for ``steps`` placements and return its deterministic placement's makespan (s)."""
    env = gym.make("DevicePlacement-v0", graph=graph, cluster=cluster, episode_length=1)
    model = make_sb3(algo, env, encoder="fadp-gt", seed=0, learning_rate=1e-3, **kwargs)
    model.learn(total_timesteps=steps)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    return env.step(action)[4]["makespan"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", choices=["heavy-light", "equal", "both"], default="both")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for kind in (["heavy-light", "equal"] if args.graph == "both" else [args.graph]):
        graph, cluster, optimal = two_chains(kind, LENGTH)
        print(f"{kind}: optimum {simulate(graph, optimal, cluster).makespan:g} s")
        for label, overrides, length, episodes in SETTINGS if kind == "heavy-light" else SETTINGS[:1]:
            env = gym.make("DevicePlacement-v0", graph=graph, cluster=cluster, episode_length=length)
            config = ReinforceConfig(encoder="fadp-gt", episodes=episodes, seed=0, **overrides)
            net, history = train_reinforce(env, config)
            _, greedy = greedy_placement(net, env)
            with torch.no_grad():
                obs, _ = env.reset(seed=0)
                slow = torch.softmax(net(obs)[0], dim=-1)[: graph.num_units, 1].numpy()
            print(f"  {label:<40} greedy {greedy:5.2f} s   last episode's best {history[-1]['best_makespan']:5.2f} s"
                  f"   P(device 1) heavy/first chain {slow[:LENGTH].mean():.2f},"
                  f" light/second {slow[LENGTH:].mean():.2f}")
        if kind == "heavy-light":
            for label, algo, kwargs in SB3_SETTINGS:
                print(f"  {label:<40} deterministic {sb3_makespan(graph, cluster, algo, kwargs):5.2f} s")


if __name__ == "__main__":
    main()
