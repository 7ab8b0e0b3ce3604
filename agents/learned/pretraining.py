"""Pretrain one placement policy on many training graphs by expert iteration: :func:`pretrain`, what
``python -m agents.pretrain`` runs.

Three stages, each resumable from ``--out`` (rerun the same command after an interruption):

1. **Expert placements.** For every training problem (a graph of the suites' seeds ``0 .. seeds-1`` at each
   device count; seeds 100 and up are held out for :mod:`agents.paper.benchmark` and never used), the ``anneal`` placer
   with ``expert_seconds`` gives a placement; it is stored (relabelled to agree most with the start placement the
   observation shows, :meth:`~agents.algorithms.problem.PlacementProblem.labels`) under ``targets/``.
2. **Imitation.** The policy (FADP-GT and the per-unit head, :class:`~agents.policies.network.PlacementNetwork`) is
   trained by cross-entropy to propose each problem's stored placement from the observation of everything on
   one device, ``epochs`` passes over the problems in a shuffled order.
3. **Expert iteration** (``rounds`` times): for each problem the policy proposes placements, the annealing
   improves the best proposal (:func:`agents.algorithms.search_rounds.search_rounds` without learning), a better result
   replaces the stored placement, and the policy imitates the new placements for ``epochs`` more passes.

The policy is saved to ``--out/policy.zip`` (the project's checkpoint format, algorithm ``guided``) after every
epoch; ``pretrain.json`` beside it records the settings, the stages done, the seconds (in all and per stage), the
machine and the peak memory.

Stages 1 and 3 are the searches: one job per problem (stage 1) or per :data:`IMPROVE_CHUNK` problems (stage 3),
fanned out with ``--workers N`` or ``--ray`` (:mod:`agents.jobs`); each worker holds its problems' graphs and
simulators and sends back judged placements, and only the driver writes the targets. Stage 2, the policy's
passes, stays in the driver, where torch uses the machine's cores. ``--expert-steps`` makes stage 1 the same on
any machine and any number of workers.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from agents.algorithms.problem import PlacementProblem
from agents.algorithms.search_rounds import SearchRoundsConfig, imitation_loss, search_rounds
from agents.jobs import IN_PROCESS, Failure, FanOut, Job, JobRunner, failures, open_runner, run_jobs
from agents.training.lock import OutputLock
from baselines.anneal import anneal_units
from baselines.placers import placers_with_budget
from placement_env.cluster import Cluster
from placement_env.graph.io import graph_digest
from placement_env.json_files import digest_of, remove_stale_temporaries, write_text_atomically
from placement_env.zoo.registry import load_graph

from .placer import start_units
from .policy_file import POLICY_FILE, load_policy, new_network, save_policy
from .pretrain_config import PretrainConfig, problem_key


def peak_memory_bytes(who: int = resource.RUSAGE_SELF) -> int:
    """This process's peak resident memory (bytes); ``resource.RUSAGE_CHILDREN``: the largest of its ended
    children's."""
    peak = resource.getrusage(who).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def cpu_model() -> str:
    """The CPU's model name (from ``/proc/cpuinfo`` where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def expert_target(name: str, devices: int, config: PretrainConfig) -> dict:
    """Stage 1 for one training problem (a job, run in any worker): the expert placement, relabelled to agree with
    the start placement the observation shows, its makespan (s) and overflow (bytes), and that start."""
    graph, cluster = load_graph(name), Cluster.preset(num_devices=devices)
    start = start_units(graph, cluster, config.start, config.seed)
    if config.expert_steps is None:
        placement = placers_with_budget(config.expert_seconds)["anneal"](graph, cluster, config.seed)
        units = graph.unit_placement(placement)
    else:  # a fixed number of annealing steps from the best fast placement: the same result on any machine
        best_fast = start_units(graph, cluster, "best-fast", config.seed)
        found = anneal_units(graph, cluster, best_fast, config.seed, time_budget=None, max_steps=config.expert_steps)
        units = graph.unit_placement(found.placement)
    problem = PlacementProblem(graph, cluster, config.padding(devices), start)
    units = problem.labels(units)[0]
    makespan, overflow = problem.judge(units[None, :])
    return {"units": units.tolist(), "makespan": float(makespan[0]), "overflow": float(overflow[0]),
            "source": "anneal", "start": start.tolist()}


def expert_inputs(name: str, devices: int, config: PretrainConfig) -> str:
    """The digest of what determines a training problem's expert placement: the graph's content, the cluster's,
    and the expert settings (seconds or steps, seed, the start the observation shows, the device padding)."""
    graph = load_graph(name)
    return digest_of({"graph": graph_digest(graph), "cluster": Cluster.preset(num_devices=devices).to_dict(),
                      "expert_seconds": config.expert_seconds, "expert_steps": config.expert_steps,
                      "seed": config.seed, "start": config.start, "max_devices": config.max_devices})


def _stored(path: Path, inputs: str) -> bool:
    """Whether ``path`` holds a whole target made from ``inputs``."""
    try:
        return json.loads(path.read_text()).get("inputs") == inputs
    except (OSError, ValueError, AttributeError):
        return False


_NETWORKS: dict[str, object] = {}  # a worker's copy of the policy, by the digest of its file


def _network_from_bytes(policy: bytes):
    digest = hashlib.sha1(policy).hexdigest()
    if digest not in _NETWORKS:
        _NETWORKS.clear()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "policy.zip"
            path.write_bytes(policy)
            network = load_policy(path)
        network.eval()
        _NETWORKS[digest] = network
    return _NETWORKS[digest]


def improved_targets(policy: bytes, problems: list[tuple[str, str, int, list[int], float, float]],
                     config: PretrainConfig, round_index: int) -> dict[str, dict | None]:
    """Stage 3 for some training problems (a job): ``(key, graph name, devices, start units, old makespan s, old
    overflow bytes)`` each; the policy (``policy``, a policy file's bytes) proposes, the annealing improves the best
    proposal; ``{key: the new target, or None when it is not better}``."""
    network = _network_from_bytes(policy)
    rounds_config = SearchRoundsConfig(search_seconds=config.improve_seconds, chains=1)
    out: dict[str, dict | None] = {}
    for key, name, devices, start, old_makespan, old_overflow in problems:
        problem = PlacementProblem(load_graph(name), Cluster.preset(num_devices=devices), config.padding(devices),
                                   np.asarray(start, np.int64))
        with torch.no_grad():
            result = search_rounds(network, problem, config.improve_seconds * 2, rounds_config,
                                   seed=config.seed + round_index, max_rounds=1, starts=[problem.start_units])
        better = (result.overflow, result.makespan) < (old_overflow, old_makespan)
        out[key] = {"units": result.units.tolist(), "makespan": result.makespan, "overflow": result.overflow,
                    "source": f"expert iteration round {round_index}", "start": list(start)} if better else None
    return out


IMPROVE_CHUNK = 8  # training problems per stage-3 job: the policy travels once per chunk


def pretrain(config: PretrainConfig, out: str | os.PathLike, log=print, fanout: FanOut = IN_PROCESS,
             experts: str | os.PathLike | None = None) -> Path:
    """Run (or resume) the three stages into ``out``, the searches where ``fanout`` says (its workers live through
    all stages); returns the policy's path. ``out`` is held for the whole run
    (:class:`~agents.training.lock.OutputLock`): a second pretraining on it fails at once (``ValueError``).
    ``experts``: another pretraining's folder whose stage-1 targets are copied (only those made from the same
    inputs, :func:`expert_inputs`) instead of computed: pretrainings of several policies on the same experts."""
    Path(out).mkdir(parents=True, exist_ok=True)
    with OutputLock(out):
        for folder in (Path(out), Path(out) / "targets"):  # a killed run's half-written files (held by nobody now)
            remove_stale_temporaries(folder)
        with open_runner(fanout, preload=("agents.learned.pretraining",)) as runner:
            path = _stages(config, Path(out), log, runner, None if experts is None else Path(experts))
        if fanout.workers > 1 and fanout.ray is None:  # the worker processes have ended: their peak is known now
            record_path = Path(out) / "pretrain.json"
            record = json.loads(record_path.read_text())
            record["peak_worker_memory_bytes"] = max(int(record.get("peak_worker_memory_bytes", 0)),
                                                     peak_memory_bytes(resource.RUSAGE_CHILDREN))
            write_text_atomically(record_path, json.dumps(record, indent=1))
    return path


def _stages(config: PretrainConfig, out: Path, log, runner: JobRunner, experts: Path | None) -> Path:
    fanout = runner.fanout
    (out / "targets").mkdir(parents=True, exist_ok=True)
    record_path = out / "pretrain.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    defaults = json.loads(json.dumps(asdict(PretrainConfig())))  # settings added since a record was written
    if record and {**defaults, **record.get("config", {})} != json.loads(json.dumps(asdict(config))):
        raise ValueError(f"{out} holds a pretraining with other settings; use another --out or the same settings")
    record.setdefault("config", asdict(config))
    record.setdefault("stages", {})
    record.setdefault("seconds", 0.0)
    began = time.perf_counter()
    seconds_before = float(record["seconds"])

    def save_record() -> None:
        record["seconds"] = seconds_before + time.perf_counter() - began
        record["peak_memory_bytes"] = max(int(record.get("peak_memory_bytes", 0)), peak_memory_bytes())
        if fanout.workers > 1 or fanout.ray is not None:
            record["workers"] = fanout.describe()
        record["machine"] = {"platform": platform.platform(), "processor": cpu_model(), "cpus": os.cpu_count(),
                             "python": platform.python_version(), "torch": torch.__version__}
        write_text_atomically(record_path, json.dumps(record, indent=1))

    torch.manual_seed(config.seed)
    stage_seconds = record.setdefault("stage_seconds", {"experts": 0.0, "imitation": 0.0, "improvement": 0.0})

    def add_seconds(stage: str, since: float) -> None:
        stage_seconds[stage] = stage_seconds.get(stage, 0.0) + time.perf_counter() - since

    # ---- stage 1: expert placements (and the start placement each problem's observation shows), fanned out
    def path_of(key: str) -> Path:
        return out / "targets" / f"{key}.json"

    inputs = {problem_key(name, m): expert_inputs(name, m, config) for name, m in config.problems()}
    if experts is not None:  # another pretraining's experts, where they were made from the same inputs
        if not (experts / "targets").is_dir():
            raise ValueError(f"experts: {str(experts)!r} holds no targets/ folder of a pretraining")
        copied = [key for key in inputs if not _stored(path_of(key), inputs[key])
                  and _stored(experts / "targets" / f"{key}.json", inputs[key])]
        for key in copied:
            write_text_atomically(path_of(key), (experts / "targets" / f"{key}.json").read_text())
        if copied:
            log(f"stage 1: {len(copied)} expert placement(s) copied from {experts}")
        record["experts_from"] = str(experts)
    jobs = [Job(key, f"expert {key}", expert_target, (name, m, config)) for name, m in config.problems()
            for key in [problem_key(name, m)] if not _stored(path_of(key), inputs[key])]
    stage_began = time.perf_counter()
    if jobs:
        log(f"stage 1: {len(jobs)} expert placement(s) in {fanout.describe()}")

    def write_target(job: Job, data: dict) -> None:
        write_text_atomically(path_of(job.key), json.dumps({**data, "inputs": inputs[job.key]}))

    failed = failures(run_jobs(jobs, runner, on_done=write_target,
                               describe=lambda data: f"{data['makespan'] * 1e3:.3f} ms", title="expert placements"))
    if failed:
        raise RuntimeError(f"{len(failed)} expert placement(s) failed (rerun to retry): "
                           + "; ".join(f"{key}: {why}" for key, why in failed.items()))
    add_seconds("experts", stage_began)
    save_record()
    problems: dict[str, PlacementProblem] = {}
    for name, m in config.problems():
        key = problem_key(name, m)
        data = json.loads(path_of(key).read_text())
        graph, cluster = load_graph(name), Cluster.preset(num_devices=m)
        if "start" not in data:  # made by a version that did not store it
            data["start"] = start_units(graph, cluster, config.start, config.seed).tolist()
            write_text_atomically(path_of(key), json.dumps(data))
        problems[key] = PlacementProblem(graph, cluster, config.padding(m), np.asarray(data["start"], np.int64))

    def target(key: str) -> dict:
        return json.loads((out / "targets" / f"{key}.json").read_text())

    network = new_network(config.encoder, config.encoder_kwargs, config.max_devices, head=config.head)
    optimizer = torch.optim.Adam(network.parameters(), lr=config.learning_rate)
    policy_path = out / POLICY_FILE
    done_epochs = 0
    if policy_path.exists():  # the policy file is the truth: a kill before the record followed leaves it ahead
        network, optimizer_state = load_policy(policy_path, with_optimizer=True)
        optimizer = torch.optim.Adam(network.parameters(), lr=config.learning_rate)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
        done_epochs = network.info.get("epochs", 0)
        losses = network.info.get("losses", record["stages"].get("loss", [])[:done_epochs]
                                  if isinstance(done_epochs, int) else [])
        if not isinstance(done_epochs, int) or done_epochs < 0 or not isinstance(losses, list):
            raise ValueError(f"{str(policy_path)!r}: its info holds epochs {done_epochs!r} and losses of type "
                             f"{type(losses).__name__}; not a pretraining checkpoint to resume (another --out?)")
        record["stages"].update(epochs_done=done_epochs, loss=list(losses))
    total_epochs = config.epochs * (1 + config.rounds)
    while done_epochs < total_epochs:
        round_index = done_epochs // config.epochs
        if done_epochs % config.epochs == 0 and round_index > 0 \
                and record["stages"].get("improved_round", 0) < round_index:
            # ---- stage 3: the policy proposes, the annealing improves, better placements replace the targets
            stage_began = time.perf_counter()
            policy = policy_path.read_bytes()
            items = [(key, name, m, problems[key].start_units.tolist(), target(key)["makespan"],
                      target(key)["overflow"]) for name, m in config.problems() for key in [problem_key(name, m)]]
            chunks = [items[i:i + IMPROVE_CHUNK] for i in range(0, len(items), IMPROVE_CHUNK)]
            jobs = [Job(f"round {round_index} chunk {i}", f"round {round_index}: problems {i * IMPROVE_CHUNK + 1}-"
                        f"{i * IMPROVE_CHUNK + len(chunk)}", improved_targets, (policy, chunk, config, round_index))
                    for i, chunk in enumerate(chunks)]
            outcomes = run_jobs(jobs, runner, title="improvement jobs",
                                describe=lambda found: f"{sum(v is not None for v in found.values())} of "
                                                       f"{len(found)} improved")
            failed = failures(outcomes)
            improved = {key: data for found in outcomes.values() if not isinstance(found, Failure)
                        for key, data in found.items() if data is not None}
            if failed:
                raise RuntimeError(f"round {round_index}: {len(failed)} improvement job(s) failed (rerun to retry)")
            for key, data in improved.items():  # all or nothing: a failed round leaves the targets as they were
                write_text_atomically(path_of(key), json.dumps({**data, "inputs": inputs[key]}))
            better = len(improved)
            add_seconds("improvement", stage_began)
            record["stages"]["improved_round"] = round_index
            record["stages"].setdefault("improved", {})[str(round_index)] = better
            save_record()
            network.train()
        # ---- stage 2: imitation, one epoch (in this process: torch uses its cores)
        stage_began = time.perf_counter()
        keys = list(problems)
        targets = {key: problems[key].labels(np.asarray(target(key)["units"], np.int64)) for key in keys}
        total = 0.0
        order = np.random.default_rng([config.seed, done_epochs]).permutation(keys)  # the epoch's own shuffle
        for key in order:
            loss = imitation_loss(problems[key].logits(network), targets[key])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
        done_epochs += 1
        add_seconds("imitation", stage_began)
        record["stages"]["epochs_done"] = done_epochs
        record["stages"].setdefault("loss", []).append(total / len(keys))
        save_policy(network, policy_path, optimizer, info={"pretrain": asdict(config), "epochs": done_epochs,
                                                           "start": config.start,
                                                           "losses": record["stages"]["loss"]})
        save_record()
        log(f"epoch {done_epochs}/{total_epochs}: imitation loss {total / len(keys):.4f} per unit")
    return policy_path
