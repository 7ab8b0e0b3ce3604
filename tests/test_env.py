"""The Gymnasium environments DevicePlacement-v0 and DevicePlacementSequential-v0."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from helpers import graph as hand_graph
from helpers import uniform_cluster
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import placement_env  # noqa: F401 - registers the environments
from placement_env import layered_dag, simulate, unflatten_observation
from placement_env.graph.traversal import TRAVERSAL_ORDERS, traversal_order
from placement_env.graph.units import STATIC_FEATURES, unit_graph

SMALL = layered_dag(3, num_ops=12, name="small")
SMALL2 = layered_dag(4, num_ops=20, name="small2")
ENVS = ["DevicePlacement-v0", "DevicePlacementSequential-v0"]


def make(name, **kw):
    kw.setdefault("graph", SMALL)
    return gym.make(name, **kw).unwrapped


@pytest.mark.parametrize("name", ENVS)
@pytest.mark.parametrize("graphs", [SMALL, [SMALL, SMALL2], "synthetic"])
def test_env_checkers_pass_without_warnings(name, graphs):
    env = make(name, graph=graphs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym_check_env(env)
        sb3_check_env(env)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("name", ENVS)
def test_default_arguments_work(name):
    env = gym.make(name)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert info["graph"] == "cifar10/0" and info["makespan"] > 0
    assert obs["gpu_onehot"].tolist() == [0, 0, 1]  # 3 devices


def test_matrix_observations_and_unflatten_agree():
    flat = make("DevicePlacement-v0").reset(seed=0)[0]
    env = make("DevicePlacement-v0", flatten=False)
    mat = env.reset(seed=0)[0]
    gym_check_env(env)
    n = unit_graph(SMALL).num_units
    assert mat["embedding"].shape == (n, len(STATIC_FEATURES) + 3 + 1)
    back = unflatten_observation(flat)
    assert np.array_equal(back["embedding"], mat["embedding"])
    assert np.array_equal(back["edge_index"], mat["edge_index"])


def test_observation_content():
    env = make("DevicePlacement-v0", graph=[SMALL, SMALL2], initial_placement="round_robin")
    obs, info = env.reset(seed=1)
    obs = unflatten_observation(obs)
    ug = unit_graph(env.task.graphs[env.episode.gi])
    nu, k = ug.num_units, len(STATIC_FEATURES)
    assert obs["node_mask"].tolist() == [1] * nu + [0] * (env.task.max_nodes - nu)
    assert obs["visited"].sum() == 0
    assert np.array_equal(obs["embedding"][:nu, :k], ug.static)
    assert np.all(obs["embedding"][nu:] == 0)  # padding
    devices = obs["embedding"][:nu, k:k + 3].argmax(axis=1)
    assert np.array_equal(devices, env.episode.units)
    assert np.array_equal(obs["edge_index"][:, :ug.num_edges], ug.edges)
    assert obs["edge_mask"].sum() == ug.num_edges
    assert obs["graph_id"][0] == env.episode.gi
    assert env.task.max_nodes == max(unit_graph(SMALL).num_units, unit_graph(SMALL2).num_units)


def test_reward_is_the_difference_of_simulated_makespans():
    env = make("DevicePlacement-v0", episode_length=3)
    _, info = env.reset(seed=0)
    c = env.task.cluster
    t0 = simulate(SMALL, info["best_placement"], c).makespan
    assert info["makespan"] == t0
    prev = t0
    rng = np.random.default_rng(0)
    for step in range(3):
        action = rng.integers(0, 3, env.task.max_nodes)
        _, reward, terminated, truncated, info = env.step(action)
        nodes = action[:SMALL.num_units][SMALL.unit_of]
        r = simulate(SMALL, nodes, c)
        assert info["makespan"] == r.makespan
        assert reward == pytest.approx((prev - r.makespan) / t0, rel=1e-12, abs=1e-15)
        assert np.array_equal(info["peak_memory"], r.peak_memory)
        assert info["lb_ratio"] == pytest.approx(r.makespan / r.lower_bound)
        prev = r.makespan
        assert not terminated and truncated == (step == 2)


def test_memory_penalty_in_both_scales():
    # two chained ops with 100 B outputs and 300 B of parameters (x4 = 1200 B static) on 1000-B devices
    g = hand_graph([("a", 1.0, 100, 300), ("b", 1.0, 100)], [("a", "b")])
    c = uniform_cluster(2, memory=1000)
    for scale in ("relative", "seconds"):
        env = make("DevicePlacement-v0", graph=g, cluster=c, reward_scale=scale, memory_penalty=2.0)
        _, info = env.reset(seed=0)
        t0 = info["makespan"]
        _, reward, _, _, info = env.step(np.array([0, 1]))
        r = simulate(g, [0, 1], c)
        over = np.maximum(0, r.peak_memory - c.memory)
        assert info["oom"] and over[0] == 300
        if scale == "relative":
            assert reward == pytest.approx((t0 - r.makespan) / t0 - 2.0 * over[0] / 1000)
        else:
            assert reward == pytest.approx((t0 - r.makespan) - 2.0 * over[0] / 1e9)


def test_best_placement_prefers_feasible_then_fastest():
    env = make("DevicePlacement-v0", episode_length=20, initial_placement="single")
    _, info = env.reset(seed=3)
    seen = [(info["oom"], info["makespan"])]
    rng = np.random.default_rng(1)
    for _ in range(10):
        _, _, _, _, info = env.step(rng.integers(0, 3, env.task.max_nodes))
        seen.append((info["oom"], info["makespan"]))
    assert info["best_makespan"] == min(seen)[1]
    assert simulate(SMALL, info["best_placement"], env.task.cluster).makespan == info["best_makespan"]


@pytest.mark.parametrize("name", ENVS)
@pytest.mark.parametrize("initial", ["random", "single", "heft"])
def test_seeded_resets_give_identical_trajectories(name, initial):
    def rollout(seed):
        env = make(name, graph=[SMALL, SMALL2], initial_placement=initial)
        env.action_space.seed(seed)
        obs, _ = env.reset(seed=seed)
        trace = [obs]
        for _ in range(6):
            obs, reward, term, trunc, _ = env.step(env.action_space.sample())
            trace += [obs, reward]
            if term or trunc:
                obs, _ = env.reset()
                trace.append(obs)
        return trace

    a, b = rollout(7), rollout(7)
    for x, y in zip(a, b):
        if isinstance(x, dict):
            for key in x:
                assert np.array_equal(x[key], y[key])
        else:
            assert x == y


def test_bad_arguments_and_actions_are_clear_errors():
    env = make("DevicePlacement-v0", max_devices=4)  # 3 devices, padded to 4
    env.reset(seed=0)
    action = np.zeros(env.task.max_nodes, np.int64)
    action[2] = 3
    with pytest.raises(ValueError, match="on device 3, but the cluster has devices 0..2"):
        env.step(action)
    with pytest.raises(ValueError, match="action must have shape"):
        env.step(np.zeros(3, np.int64))
    for value, shown in ((np.nan, "nan"), (1.5, "1.5"), (np.inf, "inf")):  # no silent cast to a device
        action = np.zeros(env.task.max_nodes)
        action[1] = value
        with pytest.raises(ValueError, match=rf"\(index 1\) on {shown}, which is not a device index \(an integer "
                                             r"in 0..2\)"):
            env.step(action)
    action = np.zeros(env.task.max_nodes)
    action[1] = -1.0
    with pytest.raises(ValueError, match=r"\(index 1\) on device -1.0, but the cluster has devices 0..2"):
        env.step(action)
    with pytest.raises(ValueError, match="an action holds device indices"):
        env.step(np.full(env.task.max_nodes, "0"))
    with pytest.raises(ValueError, match="more than max_nodes=5"):
        make("DevicePlacement-v0", max_nodes=5)
    with pytest.raises(ValueError, match="unknown graph 'resnet9000'"):
        gym.make("DevicePlacement-v0", graph="resnet9000")
    with pytest.raises(ValueError, match="more than max_devices=2"):
        make("DevicePlacement-v0", max_devices=2)
    with pytest.raises(FileNotFoundError, match="'k80' is a device kind: .* device_kind='k80' in the environments"):
        make("DevicePlacement-v0", cluster="k80")
    with pytest.raises(ValueError, match="unknown initial_placement 'best'"):
        make("DevicePlacement-v0", initial_placement="best")
    with pytest.raises(ValueError, match="reward_scale"):
        make("DevicePlacement-v0", reward_scale="ms")
    for bad in (float("nan"), -1.0, "10"):
        with pytest.raises(ValueError, match=f"memory_penalty must be a finite number >= 0, got {bad!r}"):
            make("DevicePlacement-v0", memory_penalty=bad)
    with pytest.raises(ValueError, match="episode_length must be an integer >= 1, got 2.5"):  # not truncated to 2
        make("DevicePlacement-v0", episode_length=2.5)
    with pytest.raises(ValueError, match="max_nodes must be an integer >= 1, got 400.0"):
        make("DevicePlacement-v0", max_nodes=400.0)
    with pytest.raises(ValueError, match="passes must be an integer >= 1, got 0"):
        make("DevicePlacementSequential-v0", passes=0)
    free = placement_env.ComputationGraph([placement_env.Node("a", "add", 0.0), placement_env.Node("b", "add", 0.0)],
                                          [placement_env.Edge("a", "b")], name="free")
    with pytest.raises(ValueError, match="graph 'free': every op costs 0 s"):
        make("DevicePlacement-v0", graph=free)
    senv = make("DevicePlacementSequential-v0", max_devices=4)
    senv.reset(seed=0)
    assert senv.action_masks().tolist() == [True, True, True, False]
    with pytest.raises(ValueError, match="on device 3"):
        senv.step(3)
    for value in (np.nan, 0.5):
        with pytest.raises(ValueError, match=f"on {value}, which is not a device index"):
            senv.step(value)
    with pytest.raises(ValueError, match="action must be one device index"):
        senv.step([0, 1])
    unit = int(senv.unwrapped._order[0])
    senv.step(np.float64(1.0))  # an integer-valued float is a device
    assert senv.unwrapped.episode.units[unit] == 1 and senv.unwrapped.episode.units.dtype == np.int64
    with pytest.raises(ValueError, match="traversal_order"):
        make("DevicePlacementSequential-v0", traversal_order="zigzag")


@pytest.mark.parametrize("order", TRAVERSAL_ORDERS)
def test_traversal_orders_visit_every_unit_once(order):
    ug = unit_graph(SMALL2)
    seq = traversal_order(ug, order, np.random.default_rng(0))
    assert sorted(seq.tolist()) == list(range(ug.num_units))


def test_bfs_and_dfs_follow_edges():
    # units a -> b -> d and a -> c (no colocation): BFS a, b, c, d; DFS a, b, d, c
    g = hand_graph([("a", 1, 0), ("b", 1, 0), ("c", 1, 0), ("d", 1, 0)], [("a", "b"), ("a", "c"), ("b", "d")])
    ug = unit_graph(g)
    assert traversal_order(ug, "bfs").tolist() == [0, 1, 2, 3]
    assert traversal_order(ug, "dfs").tolist() == [0, 1, 3, 2]
    assert traversal_order(ug, "reverse_topological").tolist() == [3, 2, 1, 0]


@pytest.mark.parametrize("order", TRAVERSAL_ORDERS)
def test_sequential_episode_places_every_unit_and_rewards_add_up(order):
    env = make("DevicePlacementSequential-v0", traversal_order=order, passes=2, initial_placement="single")
    obs, info = env.reset(seed=0)
    t0 = info["makespan"]
    nu = unit_graph(SMALL).num_units
    total, steps, seen_current = 0.0, 0, set()
    rng = np.random.default_rng(0)
    terminated = False
    while not terminated:
        emb = unflatten_observation(obs)["embedding"]
        current = int(np.argmax(emb[:, -1]))
        assert emb[:, -1].sum() == 1 and obs["visited"][current] == 0
        seen_current.add(current)
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(0, 3)))
        total += reward
        steps += 1
        assert not truncated
    assert steps == 2 * nu and seen_current == set(range(nu))
    assert total == pytest.approx((t0 - info["makespan"]) / t0, abs=1e-12)  # no overflow on this graph


def test_sequential_reward_matches_the_simulator():
    env = make("DevicePlacementSequential-v0", reward_scale="seconds")
    _, info = env.reset(seed=0)
    placement = info["best_placement"].copy()
    prev = info["makespan"]
    order = env._order
    for i, device in enumerate([1, 2, 0, 1]):
        _, reward, _, _, info = env.step(device)
        placement[SMALL.unit_of == order[i]] = device
        r = simulate(SMALL, placement, env.task.cluster)
        assert reward == pytest.approx(prev - r.makespan, abs=1e-15)
        prev = r.makespan


@pytest.mark.parametrize("name", ENVS)
def test_render_gantt_and_text(name):
    env = make(name, render_mode="rgb_array")
    env.reset(seed=0)
    image = env.render()
    from placement_env.envs.render import GANTT_MARGIN_PX, GANTT_ROW_PX, GANTT_WIDTH_PX

    assert image.dtype == np.uint8
    assert image.shape == (GANTT_MARGIN_PX + GANTT_ROW_PX * 9, GANTT_WIDTH_PX, 3)
    assert image.std() > 0  # something is drawn
    text = make(name, render_mode="ansi")
    text.reset(seed=0)
    out = text.render()
    assert "makespan" in out and "gpu2" in out


def test_suite_name_draws_a_graph_per_episode():
    env = gym.make("DevicePlacement-v0", graph="synthetic").unwrapped
    assert len(env.task.graphs) == 17
    drawn = {env.reset(seed=s)[1]["graph"] for s in range(12)}
    assert len(drawn) > 3 and drawn <= {f"synthetic/{i}" for i in range(17)}
    assert env.task.max_nodes == max(u.num_units for u in env.task.units)


def test_async_vector_env():
    venv = gym.make_vec("DevicePlacement-v0", num_envs=2, vectorization_mode="async", graph="synthetic/1")
    try:
        obs, info = venv.reset(seed=0)
        assert obs["embedding"].shape[0] == 2
        obs, reward, term, trunc, info = venv.step(venv.action_space.sample())
        assert reward.shape == (2,) and np.all(np.isfinite(reward))
    finally:
        venv.close()


@pytest.mark.parametrize("env_id", ["DevicePlacement-v0", "DevicePlacementSequential-v0"])
def test_a_step_after_the_episode_ended_needs_a_reset(env_id):
    env = gym.make(env_id, graph="synthetic/1", episode_length=2) if env_id == "DevicePlacement-v0" else \
        gym.make(env_id, graph="synthetic/1")
    env.reset(seed=0)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
    with pytest.raises(RuntimeError, match=r"the episode has ended .*call reset\(\) before step\(\)"):
        env.unwrapped.step(env.action_space.sample())
    env.reset(seed=1)
    env.step(env.action_space.sample())  # a new episode steps again
