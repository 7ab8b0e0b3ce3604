"""``train(config) -> RunResult``: one training run, read top to bottom.

1. Check the config against what it names (encoder, start placement, graph, cluster, output folder).
2. Build the environment(s) and the model (:func:`agents.algorithms.registry.make_model`), or load the checkpoint
   in ``out`` when resuming (:func:`agents.algorithms.registry.load_model`; the policy asked for must be the one
   saved).
3. Train until the step limit or ``budget_seconds`` (Ctrl-C stops cleanly), tracking the best placement any
   episode found for each graph, feasible ones first; checkpoint every ``checkpoint_every`` steps.
4. Save the checkpoint, judge the best placements and write the outputs (:mod:`agents.training.outputs`).

Search time is the wall time of training plus the final simulation of the best placement (validation);
loading the graph, building the environments and the model, saving the checkpoint and running the classical
placers for comparison are excluded, and a resumed run adds the search time of the runs it resumes.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from agents.algorithms.checkpoint import read_checkpoint
from agents.algorithms.registry import load_model, make_model, save_checkpoint
from agents.training.clock import SearchClock, StopOnCtrlC, ignore_ctrl_c
from agents.training.config import TrainConfig
from agents.training.lock import OutputLock
from agents.training.outputs import write_outputs
from agents.training.progress import ProgressReport
from agents.training.tracker import BestTracker
from graph_encoders import build_encoder, list_encoders
from placement_env import Cluster, ComputationGraph
from placement_env.envs.task import CoarsenedGraphWarning
from placement_env.json_files import remove_stale_temporaries, write_text_atomically
from placement_env.sim.pipeline import Step

CHECKPOINT = "checkpoint.zip"


@dataclass(frozen=True)
class RunResult:
    """What a run found: its first graph's best placement judged (seconds), and the whole ``results.json``.

    ``record`` holds everything (``graphs`` has one entry per graph of a suite); ``out`` is the output folder.
    """

    graph: str
    makespan: float
    lower_bound: float
    oom: bool
    steps: int
    search_seconds: float
    interrupted: bool
    out: Path
    record: dict[str, Any]
    terminated: bool = False  # stopped by SIGTERM (interrupted is then True too)

    @property
    def lb_ratio(self) -> float:
        """Makespan over the lower bound (1.0 is a perfect placement)."""
        return float(self.record["lb_ratio"])


def check_config(config: TrainConfig) -> tuple[list[ComputationGraph], Cluster]:
    """Refuse, before any work, what the config names but cannot be had (a ``ValueError`` or ``OSError`` naming
    it); returns the graphs and the cluster."""
    if config.encoder not in list_encoders():
        raise ValueError(f"unknown encoder {config.encoder!r}; known: {', '.join(list_encoders())}")
    build_encoder(config.encoder, 8, **config.encoder_kwargs())  # an unknown option fails now, with its name
    return config.problem(notify=True)


def stay_prior(config: TrainConfig) -> float | None:
    """The head's stay prior for this run: ``expected_moves`` (None when 0); the guided search's policy has none."""
    return None if config.algo == "guided" else (config.expected_moves or None)


def check_resumed_policy(config: TrainConfig, saved: dict[str, Any]) -> None:
    """Resuming continues the saved policy: refuse a config that asks for another one (its results would be
    labelled with the encoder asked for, not the one trained)."""
    have = {"algorithm": saved["algo"], "encoder": saved["policy"]["encoder"],
            "encoder options": saved["policy"]["encoder_kwargs"] or {},
            "expected moves": float(saved["policy"]["expected_moves"] or 0)}
    asked = {"algorithm": config.algo, "encoder": config.encoder, "encoder options": config.encoder_kwargs(),
             "expected moves": float(stay_prior(config) or 0)}  # 0: no stay prior, saved as None
    for key, value in asked.items():
        if have[key] != value:
            raise ValueError(f"--resume: the checkpoint in {config.out!r} has {key} {have[key]!r}, the command "
                             f"line asks for {value!r}; give the same settings, or another --out")


def algo_kwargs(config: TrainConfig) -> dict[str, Any]:
    """The algorithm's own settings for this run (saved in the checkpoint, so a resumed run has the same)."""
    if config.algo == "reinforce":
        return {"learning_rate": config.learning_rate, "epsilon": config.epsilon, "episodes": config.episodes,
                "seed": config.seed}
    if config.algo == "guided":  # a round (two annealing chains) lasts about a sixth of the budget at most
        return {"learning_rate": config.learning_rate, "seed": config.seed,
                "search_seconds": min(2.0, max(0.05, config.budget_seconds / 12))}
    if config.algo == "a2c":
        return {"n_steps": 8, "learning_rate": config.learning_rate, "seed": config.seed}
    n_steps = min(128, max(8, config.timesteps // config.n_envs))
    return {"n_steps": n_steps, "batch_size": min(64, n_steps * config.n_envs), "n_epochs": 4,
            "learning_rate": config.learning_rate, "seed": config.seed}


def make_env(config: TrainConfig) -> Any:
    """The training environment: a vectorized one for SB3 (SubprocVecEnv when ``n_envs`` > 1), a plain one for
    REINFORCE."""
    with warnings.catch_warnings():  # a coarsened graph: config.problem() has said so
        warnings.simplefilter("ignore", CoarsenedGraphWarning)
        return _make_env(config)


def _make_env(config: TrainConfig) -> Any:
    """:func:`make_env`'s work."""
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    if config.algo in ("reinforce", "guided"):
        return gym.make(config.env_id(), **config.env_kwargs())
    parallel = config.n_envs > 1
    return make_vec_env(f"placement_env:{config.env_id()}", n_envs=config.n_envs, seed=config.seed,
                        vec_env_cls=SubprocVecEnv if parallel else DummyVecEnv, env_kwargs=config.env_kwargs(),
                        wrapper_class=ignore_ctrl_c if parallel else None)


class TrackBest(BaseCallback):
    """After every environment step: feed the tracker, checkpoint now and then, and stop when the budget is spent,
    when Ctrl-C asked to, or at the last step of a rollout whose update would not end within the budget.

    An on-policy update (PPO's epochs over the rollout) cannot be cut short, and under load it can take longer
    than the rest of the budget; so before each update the callback compares the budget left with the last
    update's duration (before the first, the rollout's collection time times the number of epochs) and stops
    instead of starting one that would overrun. ``skipped_update`` records that it did.
    """

    def __init__(self, config: TrainConfig, out: Path, tracker: BestTracker, clock: SearchClock,
                 stop: StopOnCtrlC) -> None:
        super().__init__()
        self.config, self.out, self.tracker, self.clock, self.stop = config, out, tracker, clock, stop
        self.update_seconds: float | None = None  # the last update's duration
        self.skipped_update = False
        self.last_go: tuple[float, float] | None = None  # (seconds left, update expected) when an update went ahead
        self._rollout_start: float | None = None
        self._rollout_end: float | None = None
        self._rollout_steps = 0

    def _on_rollout_start(self) -> None:
        now = time.perf_counter()
        if self._rollout_end is not None:
            self.update_seconds = now - self._rollout_end
        self._rollout_start, self._rollout_steps = now, 0

    def _on_rollout_end(self) -> None:
        self._rollout_end = time.perf_counter()

    def expected_update_seconds(self) -> float:
        """How long the coming update will take: the last one's duration, or an estimate before the first."""
        if self.update_seconds is not None:
            return self.update_seconds
        collecting = time.perf_counter() - (self._rollout_start or time.perf_counter())
        return collecting * getattr(self.model, "n_epochs", 1)

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            self.tracker.update(info, self.num_timesteps)
        if self.num_timesteps % self.config.checkpoint_every < self.config.n_envs:
            # the tracker first: killed between the two, the checkpoint is older and re-runs steps already tracked
            write_text_atomically(self.out / "tracker.json", json.dumps(self.tracker.state()))
            save(self.model, self.config, self.out)
        if self.clock.expired() or self.stop.requested:
            return False
        self._rollout_steps += 1
        n_steps = getattr(self.model, "n_steps", None)
        if n_steps and self._rollout_steps >= n_steps:
            left, expected = self.clock.remaining(), self.expected_update_seconds()
            if left < expected:
                self.skipped_update = True  # the update would overrun the budget: stop before it
                return False
            self.last_go = (left, expected)
        return True

    def overrun_note(self) -> str | None:
        """Why training ran more than 10% past its budget, when it did (None otherwise)."""
        over = -self.clock.remaining()
        if over <= 0.1 * self.clock.budget_seconds:
            return None
        if self.last_go is not None and self.update_seconds is not None:
            left, expected = self.last_go
            return (f"training ran {over:.1f} s past its {self.clock.budget_seconds:g}-s budget: an update expected "
                    f"to take {expected:.1f} s started with {left:.1f} s left and took longer (the machine was "
                    f"busier, or the estimate before the first update was short)")
        return (f"training ran {over:.1f} s past its {self.clock.budget_seconds:g}-s budget: one environment step "
                f"or update outlasted it")


def save(model: Any, config: TrainConfig, out: Path) -> None:
    """Write ``model``'s checkpoint in ``out`` (SB3 models with this run's :func:`algo_kwargs`)."""
    save_checkpoint(model, out / CHECKPOINT, algo_kwargs(config))


def train(config: TrainConfig) -> RunResult:
    """Run ``config``: train, then write the outputs in ``config.out``; returns what the run found.

    The output folder is held by this run for its whole length (:class:`~agents.training.lock.OutputLock`): a
    second run on it fails at once, naming the holder."""
    graphs, cluster = check_config(config)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    with OutputLock(out):
        remove_stale_temporaries(out)  # a killed run's half-written files (held by nobody now)
        return _train(config, graphs, cluster, out)


def _train(config: TrainConfig, graphs: list[ComputationGraph], cluster: Cluster, out: Path) -> RunResult:
    """:func:`train` once the config is checked and ``out`` is held."""
    checkpoint, tracker = out / CHECKPOINT, BestTracker()
    resuming = config.resume and checkpoint.exists()
    if config.resume and not checkpoint.exists():  # a first run of a job that is always started with --resume
        print(f"--resume: no checkpoint {str(checkpoint)!r} yet; starting a new policy", file=sys.stderr)
    if resuming:
        saved = read_checkpoint(checkpoint)  # a checkpoint of another policy fails before anything is built
        check_resumed_policy(config, {"algo": saved.algo, "policy": saved.policy})
        if (out / "tracker.json").exists():
            try:
                tracker.load(json.loads((out / "tracker.json").read_text()))
            except (ValueError, KeyError, TypeError, IndexError) as error:
                raise ValueError(f"--resume: {str(out / 'tracker.json')!r} is not a tracker file written by "
                                 f"train.py ({type(error).__name__}: {error})") from None
            asked = Step(config.microbatches, config.schedule)
            if tracker.step is not None and tuple(tracker.step) != asked:  # its best is of another step
                had = Step(int(tracker.step[0]), str(tracker.step[1]))
                raise ValueError(f"--resume: the run in {config.out!r} judged placements by {had.describe()}, the "
                                 f"command line asks for {asked.describe()}; give the same --microbatches and "
                                 "--schedule, or another --out")
    tracker.step = [config.microbatches, config.schedule]
    clock = SearchClock(config.budget_seconds, tracker.resumed_seconds)
    tracker.elapsed = clock.elapsed
    env = make_env(config)
    tensorboard = str(out / "tensorboard")
    if resuming:
        model = load_model(checkpoint, env, tensorboard_log=tensorboard)
    else:
        model = make_model(config.algo, env, encoder=config.encoder, encoder_kwargs=config.encoder_kwargs(),
                           expected_moves=stay_prior(config), tensorboard_log=tensorboard,
                           **algo_kwargs(config))
    if config.algo == "guided":  # its rounds' annealing stops when the budget does
        model.time_left = clock.remaining
    stop = StopOnCtrlC()
    track = TrackBest(config, out, tracker, clock, stop)
    cpu_start = time.process_time()
    report = ProgressReport(config.progress, config.budget_seconds, config.total_timesteps(), clock.elapsed,
                            lambda: int(model.num_timesteps), tracker.best_makespan,
                            step_name="proposals" if config.algo == "guided" else "environment steps")
    with stop, report:
        clock.start()
        try:
            model.learn(total_timesteps=config.total_timesteps(), callback=track, progress_bar=False,
                        reset_num_timesteps=not resuming, tb_log_name=config.algo)
        except KeyboardInterrupt:  # a second Ctrl-C
            print("interrupted at once: keeping the best placement found so far", file=sys.stderr)
            stop.requested = True
        clock.stop()
    cpu_seconds = time.process_time() - cpu_start
    overrun = track.overrun_note()
    if overrun:
        print(f"notice: {overrun}", file=sys.stderr)
    save(model, config, out)
    env.close()
    steps = int(model.num_timesteps)
    record = write_outputs(config, out, graphs, cluster, tracker, steps, clock.elapsed(), stop.requested,
                           {"cpu_seconds": cpu_seconds, "budget_seconds": config.budget_seconds,
                            "stopped_before_an_update": track.skipped_update, "budget_overrun": overrun})
    return RunResult(graph=record["graph"], makespan=record["makespan"], lower_bound=record["lower_bound"],
                     oom=record["oom"], steps=steps, search_seconds=record["search_seconds"],
                     interrupted=stop.requested, out=out, record=record, terminated=stop.terminated)
