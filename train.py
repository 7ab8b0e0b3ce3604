"""Train a device-placement policy and compare its best placement with the classical placers.

    python train.py                                   # FADP-GT + PPO on the default graph, about a minute
    python train.py --encoder gat --algo a2c --graph synthetic/3 --devices 5 --timesteps 20000
    python train.py --algo reinforce --episodes 200 --out runs/rf
    python train.py --algo maskable-ppo --encoder placeto            # Placeto's node-by-node MDP
    python train.py --out runs/x --resume                            # continue from runs/x/checkpoint

Top to bottom: parse and check the arguments; build the environment(s) and
the agent; train until ``--timesteps`` / ``--episodes`` or ``--budget-seconds``
(Ctrl-C stops cleanly), tracking the best placement any episode found for
each graph (feasible ones first); then simulate it, place the graph with the
classical placers, and write to ``--out``: ``placement.json`` (the spec's
placement format; with a suite, the first graph's, plus ``placements/`` with
every graph's), ``results.json`` (per graph under ``graphs``),
``learning_curve.png``, ``gantt.png``, the checkpoint, and TensorBoard logs
(SB3 algorithms).

Search time is the wall time of training plus the final simulation of the
best placement (validation); loading the graph, building the environments and
the agent, saving the final checkpoint and running the classical placers for
comparison are excluded, and a resumed run adds the search time of the runs
it resumes (``SearchClock``). ``best_found_seconds`` in the results is the
search time at which the best placement was first seen.

Departure from the spec's policy head, on by default here: ``--expected-moves 1``
adds the head's stay prior (``agents/heads.py``), so an untrained policy moves
about one unit per step instead of re-drawing every unit uniformly (a uniformly
random placement of ``cifar10/0`` takes 6x the single-GPU time).
``--expected-moves 0`` is the spec's head exactly.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

ALGORITHMS = ("ppo", "a2c", "reinforce", "maskable-ppo")
COMPARED_PLACERS = ("single", "heft", "m-etf", "metis")


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage too; one line is enough
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python train.py", description=__doc__.splitlines()[0])
    p.add_argument("--encoder", default="fadp-gt", help="a graph encoder name (graph_encoders.list_encoders())")
    p.add_argument("--algo", default="ppo", help=f"one of {', '.join(ALGORITHMS)}")
    p.add_argument("--graph", default="default", help="shipped graph name, suite name, or a graph file")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--devices", type=int, help="identical devices of --device-kind (default 3)")
    group.add_argument("--cluster", help="a cluster JSON file")
    p.add_argument("--device-kind", default="p100")
    p.add_argument("--timesteps", type=int, default=100_000, help="environment steps (SB3 algorithms)")
    p.add_argument("--episodes", type=int, default=10_000, help="episodes (REINFORCE)")
    p.add_argument("--budget-seconds", type=float, default=60.0, help="stop training after this long (default 60)")
    p.add_argument("--episode-length", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-envs", type=int, default=1, help="parallel environments (SubprocVecEnv when > 1)")
    p.add_argument("--hidden-dim", type=int, default=64)
    p.add_argument("--initial-placement", default="single",
                   help="where every episode starts: single, random, round_robin, or a placer name (e.g. heft)")
    p.add_argument("--expected-moves", type=float, default=1.0,
                   help="the head's stay prior: units an untrained policy moves per step (default 1; 0: off, "
                        "the spec's head exactly)")
    p.add_argument("--encoder-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an encoder keyword argument, e.g. use_low=false or num_layers=3 (repeatable)")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--epsilon", type=float, default=0.1,
                   help="REINFORCE: probability of drawing a unit's device uniformly instead of from the policy")
    p.add_argument("--checkpoint-every", type=int, default=2048, help="steps between checkpoints (SB3)")
    p.add_argument("--out", default="runs/latest", help="output folder (default runs/latest)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint in --out (without one: a new policy, with a notice)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar (auto: when the output is a terminal)")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Reject bad arguments with a ValueError naming them (turned into a one-line error)."""
    from graph_encoders import list_encoders

    if args.encoder not in list_encoders():
        raise ValueError(f"unknown encoder {args.encoder!r}; known: {', '.join(list_encoders())}")
    if args.algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {args.algo!r}; use one of {', '.join(ALGORITHMS)}")
    for name in ("timesteps", "episodes", "episode_length", "n_envs", "hidden_dim", "checkpoint_every"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.devices is not None and args.devices < 1:
        raise ValueError(f"--devices must be >= 1, got {args.devices}")
    if not 0 < args.budget_seconds < math.inf:
        raise ValueError(f"--budget-seconds must be positive and finite, got {args.budget_seconds}")
    if not 0 < args.learning_rate < math.inf:
        raise ValueError(f"--learning-rate must be positive and finite, got {args.learning_rate}")
    from placement_env.placement_task import initial_placement_names

    if args.initial_placement not in initial_placement_names():
        raise ValueError(f"unknown --initial-placement {args.initial_placement!r}; use one of "
                         f"{', '.join(initial_placement_names())}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    from placement_env.cli_common import check_output_paths

    try:
        check_output_paths(folder=args.out)
    except ValueError as exc:
        raise ValueError(f"--out {exc}") from None
    if args.expected_moves < 0:
        raise ValueError(f"--expected-moves must be >= 0, got {args.expected_moves}")
    if not 0 <= args.epsilon <= 1:
        raise ValueError(f"--epsilon must be in [0, 1], got {args.epsilon}")
    from graph_encoders import build_encoder

    build_encoder(args.encoder, 8, **encoder_options(args))  # an unknown option fails now, with its name


def check_resumed_policy(args: argparse.Namespace, encoder: str, options: dict | None,
                         expected_moves: float | None) -> None:
    """``--resume`` continues the saved policy: refuse a command line that asks for another one (its
    results would be labelled with the encoder asked for, not the one trained)."""
    saved = {"encoder": encoder, "encoder options": options or {}, "expected moves": float(expected_moves or 0)}
    asked = {"encoder": args.encoder, "encoder options": encoder_options(args),
             "expected moves": float(args.expected_moves)}  # 0: no stay prior, saved as None
    for key, value in asked.items():
        if saved[key] != value:
            raise ValueError(f"--resume: the checkpoint in {args.out!r} has {key} {saved[key]!r}, the command line "
                             f"asks for {value!r}; give the same settings, or another --out")


def encoder_options(args: argparse.Namespace) -> dict:
    """``--encoder-option KEY=VALUE`` as keyword arguments (values read as JSON: numbers, true/false, strings)."""
    options = {"hidden_dim": args.hidden_dim}
    for item in args.encoder_option:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--encoder-option must be KEY=VALUE, got {item!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


class SearchClock:
    """Search seconds: the wall time of training, from its start (environments and agent built) to its end,
    plus the search seconds of the runs this one resumes. ``--budget-seconds`` bounds this run's training;
    it is checked after every environment step (every episode for REINFORCE), so an update under way when
    it runs out is finished first."""

    def __init__(self, budget_seconds: float, resumed_seconds: float = 0.0) -> None:
        self.budget_seconds = budget_seconds
        self.resumed_seconds = resumed_seconds
        self._start: float | None = None
        self._stop: float | None = None

    def start(self) -> None:
        self._start = time.perf_counter()

    def stop(self) -> None:
        self._stop = time.perf_counter()

    def elapsed(self) -> float:
        """Search seconds so far."""
        if self._start is None:
            return self.resumed_seconds
        end = time.perf_counter() if self._stop is None else self._stop
        return self.resumed_seconds + end - self._start

    def expired(self) -> bool:
        """Whether this run's training has used up its budget."""
        return self._start is not None and time.perf_counter() - self._start >= self.budget_seconds


class BestTracker:
    """The best placement of each graph seen in any episode (feasible first), when it was first seen (seconds
    of search), and the learning curve: the best makespans so far, averaged over the graphs seen."""

    def __init__(self) -> None:
        self.best: dict[str, tuple[tuple[bool, float], list[int]]] = {}
        self.found_at: dict[str, float] = {}  # graph -> search seconds when its best was first seen
        self.curve: list[tuple[int, float]] = []  # (environment steps, seconds)
        self.elapsed = lambda: 0.0  # search seconds so far (set by main: SearchClock.elapsed)
        self.resumed_seconds = 0.0  # search seconds of the runs this one resumes

    def update(self, info: dict, steps: int) -> None:
        key = (bool(info["best_oom"]), float(info["best_makespan"]))
        name = info["graph"]
        if info.get("best_placement") is not None and (name not in self.best or key < self.best[name][0]):
            self.best[name] = (key, np.asarray(info["best_placement"]).tolist())
            self.found_at[name] = self.elapsed()
        level = float(np.mean([k[1] for k, _ in self.best.values()]))
        if not self.curve or self.curve[-1][1] != level or steps - self.curve[-1][0] >= 64:
            self.curve.append((steps, level))

    def state(self) -> dict:
        return {"best": {name: [list(key), placement] for name, (key, placement) in self.best.items()},
                "found_at": self.found_at, "elapsed": self.elapsed(), "curve": self.curve}

    def load(self, state: dict) -> None:
        self.best = {name: ((bool(k[0]), float(k[1])), p) for name, (k, p) in state["best"].items()}
        self.found_at = dict(state.get("found_at", {}))
        self.resumed_seconds = float(state.get("elapsed", 0.0))
        self.curve = [tuple(x) for x in state["curve"]]


def make_env_kwargs(args: argparse.Namespace) -> dict:
    kwargs = {"graph": args.graph, "initial_placement": args.initial_placement}
    if args.cluster:
        kwargs["cluster"] = args.cluster
    else:
        kwargs["num_devices"] = 3 if args.devices is None else args.devices
        kwargs["device_kind"] = args.device_kind
    if args.algo != "maskable-ppo":
        kwargs["episode_length"] = args.episode_length
    return kwargs


class CtrlC:
    """While active, Ctrl-C (SIGINT) asks training to stop at the next step, so the run still ends with all its
    outputs and checkpoint; a second Ctrl-C interrupts at once (KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.requested = False

    def __enter__(self) -> "CtrlC":
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("interrupted: stopping after this step, keeping the best placement found so far", file=sys.stderr)


def ignore_ctrl_c(env):
    """``make_vec_env`` wrapper for SubprocVecEnv workers: Ctrl-C is the main process's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return env


def train_sb3(args, out: Path, tracker: BestTracker, clock: SearchClock, stop: CtrlC) -> int:
    """Train an SB3 algorithm; returns the number of environment steps taken."""
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from agents import make_sb3
    from placement_env.cli_common import first_line

    env_id = "placement_env:DevicePlacementSequential-v0" if args.algo == "maskable-ppo" \
        else "placement_env:DevicePlacement-v0"
    vec_cls = SubprocVecEnv if args.n_envs > 1 else DummyVecEnv
    env = make_vec_env(env_id, n_envs=args.n_envs, seed=args.seed, vec_env_cls=vec_cls,
                       env_kwargs=make_env_kwargs(args), wrapper_class=ignore_ctrl_c if args.n_envs > 1 else None)
    checkpoint = out / "checkpoint.zip"
    tensorboard = str(out / "tensorboard") if _has("tensorboard") else None
    if args.resume and checkpoint.exists():
        if args.algo == "maskable-ppo":
            from sb3_contrib import MaskablePPO as Algo
        else:
            from stable_baselines3 import A2C, PPO

            Algo = PPO if args.algo == "ppo" else A2C
        try:
            model = Algo.load(checkpoint, env=env, tensorboard_log=tensorboard)
        except Exception as error:  # noqa: BLE001 - a corrupt zip, another algorithm's or graph's checkpoint
            raise ValueError(f"--resume: cannot load {str(checkpoint)!r} as a {args.algo} model for this graph "
                             f"and encoder ({type(error).__name__}: {first_line(error)})") from None
        saved = model.policy_kwargs
        check_resumed_policy(args, saved.get("encoder"), saved.get("encoder_kwargs"), saved.get("expected_moves"))
    else:
        n_steps = min(128, max(8, args.timesteps // args.n_envs))
        hyper = {"n_steps": n_steps, "batch_size": min(64, n_steps * args.n_envs), "n_epochs": 4} \
            if args.algo != "a2c" else {"n_steps": 8}
        model = make_sb3(args.algo, env, encoder=args.encoder, encoder_kwargs=encoder_options(args),
                         policy_kwargs={"expected_moves": args.expected_moves or None},
                         learning_rate=args.learning_rate, seed=args.seed, tensorboard_log=tensorboard, **hyper)

    class Track(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                tracker.update(info, self.num_timesteps)
            if self.num_timesteps % args.checkpoint_every < args.n_envs:
                self.model.save(checkpoint)
                (out / "tracker.json").write_text(json.dumps(tracker.state()))
            return not clock.expired() and not stop.requested

    clock.start()
    try:
        model.learn(total_timesteps=args.timesteps, callback=Track(), progress_bar=_progress(args),
                    reset_num_timesteps=not (args.resume and checkpoint.exists()), tb_log_name=args.algo)
    except KeyboardInterrupt:  # a second Ctrl-C
        print("interrupted at once: keeping the best placement found so far", file=sys.stderr)
    clock.stop()
    model.save(checkpoint)
    steps = int(model.num_timesteps)
    env.close()
    return steps


def train_reinforce_run(args, out: Path, tracker: BestTracker, clock: SearchClock, stop: CtrlC) -> int:
    import gymnasium as gym

    from agents import ReinforceConfig, load_network, save_network, train_reinforce

    env = gym.make("DevicePlacement-v0", **make_env_kwargs(args))
    config = ReinforceConfig(encoder=args.encoder, encoder_kwargs=encoder_options(args),
                             expected_moves=args.expected_moves or None,
                             learning_rate=args.learning_rate, epsilon=args.epsilon, episodes=args.episodes,
                             seed=args.seed)
    checkpoint = out / "checkpoint.pt"
    network = None
    if args.resume and checkpoint.exists():
        network, saved, _ = load_network(checkpoint)
        check_resumed_policy(args, saved.encoder, saved.encoder_kwargs, saved.expected_moves)
    steps = [0]

    def on_episode(record: dict) -> bool:
        steps[0] += args.episode_length
        tracker.update(record, steps[0])
        return not clock.expired() and not stop.requested

    clock.start()
    try:
        network, _ = train_reinforce(env, config, network=network, callback=on_episode)
    except KeyboardInterrupt:  # a second Ctrl-C
        print("interrupted at once: keeping the best placement found so far", file=sys.stderr)
    clock.stop()
    if network is not None:
        save_network(network, config, checkpoint, env.observation_space)
    return steps[0]


def write_outputs(args, out: Path, tracker: BestTracker, steps: int, search_seconds: float,
                  interrupted: bool = False) -> dict:
    """Simulate the best placement, compare with the placers, write every output file; returns the results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from baselines import PLACERS, PlacementInfeasibleError
    from placement_env import Cluster, simulate, write_placement
    from placement_env.placement_task import resolve_graphs
    from placement_env.render import gantt_rgb

    cluster = Cluster.from_json(args.cluster) if args.cluster else \
        Cluster.preset(args.device_kind, 3 if args.devices is None else args.devices)
    graphs = [g for g in resolve_graphs(args.graph) if g.name in tracker.best]
    if not graphs:
        raise RuntimeError("training ended before any placement was evaluated")
    per_graph, results_of = [], {}
    for graph in graphs:
        placement = np.asarray(tracker.best[graph.name][1])
        t0 = time.perf_counter()
        result = simulate(graph, placement, cluster)  # validation: part of the search time
        validation = time.perf_counter() - t0
        search_seconds += validation
        results_of[graph.name] = result
        compared = {}
        for name in COMPARED_PLACERS:
            try:
                compared[name] = simulate(graph, PLACERS[name](graph, cluster, args.seed), cluster).makespan
            except PlacementInfeasibleError as exc:
                compared[name] = f"infeasible: {exc}"
        per_graph.append({"graph": graph.name, "makespan": result.makespan, "lower_bound": result.lower_bound,
                          "best_found_seconds": tracker.found_at.get(graph.name), "validation_seconds": validation,
                          "lb_ratio": result.lb_ratio, "peak_memory": [int(x) for x in result.peak_memory],
                          "oom": result.oom, "baselines": compared})
        if len(graphs) > 1:
            (out / "placements").mkdir(exist_ok=True)
            write_placement(placement, out / "placements" / f"{graph.name.replace('/', '_')}.json")
    graph, first = graphs[0], per_graph[0]
    result, compared = results_of[graph.name], first["baselines"]
    write_placement(np.asarray(tracker.best[graph.name][1]), out / "placement.json")
    results = {
        **first, "cluster": cluster.to_dict(), "encoder": args.encoder, "algo": args.algo,
        "search_seconds": search_seconds, "steps": steps, "seed": args.seed, "interrupted": interrupted,
        "hyperparameters": {k: v for k, v in vars(args).items()},
        "graphs": per_graph,
        "hardware": {"machine": platform.machine(), "processor": platform.processor(), "cpus": os.cpu_count(),
                     "system": platform.platform()},
        "versions": {p: _version(p) for p in ("torch", "torch-geometric", "stable-baselines3", "sb3-contrib",
                                              "gymnasium", "numpy", "numba", "device-placement")},
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "tracker.json").write_text(json.dumps(tracker.state()))

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if tracker.curve:
        xs, ys = zip(*tracker.curve)
        label = f"{args.encoder} + {args.algo}, best so far" + (" (mean over graphs)" if len(graphs) > 1 else "")
        ax.step(xs, np.array(ys) * 1e3, where="post", label=label)
    for name, value in compared.items():
        if isinstance(value, float):
            ax.axhline(value * 1e3, linestyle="--", linewidth=0.8, label=name, color=f"C{1 + list(compared).index(name)}")
    ax.axhline(result.lower_bound * 1e3, color="k", linewidth=0.8, label="lower bound")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("makespan (ms)")
    ax.set_title(f"{graph.name} on {cluster.name}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "learning_curve.png")
    plt.close(fig)
    names = [d.name for d in cluster.devices]
    plt.imsave(out / "gantt.png", gantt_rgb(result, list(graph.ops), names, title=f"best placement, {graph.name}"))
    return results


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _progress(args) -> bool:
    if args.progress == "auto":
        return sys.stdout.isatty() and _has("tqdm") and _has("rich")
    return args.progress == "on"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    from placement_env import Cluster
    from placement_env.placement_task import resolve_graphs

    resolve_graphs(args.graph)  # a missing or malformed graph fails now, with its name
    if args.cluster:
        Cluster.from_json(args.cluster)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tracker = BestTracker()
    checkpoint = out / ("checkpoint.pt" if args.algo == "reinforce" else "checkpoint.zip")
    if args.resume and not checkpoint.exists():  # a first run of a job that is always started with --resume
        print(f"--resume: no checkpoint {str(checkpoint)!r} yet; starting a new policy", file=sys.stderr)
    if args.resume and (out / "tracker.json").exists():
        try:
            tracker.load(json.loads((out / "tracker.json").read_text()))
        except (ValueError, KeyError, TypeError, IndexError) as error:
            raise ValueError(f"--resume: {str(out / 'tracker.json')!r} is not a tracker file written by train.py "
                             f"({type(error).__name__}: {error})") from None
    clock = SearchClock(args.budget_seconds, tracker.resumed_seconds)
    tracker.elapsed = clock.elapsed
    trainer = train_reinforce_run if args.algo == "reinforce" else train_sb3
    with CtrlC() as stop:
        steps = trainer(args, out, tracker, clock, stop)
    results = write_outputs(args, out, tracker, steps, clock.elapsed(), stop.requested)

    print(f"{results['graph']}: {args.encoder} + {args.algo}, {steps} steps, "
          f"{results['search_seconds']:.1f} s of search on {os.cpu_count()} CPU cores")
    print(f"{'placement':<22} {'makespan (ms)':>14}")
    print(f"{'best found':<22} {results['makespan'] * 1e3:>14.3f}  ({results['lb_ratio']:.3f} x lower bound"
          f"{', OOM' if results['oom'] else ''})")
    for name, value in results["baselines"].items():
        shown = f"{value * 1e3:>14.3f}" if isinstance(value, float) else f"  {value}"
        print(f"{name:<22} {shown}")
    print(f"{'lower bound':<22} {results['lower_bound'] * 1e3:>14.3f}")
    print(f"outputs in {out}/")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # a graph / cluster file not found, an output that cannot be written
        from placement_env.cli_common import os_error_message

        print(f"error: {os_error_message(exc)}", file=sys.stderr)
        sys.exit(2)
