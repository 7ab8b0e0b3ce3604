"""The checkpoint file: one format for every algorithm, read and written without knowing any of them.

A checkpoint is a zip file holding

* ``checkpoint.json``: the format and version, the algorithm's name (``ppo``, ``a2c``, ``maskable-ppo``,
  ``reinforce``, ``guided``), the policy's settings (``encoder``, ``encoder_kwargs``, ``expected_moves``), the
  algorithm's own settings as plain data, the observation space (as plain data) and the environment steps
  trained;
* ``policy.pt`` and ``optimizer.pt``: the network's and the optimizer's ``state_dict``, tensors only;
* ``training_state.json`` (optional): what a resumed run needs beyond the weights to continue exactly where the
  saved one stopped, as plain data: the random generators' states (:mod:`agents.algorithms.random_state`) and the
  algorithm's counters (REINFORCE's episodes and baseline, the guided search's rounds and archives). Files without
  it (0.1.x's, the shipped policy) load as before.

:func:`read_checkpoint` loads the tensors with ``torch.load(..., weights_only=True)``: nothing in the file is
unpickled as code, so a checkpoint from anywhere is safe to read. (A stable-baselines3 ``model.save`` zip is not:
SB3 unpickles parts of it.) Rebuilding a model from a :class:`Checkpoint` is each algorithm's business
(``cls(env, **settings)``, :mod:`agents.algorithms.base`); :mod:`agents.algorithms.registry` does it by name.
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

from agents.policies.features_extractor import binary_count, observation_sizes
from graph_encoders import build_encoder
from placement_env.json_files import byte_limit, temporary_path

FORMAT = "device-placement-checkpoint"
VERSION = 2
MAX_BYTES_VARIABLE = "DEVICE_PLACEMENT_MAX_CHECKPOINT_BYTES"
DEFAULT_MAX_BYTES = 256 * 2**20  # uncompressed, per member (the shipped policy's weights are about 1 MB)
MAX_SETTINGS_BYTES = 16 * 2**20  # checkpoint.json
MAX_SPACE_ELEMENTS = 50_000_000  # an observation of more padded values is no placement policy's


def max_checkpoint_bytes() -> int:
    """The most bytes one member of a checkpoint may hold once uncompressed: :data:`DEFAULT_MAX_BYTES`, or the
    environment variable ``DEVICE_PLACEMENT_MAX_CHECKPOINT_BYTES`` when set (``ValueError`` if not a positive
    whole number)."""
    return byte_limit(MAX_BYTES_VARIABLE, DEFAULT_MAX_BYTES)


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
            shape = tuple(int(x) for x in data["shape"])
            _check_elements(where, int(np.prod(shape, dtype=np.float64)))
            return gym.spaces.Box(data["low"], data["high"], shape, np.dtype(data["dtype"]))
        if kind == "MultiBinary":
            _check_elements(where, int(data["n"]))
            return gym.spaces.MultiBinary(int(data["n"]))
        if kind == "Discrete":
            return gym.spaces.Discrete(int(data["n"]))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"checkpoint: {where} is malformed ({type(error).__name__}: {error})") from None
    raise ValueError(f"checkpoint: {where} has unknown space type {kind!r}")


def _check_elements(where: str, count: int) -> None:
    if not 0 <= count <= MAX_SPACE_ELEMENTS:
        raise ValueError(f"checkpoint: {where} declares {count:,} values, more than the {MAX_SPACE_ELEMENTS:,} any "
                         "placement observation has")


def padding(space: gym.spaces.Dict) -> tuple[int, int, int]:
    """``(max_nodes, max_edges, max_devices)`` of a placement observation space."""
    return (binary_count(space["node_mask"]), binary_count(space["edge_mask"]),
            binary_count(space["gpu_onehot"]))


# ----------------------------------------------------------------------------------------- the file format

@dataclass(frozen=True)
class Checkpoint:
    """The contents of a checkpoint file (states are ``state_dict`` s of tensors), read without building anything."""

    algo: str
    policy: dict  # encoder, encoder_kwargs, expected_moves
    algo_kwargs: dict  # the algorithm's own settings, plain data
    observation_space: gym.spaces.Dict
    num_timesteps: int
    policy_state: dict
    optimizer_state: dict | None
    training_state: dict | None = None  # plain data; None in files without it

    @property
    def padding(self) -> tuple[int, int, int]:
        """``(max_nodes, max_edges, max_devices)`` the policy was built for."""
        return padding(self.observation_space)


def _tensor_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def write_checkpoint(checkpoint: Checkpoint, path: str | os.PathLike) -> None:
    """Write ``checkpoint`` to ``path`` atomically (a temporary file renamed over it: a reader never sees half a
    file). Raises ``ValueError`` for an observation space that plain data cannot hold."""
    meta = {"format": FORMAT, "version": VERSION, "algo": checkpoint.algo, "policy": checkpoint.policy,
            "algo_kwargs": checkpoint.algo_kwargs, "observation_space": space_to_json(checkpoint.observation_space),
            "num_timesteps": int(checkpoint.num_timesteps)}
    path = Path(path)
    temporary = temporary_path(path)
    try:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("checkpoint.json", json.dumps(meta, indent=1))
            archive.writestr("policy.pt", _tensor_bytes(checkpoint.policy_state))
            if checkpoint.optimizer_state is not None:
                archive.writestr("optimizer.pt", _tensor_bytes(checkpoint.optimizer_state))
            if checkpoint.training_state is not None:
                archive.writestr("training_state.json", json.dumps(checkpoint.training_state))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def read_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint file: JSON settings, and tensors loaded with ``weights_only=True``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a file that is not a checkpoint of this project (an SB3 ``model.save`` file is named as such),
            of another version, holding something other than tensors, or missing an entry (named)."""
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
            limit = max_checkpoint_bytes()
            for info in archive.infolist():
                cap = MAX_SETTINGS_BYTES if info.filename.endswith(".json") else limit
                if info.file_size > cap:
                    raise ValueError(f"{str(path)!r}: its member {info.filename!r} expands to {info.file_size:,} "
                                     f"bytes, more than the limit of {cap:,}" + (
                                         f" (raise it with the environment variable {MAX_BYTES_VARIABLE})"
                                         if cap == limit else ""))
            meta = json.loads(archive.read("checkpoint.json"))
            policy_state = torch.load(io.BytesIO(archive.read("policy.pt")), weights_only=True)
            optimizer_state = (torch.load(io.BytesIO(archive.read("optimizer.pt")), weights_only=True)
                               if "optimizer.pt" in names else None)
            training_state = (json.loads(archive.read("training_state.json"))
                              if "training_state.json" in names else None)
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, UnicodeDecodeError, RuntimeError, EOFError,
            RecursionError) as error:
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
        saved = Checkpoint(algo=str(meta["algo"]), policy=dict(meta["policy"]), algo_kwargs=dict(meta["algo_kwargs"]),
                           observation_space=_dict_space(space_from_json(meta["observation_space"]), path),
                           num_timesteps=int(meta["num_timesteps"]), policy_state=policy_state,
                           optimizer_state=optimizer_state, training_state=training_state)
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{str(path)!r}: checkpoint.json lacks {error}, or holds it in the wrong form") from None
    if training_state is not None and not isinstance(training_state, dict):
        raise ValueError(f"{str(path)!r}: training_state.json is not a mapping")
    check_weights(saved, path)
    return saved


def check_weights(saved: Checkpoint, path: str | os.PathLike) -> None:
    """Refuse, before any network is built, a checkpoint whose weights are not finite tensors, or whose declared
    encoder (its name and options) has other parameter shapes than the saved weights: the declared encoder is
    built on PyTorch's ``meta`` device, which holds shapes and no memory, so a small file that declares a huge
    network costs nothing. ``ValueError`` naming the tensor or the setting."""
    if not isinstance(saved.policy_state, dict) or not saved.policy_state:
        raise ValueError(f"{str(path)!r}: policy.pt holds no weights")
    for name, tensor in saved.policy_state.items():
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{str(path)!r}: policy.pt's entry {name!r} is not a tensor")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{str(path)!r}: the weights {name!r} are not all finite (NaN or infinite)")
    encoder, options = saved.policy.get("encoder"), saved.policy.get("encoder_kwargs") or {}
    if not isinstance(encoder, str) or not isinstance(options, dict):
        raise ValueError(f"{str(path)!r}: checkpoint.json's policy names no encoder")
    try:
        _, in_dim, max_devices = observation_sizes(saved.observation_space)
        if saved.policy.get("head") == "device-embedding":  # its encoder reads no device one-hot
            in_dim -= max_devices
        with torch.device("meta"):
            declared = build_encoder(encoder, in_dim, **options).state_dict()
    except (ValueError, TypeError, KeyError, RuntimeError) as error:
        raise ValueError(f"{str(path)!r}: its policy settings do not describe an encoder ({error})") from None
    head_hidden = saved.algo_kwargs.get("head_hidden")
    head = next((t for key, t in saved.policy_state.items() if key.endswith("head.mlp.0.weight")), None)
    if head_hidden is not None and (not isinstance(head_hidden, int) or isinstance(head_hidden, bool)
                                    or (head is not None and head.dim() == 2 and head.shape[0] != head_hidden)):
        raise ValueError(f"{str(path)!r}: its settings declare head_hidden {head_hidden!r}, but its head's weights "
                         f"are {None if head is None else tuple(head.shape)}; refused before building it")
    first = next(iter(declared))
    prefix = next((key[: -len(first)] for key in saved.policy_state if key.endswith("encoder." + first)), None)
    for key, tensor in declared.items():
        stored = saved.policy_state.get(f"{prefix}{key}") if prefix is not None else None
        if stored is None or tuple(stored.shape) != tuple(tensor.shape):
            raise ValueError(f"{str(path)!r}: its settings declare a {encoder!r} encoder ({options}) whose weight "
                             f"{key!r} is {tuple(tensor.shape)}, but the file holds "
                             f"{'none' if stored is None else tuple(stored.shape)}; refused before building it")


def _dict_space(space: gym.Space, path: str | os.PathLike) -> gym.spaces.Dict:
    if not isinstance(space, gym.spaces.Dict):
        raise ValueError(f"{str(path)!r}: the saved observation space is not a placement observation (a Dict)")
    return space
