"""The placement policy under stable-baselines3, the REINFORCE agent and checkpoints."""

import dataclasses
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.distributions import MultiCategoricalDistribution

import agents
import placement_env  # noqa: F401
from agents import (
    MaskablePlacementPolicy,
    PlacementPolicy,
    Reinforce,
    ReinforceConfig,
    greedy_placement,
    load_model,
    load_network,
    make_model,
    make_sb3,
    place_graph,
    read_checkpoint,
    save_checkpoint,
    save_network,
    train_reinforce,
)
from agents.algorithms.guided_search import GuidedSearch
from agents.algorithms.rollout import policy_placement
from agents.policies.distributions import NodeCategoricalDistribution
from graph_encoders import list_encoders
from placement_env import Cluster, layered_dag, simulate, two_chains
from placement_env.sim.simulator import check_placement

SMALL = layered_dag(3, num_ops=10, name="small")


def test_node_distribution_matches_sb3_multicategorical():
    torch.manual_seed(0)
    logits = torch.randn(5, 7 * 3)
    actions = torch.randint(0, 3, (5, 7))
    ours = NodeCategoricalDistribution(7, 3).proba_distribution(logits)
    sb3 = MultiCategoricalDistribution([3] * 7).proba_distribution(logits)
    torch.testing.assert_close(ours.log_prob(actions), sb3.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), sb3.entropy())
    assert torch.equal(ours.mode(), sb3.mode())


@pytest.mark.parametrize("encoder", list_encoders())
def test_every_encoder_trains_under_ppo(encoder):
    env = gym.make("DevicePlacement-v0", graph=SMALL, episode_length=4, max_devices=4)  # one padded device
    model = PPO(PlacementPolicy, env, n_steps=32, batch_size=16, n_epochs=1, seed=0,
                policy_kwargs=dict(encoder=encoder, encoder_kwargs=dict(hidden_dim=16)))
    before = [p.detach().clone() for p in model.policy.features_extractor.parameters()]
    model.learn(total_timesteps=32)
    after = list(model.policy.features_extractor.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # the encoder was updated
    obs, _ = env.reset(seed=0)
    for _ in range(4):  # one episode (a step past its end needs a reset)
        action, _ = model.predict(obs)
        assert action.shape == (env.unwrapped.task.max_nodes,)
        assert action[:SMALL.num_units].max() < 3  # the padded device is masked
        obs, *_ = env.step(action)


def test_a2c_and_maskable_ppo_on_the_sequential_env():
    env = gym.make("DevicePlacement-v0", graph=SMALL, episode_length=4)
    A2C(PlacementPolicy, env, n_steps=8, seed=0, policy_kwargs=dict(encoder="gcn")).learn(32)
    senv = gym.make("DevicePlacementSequential-v0", graph=SMALL, max_devices=4)
    model = MaskablePPO(MaskablePlacementPolicy, senv, n_steps=32, batch_size=16, n_epochs=1, seed=0,
                        policy_kwargs=dict(encoder="fadp-gt", encoder_kwargs=dict(hidden_dim=16)))
    model.learn(32)
    obs, _ = senv.reset(seed=0)
    action, _ = model.predict(obs, action_masks=senv.unwrapped.action_masks())
    assert 0 <= int(action) < 3


LEARNING_BUDGET = 1024  # placements (steps of one whole-graph placement each), for every learner alike


def learning_task():
    """The learning test's environment and optimum: ``two_chains("heavy-light")``, one placement per episode."""
    graph, cluster, optimal = two_chains("heavy-light")  # heavy chain on the fast device, light on the slow
    optimum = simulate(graph, optimal, cluster).makespan
    assert optimum == 4.0
    return gym.make("DevicePlacement-v0", graph=graph, cluster=cluster, episode_length=1), optimum


def test_random_search_does_not_find_the_learning_tests_optimum_within_the_budget():
    env, optimum = learning_task()
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    makespans = []
    for _ in range(LEARNING_BUDGET):  # the same number of placements judged, episode after episode
        _, _, terminated, truncated, info = env.step(rng.integers(0, 2, 16))
        makespans.append(info["makespan"])
        if terminated or truncated:
            env.reset()
    assert min(makespans) > 1.05 * optimum


@pytest.mark.slow
def test_ppo_with_fadp_gt_learns_the_optimal_placement():
    env, optimum = learning_task()
    model = make_sb3("ppo", env, encoder="fadp-gt", n_steps=64, batch_size=64, seed=0, learning_rate=1e-3)
    model.learn(total_timesteps=LEARNING_BUDGET)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    _, _, _, _, info = env.step(action)
    assert info["makespan"] <= 1.05 * optimum


@pytest.mark.slow
def test_reinforce_with_fadp_gt_learns_the_optimal_placement():
    """With the stay prior, no uniform exploration and a learning rate of 3e-4 (README: the paper's 1e-3 and
    epsilon 0.1 do not learn this task)."""
    env, optimum = learning_task()
    config = ReinforceConfig(encoder="fadp-gt", expected_moves=1.0, epsilon=0.0, learning_rate=3e-4,
                             episodes=LEARNING_BUDGET, seed=0)
    net, _ = train_reinforce(env, config)
    _, makespan = greedy_placement(net, env)
    assert makespan <= 1.05 * optimum


@pytest.mark.xfail(strict=True, reason="open point (README): with the paper's settings REINFORCE settles on "
                                       "everything on the fast device")
@pytest.mark.slow
def test_reinforce_with_the_papers_settings_learns_the_optimal_placement():
    env, optimum = learning_task()
    net, _ = train_reinforce(env, ReinforceConfig(encoder="fadp-gt", episodes=LEARNING_BUDGET, seed=0))
    _, makespan = greedy_placement(net, env)
    assert makespan <= 1.05 * optimum


def test_reinforce_runs_the_papers_loop_and_checkpoints_round_trip(tmp_path):
    env = gym.make("DevicePlacement-v0", graph=SMALL, episode_length=3)
    config = ReinforceConfig(encoder="gcn", encoder_kwargs={"hidden_dim": 16}, episodes=6, seed=0)
    net, history = train_reinforce(env, config)
    assert [h["episode"] for h in history] == list(range(6))
    assert all(np.isfinite(h["return"]) and h["best_makespan"] > 0 for h in history)
    again, history2 = train_reinforce(env, config)
    assert [h["return"] for h in history] == [h["return"] for h in history2]  # seeded
    for name, value in net.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], value, rtol=0, atol=0)
    path = tmp_path / "agent.zip"
    save_network(net, config, path, env.observation_space)
    loaded, loaded_config, _ = load_network(path)
    assert loaded_config == config
    obs, _ = env.reset(seed=0)
    with torch.no_grad():
        torch.testing.assert_close(loaded(obs), net(obs))


def test_place_an_unseen_graph_with_a_saved_policy(tmp_path):
    train_graph = layered_dag(3, num_ops=10, name="train")
    unseen = layered_dag(103, num_ops=8, name="unseen")
    env = gym.make("DevicePlacement-v0", graph=train_graph, episode_length=2, max_nodes=16, max_edges=64)
    model = make_sb3("ppo", env, encoder="gat", encoder_kwargs={"hidden_dim": 16}, n_steps=16, batch_size=16,
                     n_epochs=1, seed=0)
    model.learn(16)
    save_checkpoint(model, tmp_path / "ppo.zip")
    cluster = Cluster.preset("p100", 3)
    placed = agents.place(unseen, cluster, tmp_path / "ppo.zip")  # a policy of any algorithm: rolled out
    assert placed.method == "rollout"
    check_placement(unseen, placed.placement, cluster)
    assert simulate(unseen, placed.placement, cluster).makespan == placed.makespan
    with pytest.warns(DeprecationWarning, match=r"use agents.place\(graph, cluster, policy\)"):
        placement, makespan = place_graph(tmp_path / "ppo.zip", unseen, steps=2)  # the former name and order
    again, again_makespan = policy_placement(unseen, None, tmp_path / "ppo.zip", steps=2)
    assert np.array_equal(placement, again) and makespan == again_makespan
    config = ReinforceConfig(encoder="transformer", encoder_kwargs={"hidden_dim": 16}, episodes=2)
    net, _ = train_reinforce(env, config)
    save_network(net, config, tmp_path / "r.zip", env.observation_space)
    placement, makespan = policy_placement(unseen, cluster, tmp_path / "r.zip", steps=2)
    assert simulate(unseen, placement, cluster).makespan == makespan
    big = layered_dag(0, num_ops=40)
    with pytest.raises(ValueError, match="more than max_nodes=16; pad more, or coarsen the graph"):
        policy_placement(big, cluster, tmp_path / "r.zip")
    placement, makespan = policy_placement(big, cluster, tmp_path / "r.zip", steps=2, coarsen=True)
    check_placement(big, placement, cluster)  # a device per op of the graph given, its own groups whole
    assert simulate(big, placement, cluster).makespan == makespan
    big_placed = agents.place(big, cluster, tmp_path / "r.zip")  # agents.place coarsens to the policy's padding
    check_placement(big, big_placed.placement, cluster)
    with pytest.raises(FileNotFoundError):
        agents.place(unseen, cluster, tmp_path / "missing.zip")
    model.save(tmp_path / "native.zip")  # SB3's own format unpickles code: refused, with how to load it
    with pytest.raises(ValueError, match="not a checkpoint of this project .*stable-baselines3 model.save"):
        agents.place(unseen, cluster, tmp_path / "native.zip")


def test_every_algorithm_saves_one_format_and_loads_back_with_the_same_policy(tmp_path):
    env = gym.make("DevicePlacement-v0", graph=SMALL, episode_length=3)
    obs, _ = env.reset(seed=0)
    kwargs: dict[str, Any]
    for algo, kwargs in (("ppo", {"n_steps": 8, "batch_size": 8, "n_epochs": 1}), ("a2c", {"n_steps": 4}),
                         ("reinforce", {"episodes": 2}), ("guided", {"samples": 4, "search_seconds": 0.05})):
        model = make_model(algo, env, encoder="gcn", encoder_kwargs={"hidden_dim": 8}, seed=0, **kwargs)
        model.learn(8)
        save_checkpoint(model, tmp_path / f"{algo}.zip")
        saved = read_checkpoint(tmp_path / f"{algo}.zip")
        assert saved.algo == algo and saved.num_timesteps == model.num_timesteps > 0
        loaded = load_model(tmp_path / f"{algo}.zip", env)
        assert type(loaded) is type(model) and loaded.num_timesteps == model.num_timesteps
        for name, value in model.policy.state_dict().items():
            torch.testing.assert_close(loaded.policy.state_dict()[name], value, rtol=0, atol=0)
        assert np.array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    assert Reinforce.load(tmp_path / "reinforce.zip", env).config == make_model(
        "reinforce", env, encoder="gcn", encoder_kwargs={"hidden_dim": 8}, seed=0, episodes=2).config
    assert GuidedSearch.load(tmp_path / "guided.zip", env).settings() == model.settings()
    with pytest.raises(ValueError, match="holds a PPO model, not a REINFORCE agent"):
        Reinforce.load(tmp_path / "ppo.zip", env)
    other = gym.make("DevicePlacement-v0", graph=SMALL, episode_length=3, max_nodes=40)
    with pytest.raises(ValueError, match="padded to"):
        load_model(tmp_path / "ppo.zip", other)


def test_a_checkpoint_cannot_run_code_when_loaded(tmp_path):
    """A pickle that calls a function on load (here: one that would write a file) is refused, and nothing runs."""
    import pickle
    import zipfile

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    env = gym.make("DevicePlacement-v0", graph=SMALL, episode_length=3)
    model = make_model("a2c", env, encoder="gcn", encoder_kwargs={"hidden_dim": 8})
    save_checkpoint(model, tmp_path / "good.zip")
    with zipfile.ZipFile(tmp_path / "good.zip") as good, zipfile.ZipFile(tmp_path / "evil.zip", "w") as evil:
        evil.writestr("checkpoint.json", good.read("checkpoint.json"))
        evil.writestr("policy.pt", pickle.dumps(Payload()))
    with pytest.raises(ValueError, match="evil.zip"):
        load_model(tmp_path / "evil.zip", env)
    assert not marker.exists()
    pickle.loads(pickle.dumps(Payload()))  # the payload is live: plain unpickling does run it
    assert marker.exists()


def test_stay_prior_moves_about_the_expected_number_of_units():
    from agents.policies.heads import NodeDeviceHead

    torch.manual_seed(0)
    b, n, d, devices = 2, 40, 8, 4
    head = NodeDeviceHead(d, devices, expected_moves=2.0)
    nn_last = cast(torch.nn.Linear, head.mlp[-1])
    torch.nn.init.zeros_(nn_last.weight)
    torch.nn.init.zeros_(nn_last.bias)  # equal MLP logits: only the prior speaks
    current = torch.nn.functional.one_hot(torch.randint(0, 3, (b, n)), devices).float()
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[1, 10:] = False  # the second graph has 10 units
    gpu = torch.nn.functional.one_hot(torch.tensor([2, 2]), devices).float()  # 3 devices
    logits = head(torch.randn(b, n, d), torch.randn(b, d), gpu, mask, current)
    stay = torch.softmax(logits, -1)[current.bool()].view(b, n)
    assert torch.allclose(stay[0], torch.full((n,), 1 - 2 / 40))  # p = m / n
    assert torch.allclose(stay[1, :10], torch.full((10,), 1 - 2 / 10))
    plain, z, g = NodeDeviceHead(d, devices), torch.randn(b, n, d), torch.randn(b, d)
    assert torch.equal(plain(z, g, gpu, mask, current), plain(z, g, gpu, mask))  # off by default: no prior


def test_a_policy_on_another_environment_says_what_it_needs():
    with pytest.raises(ValueError, match="need the observation space of DevicePlacement-v0"):
        PPO(PlacementPolicy, "CartPole-v1")


@pytest.mark.parametrize("setting, message", [
    ({"learning_rate": float("nan")}, "ReinforceConfig.learning_rate must be a finite number, got nan"),
    ({"epsilon": 1.5}, r"ReinforceConfig.epsilon must be in \[0, 1\], got 1.5"),
    ({"reward_clip": 0.0}, "ReinforceConfig.reward_clip must be positive, got 0.0"),
    ({"episodes": 2.5}, "ReinforceConfig.episodes must be an integer >= 1, got 2.5"),  # not truncated to 2
])
def test_reinforce_settings_are_checked_by_name(setting, message):
    with pytest.raises(ValueError, match=message):
        ReinforceConfig(**setting)


def test_reinforce_settings_cannot_change_after_they_were_checked():
    config = ReinforceConfig(episodes=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.epsilon = 1.5  # type: ignore[misc]  # would bypass the check above
    assert config.epsilon == 0.1
