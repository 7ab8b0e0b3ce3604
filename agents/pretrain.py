"""Pretrain one placement policy on many training graphs by expert iteration: ``python -m agents.pretrain``.

Three stages, each resumable from ``--out`` (rerun the same command after an interruption):

1. **Expert placements.** For every training problem (a graph of the suites' seeds ``0 .. seeds-1`` at each
   device count; seeds 100 and up are held out for :mod:`agents.benchmark` and never used), the ``anneal`` placer
   with ``expert_seconds`` gives a placement; it is stored (relabelled to agree most with the start placement the
   observation shows, :meth:`~agents.guided_search.PlacementProblem.labels`) under ``targets/``.
2. **Imitation.** The policy (FADP-GT and the per-unit head, :class:`~agents.reinforce.PlacementNetwork`) is
   trained by cross-entropy to propose each problem's stored placement from the observation of everything on
   one device, ``epochs`` passes over the problems in a shuffled order.
3. **Expert iteration** (``rounds`` times): for each problem the policy proposes placements, the annealing
   improves the best proposal (:func:`agents.guided_search.guided_search` without learning), a better result
   replaces the stored placement, and the policy imitates the new placements for ``epochs`` more passes.

The policy is saved to ``--out/policy.zip`` (the project's checkpoint format, algorithm ``guided``) after every
epoch; ``pretrain.json`` beside it records the settings, the stages done, the seconds, the machine and the
peak memory.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from placement_env.checks import checked_count, checked_finite
from placement_env.cli import OneLineParser, check_output_paths
from placement_env.json_files import write_text_atomically

HELD_OUT_FIRST_SEED = 100  # the suites' seeds from here on are the benchmark's held-out graphs
TRAINING_SUITES = ("ptb", "cifar10", "nmt")
POLICY_STARTS = ("best-fast", "single")  # what the policy's observation shows (agents.place.start_units)


@dataclass(frozen=True)
class PretrainConfig:
    """Pretraining settings (seconds for times). Frozen and checked when built."""

    suites: tuple[str, ...] = TRAINING_SUITES
    seeds: int = 48
    devices: tuple[int, ...] = (3, 5, 8)
    max_devices: int = 8
    expert_seconds: float = 1.5
    improve_seconds: float = 1.0
    epochs: int = 12
    rounds: int = 1
    learning_rate: float = 1e-3
    encoder: str = "fadp-gt"
    encoder_kwargs: dict = field(default_factory=dict)
    start: str = "best-fast"
    seed: int = 0

    def __post_init__(self) -> None:
        checked_count("seeds", self.seeds, 1)
        if self.seeds > HELD_OUT_FIRST_SEED:
            raise ValueError(f"seeds: at most {HELD_OUT_FIRST_SEED} (seeds {HELD_OUT_FIRST_SEED} and up are held out "
                             f"for the benchmark), got {self.seeds}")
        for suite in self.suites:
            if suite not in TRAINING_SUITES + ("synthetic",):
                raise ValueError(f"suites: unknown training suite {suite!r}; use {', '.join(TRAINING_SUITES)}, "
                                 "synthetic")
        if not self.devices:
            raise ValueError("devices: give at least one device count")
        for m in self.devices:
            checked_count("devices", m, 2)
            if m > self.max_devices:
                raise ValueError(f"devices: {m} is more than max_devices={self.max_devices}")
        for name in ("expert_seconds", "improve_seconds", "learning_rate"):
            if not checked_finite(name, getattr(self, name)) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.start not in POLICY_STARTS:
            raise ValueError(f"start: use one of {', '.join(POLICY_STARTS)}, got {self.start!r}")
        checked_count("epochs", self.epochs, 1)
        checked_count("rounds", self.rounds, 0)

    def problems(self) -> list[tuple[str, int]]:
        """``(graph name, device count)`` of every training problem."""
        return [(f"{suite}/{seed}", m) for suite in self.suites for seed in range(self.seeds) for m in self.devices]


def problem_key(name: str, devices: int) -> str:
    return f"{name.replace('/', '-')}_{devices}gpu"


def peak_memory_bytes() -> int:
    """This process's peak resident memory (bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
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


def pretrain(config: PretrainConfig, out: str | os.PathLike, log=print) -> Path:
    """Run (or resume) the three stages into ``out``; returns the policy's path."""
    import numpy as np
    import torch

    from baselines.placers import placers_with_budget
    from placement_env.cluster import Cluster
    from placement_env.zoo.registry import load_graph

    from .guided_search import GuidedSearchSettings, PlacementProblem, guided_search, imitation_loss
    from .place import start_units
    from .policy_file import POLICY_FILE, new_network, save_policy

    out = Path(out)
    (out / "targets").mkdir(parents=True, exist_ok=True)
    record_path = out / "pretrain.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    if record and record.get("config") != json.loads(json.dumps(asdict(config))):
        raise ValueError(f"{out} holds a pretraining with other settings; use another --out or the same settings")
    record.setdefault("config", asdict(config))
    record.setdefault("stages", {})
    record.setdefault("seconds", 0.0)
    began = time.perf_counter()
    seconds_before = float(record["seconds"])

    def save_record() -> None:
        record["seconds"] = seconds_before + time.perf_counter() - began
        record["peak_memory_bytes"] = max(int(record.get("peak_memory_bytes", 0)), peak_memory_bytes())
        record["machine"] = {"platform": platform.platform(), "processor": cpu_model(), "cpus": os.cpu_count(),
                             "python": platform.python_version(), "torch": torch.__version__}
        write_text_atomically(record_path, json.dumps(record, indent=1))

    torch.manual_seed(config.seed)

    # ---- stage 1: expert placements (and the start placement each problem's observation shows)
    anneal = placers_with_budget(config.expert_seconds)["anneal"]
    problems: dict[str, PlacementProblem] = {}
    for i, (name, m) in enumerate(config.problems()):
        key, graph, cluster = problem_key(name, m), load_graph(name), Cluster.preset(num_devices=m)
        path = out / "targets" / f"{key}.json"
        if not path.exists():
            placement = anneal(graph, cluster, config.seed)
            start = start_units(graph, cluster, config.start, config.seed)
            problem = PlacementProblem(graph, cluster, config.max_devices, start)
            units = problem.labels(graph.unit_placement(placement))[0]
            makespan, overflow = problem.judge(units[None, :])
            write_text_atomically(path, json.dumps({"units": units.tolist(), "makespan": float(makespan[0]),
                                                    "overflow": float(overflow[0]), "source": "anneal",
                                                    "start": start.tolist()}))
            log(f"expert {i + 1}/{len(config.problems())} {key}: {makespan[0] * 1e3:.3f} ms")
            save_record()
        data = json.loads(path.read_text())
        if "start" not in data:  # made by a version that did not store it
            data["start"] = start_units(graph, cluster, config.start, config.seed).tolist()
            write_text_atomically(path, json.dumps(data))
        start = np.asarray(data["start"], np.int64)
        problems[key] = PlacementProblem(graph, cluster, config.max_devices, start)

    def target(key: str) -> dict:
        return json.loads((out / "targets" / f"{key}.json").read_text())

    network = new_network(config.encoder, config.encoder_kwargs, config.max_devices)
    optimizer = torch.optim.Adam(network.parameters(), lr=config.learning_rate)
    policy_path = out / POLICY_FILE
    done_epochs = int(record["stages"].get("epochs_done", 0))
    if done_epochs and policy_path.exists():
        from .policy_file import load_policy

        network, optimizer_state = load_policy(policy_path, with_optimizer=True)
        optimizer = torch.optim.Adam(network.parameters(), lr=config.learning_rate)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
    rng = np.random.default_rng(config.seed)
    total_epochs = config.epochs * (1 + config.rounds)
    settings = GuidedSearchSettings(search_seconds=config.improve_seconds, chains=1)
    while done_epochs < total_epochs:
        round_index = done_epochs // config.epochs
        if done_epochs % config.epochs == 0 and round_index > 0 \
                and record["stages"].get("improved_round", 0) < round_index:
            # ---- stage 3: the policy proposes, the annealing improves, better placements replace the targets
            network.eval()
            better = 0
            for i, (key, problem) in enumerate(problems.items()):
                old = target(key)
                with torch.no_grad():
                    result = guided_search(network, problem, config.improve_seconds * 2, settings,
                                           seed=config.seed + round_index, max_rounds=1,
                                           starts=[problem.start_units])
                if (result.overflow, result.makespan) < (old["overflow"], old["makespan"]):
                    better += 1
                    write_text_atomically(out / "targets" / f"{key}.json", json.dumps(
                        {"units": result.units.tolist(), "makespan": result.makespan, "overflow": result.overflow,
                         "source": f"expert iteration round {round_index}"}))
                if (i + 1) % 20 == 0:
                    log(f"round {round_index}: improved {better} of {i + 1} expert placements")
            record["stages"]["improved_round"] = round_index
            record["stages"].setdefault("improved", {})[str(round_index)] = better
            save_record()
            network.train()
        # ---- stage 2: imitation, one epoch
        keys = list(problems)
        targets = {key: problems[key].labels(np.asarray(target(key)["units"], np.int64)) for key in keys}
        total = 0.0
        for key in rng.permutation(keys):
            loss = imitation_loss(problems[key].logits(network), targets[key])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
        done_epochs += 1
        record["stages"]["epochs_done"] = done_epochs
        record["stages"].setdefault("loss", []).append(total / len(keys))
        save_policy(network, policy_path, optimizer, info={"pretrain": asdict(config), "epochs": done_epochs,
                                                                  "start": config.start})
        save_record()
        log(f"epoch {done_epochs}/{total_epochs}: imitation loss {total / len(keys):.4f} per unit")
    return policy_path


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m agents.pretrain", description=__doc__.split("\n\n")[0])
    defaults = PretrainConfig()
    parser.add_argument("--out", default="runs/pretrain", help="output folder (resumed when it holds a run)")
    parser.add_argument("--suites", nargs="+", default=list(defaults.suites))
    parser.add_argument("--seeds", type=int, default=defaults.seeds,
                        help=f"train on seeds 0..SEEDS-1 of each suite (at most {HELD_OUT_FIRST_SEED})")
    parser.add_argument("--devices", type=int, nargs="+", default=list(defaults.devices))
    parser.add_argument("--expert-seconds", type=float, default=defaults.expert_seconds)
    parser.add_argument("--improve-seconds", type=float, default=defaults.improve_seconds)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--start", choices=POLICY_STARTS, default=defaults.start,
                        help="the placement the policy's observation shows: the best fast classical placement "
                             "(default) or everything on one device")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)
    try:
        config = PretrainConfig(suites=tuple(args.suites), seeds=args.seeds, devices=tuple(args.devices),
                                expert_seconds=args.expert_seconds, improve_seconds=args.improve_seconds,
                                epochs=args.epochs, rounds=args.rounds, start=args.start, seed=args.seed)
        check_output_paths(None, args.out)
        path = pretrain(config, args.out, log=lambda line: print(line, flush=True))
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: what was done is kept in {args.out}; rerun the command to resume", file=sys.stderr)
        return 130
    print(f"policy in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
