"""One checkpoint format for every algorithm, and placing unseen graphs with a saved policy.

A checkpoint is a zip file holding

* ``checkpoint.json``: the format and version, the algorithm (``ppo``, ``a2c``,
  ``maskable-ppo``, ``reinforce``), the policy's settings (encoder, encoder
  options, stay prior), the algorithm's settings, the observation space (as
  plain data) and the environment steps trained;
* ``policy.pt`` and ``optimizer.pt``: the network's and the optimizer's
  ``state_dict``, tensors only.

Loading reads the JSON, rebuilds the model with :func:`agents.algorithms.make_model`
and loads the tensors with ``torch.load(..., weights_only=True)``: nothing in
the file is unpickled as code, so a checkpoint from anywhere is safe to load.
(A stable-baselines3 ``model.save`` zip is not: SB3 unpickles parts of it.)

* :func:`save_checkpoint` / :func:`load_model` / :func:`read_checkpoint`;
* :func:`save_network` / :func:`load_network`: the same format for a bare
  REINFORCE :class:`~agents.reinforce.PlacementNetwork`;
* :func:`place_graph`: a saved (or in-memory) policy places a graph it has never seen.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from .features_extractor import binary_count
from .reinforce import PlacementNetwork, ReinforceConfig, config_dict

FORMAT = "device-placement-checkpoint"
VERSION = 2


# ------------------------------------------------------------------------------------ spaces as plain data

def space_to_json(space: gym.Space) -> dict:
    """A placement observation space (a ``Dict`` of ``Box`` / ``MultiBinary`` / ``Discrete``) as plain data."""
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_json(v) for k, v in space.spaces.items()}}
    if isinstance(space, gym.spaces.Box):
        if not (np.all(space.low == space.low.flat[0]) and np.all(space.high == space.high.flat[0])):
            raise ValueError("only boxes with one lower and one upper bound are saved in checkpoints")
        return {"type": "Box", "low": space.low.flat[0].item(), "high": space.high.flat[0].item(),
                "shape": list(space.shape), "dtype": str(space.dtype)}
    if isinstance(space, gym.spaces.MultiBinary) and isinstance(space.n, (int, np.integer)):
        return {"type": "MultiBinary", "n": int(space.n)}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n)}
    raise ValueError(f"cannot save an observation space of type {type(space).__name__} in a checkpoint")


def space_from_json(data: Any, where: str = "observation_space") -> gym.Space:
    """Inverse of :func:`space_to_json`; a malformed entry is a ``ValueError`` naming it."""
    try:
        kind = data["type"]
        if kind == "Dict":
            return gym.spaces.Dict({k: space_from_json(v, f"{where}.{k}") for k, v in data["spaces"].items()})
        if kind == "Box":
            return gym.spaces.Box(data["low"], data["high"], tuple(int(x) for x in data["shape"]),
                                  np.dtype(data["dtype"]))
        if kind == "MultiBinary":
            return gym.spaces.MultiBinary(int(data["n"]))
        if kind == "Discrete":
            return gym.spaces.Discrete(int(data["n"]))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"checkpoint: {where} is malformed ({type(error).__name__}: {error})") from None
    raise ValueError(f"checkpoint: {where} has unknown space type {kind!r}")


def padding(space: gym.spaces.Dict) -> tuple[int, int, int]:
    """``(max_nodes, max_edges, max_devices)`` of a placement observation space."""
    return (binary_count(space["node_mask"]), binary_count(space["edge_mask"]),
            binary_count(space["gpu_onehot"]))


# ----------------------------------------------------------------------------------------- the file format

@dataclass(frozen=True)
class Checkpoint:
    """The contents of a checkpoint file, read without building anything."""

    algo: str
    policy: dict  # encoder, encoder_kwargs, expected_moves
    algo_kwargs: dict  # the algorithm's own settings (ReinforceConfig fields for REINFORCE)
    observation_space: gym.spaces.Dict
    num_timesteps: int
    policy_state: dict
    optimizer_state: dict | None

    @property
    def padding(self) -> tuple[int, int, int]:
        """``(max_nodes, max_edges, max_devices)`` the policy was built for."""
        return padding(self.observation_space)


def _tensor_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def algorithm_name(model: Any) -> str:
    """The :data:`~agents.algorithms.ALGORITHMS` name of a model's class (PPO -> ``ppo``, ...)."""
    names = {"PPO": "ppo", "A2C": "a2c", "MaskablePPO": "maskable-ppo", "Reinforce": "reinforce",
             "GuidedSearch": "guided"}
    for cls in type(model).__mro__:
        if cls.__name__ in names:
            return names[cls.__name__]
    raise ValueError(f"cannot save a {type(model).__name__}: checkpoints hold PPO, A2C, MaskablePPO or "
                     "Reinforce models")


def save_checkpoint(model: Any, path: str | os.PathLike, algo: str | None = None, algo_kwargs: dict | None = None,
                    policy: dict | None = None) -> None:
    """Write ``model`` (an SB3 algorithm or :class:`~agents.reinforce.Reinforce`) to ``path`` atomically.

    ``algo`` defaults to the model's class; ``algo_kwargs`` are the settings to rebuild it with (a REINFORCE
    agent's config by default; SB3's defaults otherwise, which matter only to train on); ``policy`` holds the
    encoder settings (by default from ``model.policy_kwargs``, or a REINFORCE agent's config)."""
    algo = algo or algorithm_name(model)
    if algo_kwargs is None:
        algo_kwargs = config_dict(model.config) if algo == "reinforce" else \
            model.settings_dict() if algo == "guided" else {}
    if policy is None:
        if algo == "guided":
            policy = {"encoder": model.policy.encoder_name, "encoder_kwargs": model.policy.encoder_kwargs,
                      "expected_moves": None}
        elif algo == "reinforce":
            policy = {k: algo_kwargs[k] for k in ("encoder", "encoder_kwargs", "expected_moves")}
        else:
            kw = model.policy_kwargs
            policy = {"encoder": kw.get("encoder", "fadp-gt"), "encoder_kwargs": kw.get("encoder_kwargs") or {},
                      "expected_moves": kw.get("expected_moves")}
    algo_kwargs = {k: v for k, v in algo_kwargs.items() if k not in policy}
    meta = {"format": FORMAT, "version": VERSION, "algo": algo, "policy": policy, "algo_kwargs": algo_kwargs,
            "observation_space": space_to_json(model.observation_space), "num_timesteps": int(model.num_timesteps)}
    optimizer = getattr(model.policy, "optimizer", None)
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("checkpoint.json", json.dumps(meta, indent=1))
            archive.writestr("policy.pt", _tensor_bytes(model.policy.state_dict()))
            if optimizer is not None:
                archive.writestr("optimizer.pt", _tensor_bytes(optimizer.state_dict()))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def read_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint file: JSON settings, and tensors loaded with ``weights_only=True``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such checkpoint file: {str(path)!r}")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "checkpoint.json" not in names:
                hint = (" (it looks like a stable-baselines3 model.save file: load it with PPO.load, which "
                        "unpickles code, only if you trust it, and pass the model)" if "data" in names else "")
                raise ValueError(f"{str(path)!r} is not a checkpoint of this project{hint}")
            meta = json.loads(archive.read("checkpoint.json"))
            policy_state = torch.load(io.BytesIO(archive.read("policy.pt")), weights_only=True)
            optimizer_state = (torch.load(io.BytesIO(archive.read("optimizer.pt")), weights_only=True)
                               if "optimizer.pt" in names else None)
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, RuntimeError, EOFError) as error:
        raise ValueError(f"{str(path)!r} is not a checkpoint of this project ({type(error).__name__}: "
                         f"{str(error).splitlines()[0] if str(error) else ''})") from None
    except Exception as error:  # noqa: BLE001 - torch's safe unpickler refuses anything but tensors
        if type(error).__name__ == "UnpicklingError":
            raise ValueError(f"{str(path)!r} holds something other than tensors; refused without running it "
                             f"({str(error).splitlines()[0]})") from None
        raise
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not a checkpoint of this project")
    if meta.get("version") != VERSION:
        raise ValueError(f"{str(path)!r} is checkpoint version {meta.get('version')!r}; this version reads "
                         f"{VERSION}")
    try:
        return Checkpoint(algo=str(meta["algo"]), policy=dict(meta["policy"]), algo_kwargs=dict(meta["algo_kwargs"]),
                          observation_space=_dict_space(space_from_json(meta["observation_space"]), path),
                          num_timesteps=int(meta["num_timesteps"]), policy_state=policy_state,
                          optimizer_state=optimizer_state)
    except (KeyError, TypeError) as error:
        raise ValueError(f"{str(path)!r}: checkpoint.json lacks {error}") from None


def _dict_space(space: gym.Space, path: str | os.PathLike) -> gym.spaces.Dict:
    if not isinstance(space, gym.spaces.Dict):
        raise ValueError(f"{str(path)!r}: the saved observation space is not a placement observation (a Dict)")
    return space


def load_model(path: str | os.PathLike, env: gym.Env | Any, **kwargs: Any) -> Any:
    """The model saved at ``path``, rebuilt on ``env`` (its observation space must be the saved one);
    ``kwargs`` go to the algorithm (e.g. ``tensorboard_log``)."""
    from .algorithms import make_model

    saved = read_checkpoint(path)
    if env.observation_space != saved.observation_space:
        raise ValueError(f"{str(path)!r} was trained on observations padded to (units, edges, devices) = "
                         f"{saved.padding}; this environment's differ: {env.observation_space}")
    model = make_model(saved.algo, env, **saved.policy, **saved.algo_kwargs, **kwargs)
    _load_state(model, saved, path)
    return model


def load_as(cls: type, path: str | os.PathLike, env: gym.Env, what: str) -> Any:
    """:func:`load_model`, refusing a checkpoint of another algorithm than ``cls`` (``what`` names it)."""
    model = load_model(path, env)
    if not isinstance(model, cls):
        raise ValueError(f"{str(path)!r} holds a {type(model).__name__} model, not {what}")
    return model


def _load_state(model: Any, saved: Checkpoint, path: str | os.PathLike) -> None:
    try:
        model.policy.load_state_dict(saved.policy_state)
        if saved.optimizer_state is not None:
            model.policy.optimizer.load_state_dict(saved.optimizer_state)
    except (RuntimeError, ValueError, KeyError) as error:
        raise ValueError(f"{str(path)!r}: the saved weights do not fit the model its settings describe "
                         f"({str(error).splitlines()[0]})") from None
    model.num_timesteps = saved.num_timesteps


def save_network(network: PlacementNetwork, config: ReinforceConfig, path: str | os.PathLike,
                 observation_space: gym.spaces.Dict) -> None:
    """Save a bare REINFORCE network (no optimizer state) in the checkpoint format."""

    class Holder:
        policy = network
        num_timesteps = 0

    Holder.observation_space = observation_space  # type: ignore[attr-defined]
    save_checkpoint(Holder, path, "reinforce", config_dict(config))


def load_network(path: str | os.PathLike) -> tuple[PlacementNetwork, ReinforceConfig, gym.spaces.Dict]:
    """``(network, config, observation space)`` of a REINFORCE checkpoint."""
    saved = read_checkpoint(path)
    if saved.algo != "reinforce":
        raise ValueError(f"{str(path)!r} holds a {saved.algo} model, not a REINFORCE network")
    config = ReinforceConfig(**saved.policy, **saved.algo_kwargs)
    network = PlacementNetwork(saved.observation_space, config.encoder, config.encoder_kwargs, config.head_hidden,
                               config.expected_moves)
    try:
        network.load_state_dict(saved.policy_state)
    except RuntimeError as error:
        raise ValueError(f"{str(path)!r}: the saved weights do not fit its settings "
                         f"({str(error).splitlines()[0]})") from None
    return network, config, saved.observation_space


def place_graph(policy: Any, graph: Any, num_devices: int | None = None, cluster: Any = None, steps: int = 10,
                initial_placement: str = "single", seed: int = 0, coarsen: bool = False) -> tuple[np.ndarray, float]:
    """Place ``graph`` (name, path or object) with a trained policy; returns ``(device per node, makespan s)``.

    ``policy``: a checkpoint path (:func:`save_checkpoint`, any algorithm), a
    :class:`PlacementNetwork`, or a model with SB3's ``predict`` (an SB3
    algorithm, :class:`~agents.reinforce.Reinforce`). The environment is padded
    to the policy's sizes, so the graph may have at most that many units and
    unit edges; with ``coarsen=True`` a larger graph is first coarsened until
    it fits (:func:`placement_env.coarsen_to_fit`). Coarsening only groups ops,
    so the placement is still a device per node of ``graph``, and the makespan
    is ``graph``'s.
    """
    import placement_env  # noqa: F401 - registers the environment
    from placement_env.envs.task import resolve_graphs
    from placement_env.graph.coarsen import coarsen_to_fit

    if isinstance(policy, (str, os.PathLike)):
        saved = read_checkpoint(policy)
        space = saved.observation_space
    else:
        space = policy.observation_space
    n, e, d = padding(space)
    if coarsen:
        graphs = resolve_graphs(graph)
        if len(graphs) != 1:
            raise ValueError(f"coarsen=True places one graph, got {len(graphs)} ({graph!r})")
        graph = coarsen_to_fit(graphs[0], n, e)
    env = gym.make("DevicePlacement-v0", graph=graph, num_devices=num_devices, cluster=cluster, max_nodes=n,
                   max_edges=e, max_devices=d, episode_length=steps, initial_placement=initial_placement)
    if isinstance(policy, (str, os.PathLike)):
        from .algorithms import make_model

        model = make_model(saved.algo, env, **saved.policy, **saved.algo_kwargs)
        _load_state(model, saved, policy)
        act = lambda obs: model.predict(obs, deterministic=True)[0]
    elif isinstance(policy, PlacementNetwork):
        act = lambda obs: policy(obs)[0].argmax(dim=-1).numpy()
    else:
        act = lambda obs: policy.predict(obs, deterministic=True)[0]
    obs, info = env.reset(seed=seed)
    with torch.no_grad():
        for _ in range(steps):
            obs, _, _, truncated, info = env.step(act(obs))
            if truncated:
                break
    return info["best_placement"], info["best_makespan"]
