"""Where episodes start: the environments find the placers of baselines through an entry point, not an import."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import gymnasium as gym
import numpy as np
import pytest
from helpers import uniform_cluster

import placement_env  # noqa: F401 - registers the environments
from baselines import PLACERS, feasible_start
from baselines.memory import unit_demand
from placement_env import layered_dag
from placement_env.envs import starts
from placement_env.envs.starts import START_PLACERS_GROUP, StartPlacers, start_names, start_placer

SMALL = layered_dag(4, num_ops=40)


@pytest.fixture
def installed(monkeypatch):
    """Replace the installed entry points of the group by the given ``(name, "module:function")`` pairs."""
    def install(*points: tuple[str, str]) -> None:
        found = [EntryPoint(name, value, START_PLACERS_GROUP) for name, value in points]
        monkeypatch.setattr(starts, "entry_points", lambda group: found if group == START_PLACERS_GROUP else [])
        starts.installed_start_placers.cache_clear()

    yield install
    starts.installed_start_placers.cache_clear()


def last_device(graph, cluster, seed):
    return np.full(graph.num_nodes, cluster.num_devices - 1, np.int64)


def offers_last_device() -> StartPlacers:
    return StartPlacers(placers={"last-device": last_device}, within_memory=lambda graph, cluster: None)


def offers_nothing_useful() -> dict:
    return {}


def first_placement(env_id: str, **kw) -> np.ndarray:
    env = gym.make(env_id, **kw).unwrapped
    env.reset(seed=0)
    return env.episode.units


def test_the_installed_project_offers_every_placer_of_baselines_after_the_own_starts():
    assert start_names() == tuple(dict.fromkeys(("single", "random", "round_robin", *PLACERS)))
    assert start_placer("heft") is PLACERS["heft"]


@pytest.mark.parametrize("env_id", ["DevicePlacement-v0", "DevicePlacementSequential-v0"])
def test_an_episode_starts_from_the_named_placer_and_from_one_that_fits(env_id):
    c = uniform_cluster(3)
    heft_units = SMALL.unit_placement(PLACERS["heft"](SMALL, c, 0))
    assert np.array_equal(first_placement(env_id, graph=SMALL, cluster=c, initial_placement="heft"), heft_units)
    tight = uniform_cluster(3, memory=int(unit_demand(SMALL).sum() * 0.45))  # one device is not enough
    fits = SMALL.unit_placement(feasible_start(SMALL, tight)[1])
    assert np.array_equal(first_placement(env_id, graph=SMALL, cluster=tight), fits)


def test_another_package_adds_its_placer_and_a_bad_one_is_named(installed):
    installed(("mine", f"{__name__}:offers_last_device"))
    assert start_names() == ("single", "random", "round_robin", "last-device")
    units = first_placement("DevicePlacement-v0", graph=SMALL, cluster=uniform_cluster(3),
                            initial_placement="last-device")
    assert set(units.tolist()) == {2}
    installed(("broken", f"{__name__}:offers_nothing_useful"))
    with pytest.raises(TypeError, match="entry point 'broken' of 'placement_env.start_placers' .* returned dict, "
                                        "not StartPlacers"):
        start_names()


def test_without_the_entry_point_the_own_starts_work_and_a_placer_name_says_to_install(installed):
    installed()
    tight = uniform_cluster(3, memory=int(unit_demand(SMALL).sum() * 0.45))
    units = first_placement("DevicePlacement-v0", graph=SMALL, cluster=tight)
    assert set(units.tolist()) == {0}  # nothing offers a start within memory: one device, out of memory
    with pytest.raises(ValueError, match=r"unknown initial_placement 'heft'; use one of single, random, "
                                         r"round_robin \(no placers are installed .* pip install -e \., to start"):
        gym.make("DevicePlacement-v0", graph=SMALL, initial_placement="heft")
