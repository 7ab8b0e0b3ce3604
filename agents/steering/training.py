"""Pretraining the steering policy by reinforcement learning on the annealing's improvement.

REINFORCE over the policy's parameters (PGPE, Sehnke et al. 2010): the weights are drawn from a Gaussian
N(mu, sigma^2 I); an episode is one annealing run of ``steps`` steps on a training problem with the drawn weights;
its reward is the relative makespan reduction over plain annealing at the same number of evaluations (same
problem, same start, same seed, same steps):

.. math::

    r(\\theta) = (T_{\\text{plain}} - T_{\\theta}) / T_{\\text{plain}}

Each iteration draws ``population`` problems and, for each, a perturbation eps and the antithetic pair
mu +- eps (the same seed for both: common random numbers); the gradient of the expected reward is
``mean((r(mu + eps) - r(mu - eps)) / 2 * eps / sigma^2)`` and Adam ascends it. In that difference
``T_plain`` only scales, so training divides by the start's makespan instead (a third fewer runs); the logged
training reward is therefore the improvement over the start. A makespan out of memory counts as the makespan
times (1 + overflow / the cluster's memory). Every ``validation_every``-th problem (by its index in the problems
file, so that the set stays when the file grows) is never trained on; every ``evaluate_every`` iterations the mean
policy is run on the first ``validation_problems`` of them against plain annealing (seed: the problem's index),
the reward above.

:func:`pretrain_steering` trains on the problems of ``problems.jsonl`` in its folder, written by
``python -m agents.steering.problems`` (a job of its own, which may run beside it: the file is read again at
each checkpoint, so the training takes up problems as they come). It resumes: the iterations are checkpointed
(``checkpoint.json``: mu, Adam's moments, the random state, the cached plain validation runs) every
``checkpoint_seconds``; the policy (``policy.json``) and the record (``pretrain.json``: the config, the command,
the training's CPU seconds, the validation curve) are rewritten at each checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from baselines.anneal import anneal_units
from placement_env.json_files import read_json_file, write_json_file

from .policy import SteeredProposals, SteeringPolicy
from .problems import TrainingProblem, build_problem, read_problem_lines


@dataclass(frozen=True)
class SteeringTrainConfig:
    """The pretraining's settings (module docstring)."""

    validation_every: int = 20
    validation_problems: int = 40
    steps: int = 60
    population: int = 8
    sigma: float = 0.5
    learning_rate: float = 0.05
    iterations: int = 3000
    evaluate_every: int = 50
    checkpoint_seconds: float = 180.0
    seed: int = 0


def penalized(makespan: float, overflow: float, problem: TrainingProblem) -> float:
    """The makespan, times (1 + overflow / the cluster's memory) when out of memory."""
    return makespan * (1.0 + overflow / float(problem.cluster.memory.sum()))


def run_steered(problem: TrainingProblem, vector: np.ndarray | None, steps: int, seed: int) -> float:
    """The penalized best makespan of ``steps`` annealing steps from the problem's start, steered by the policy of
    ``vector`` (None: plain annealing)."""
    proposals = None if vector is None else SteeredProposals(SteeringPolicy.from_vector(vector), problem.graph,
                                                              problem.cluster, contiguous=problem.contiguous,
                                                              step=problem.step)
    result = anneal_units(problem.graph, problem.cluster, problem.start, seed, time_budget=None, max_steps=steps,
                          step=problem.step, contiguous=problem.contiguous, proposals=proposals)
    return penalized(result.makespan, result.overflow, problem)


class _Problems:
    """The problems file's problems, built when first used (a graph and cluster each)."""

    def __init__(self, lines: list[dict]) -> None:
        self.lines = lines
        self._built: dict[int, TrainingProblem] = {}

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, i: int) -> TrainingProblem:
        if i not in self._built:
            if len(self._built) > 400:  # graphs of a thousand ops each: keep the memory bounded
                self._built.clear()
            self._built[i] = build_problem(self.lines[i]["spec"], self.lines[i]["start"])
        return self._built[i]


def evaluate(vector: np.ndarray, problems: _Problems, indices: list[int], steps: int,
             plain: dict[int, float]) -> float:
    """The mean reward of ``vector`` over ``indices`` (seed = the problem's index), plain runs cached."""
    rewards = []
    for i in indices:
        if i not in plain:
            plain[i] = run_steered(problems[i], None, steps, seed=i)
        rewards.append((plain[i] - run_steered(problems[i], vector, steps, seed=i)) / plain[i])
    return float(np.mean(rewards))


def pretrain_steering(config: SteeringTrainConfig, out: str | Path, log: Callable[[str], None] = print,
                      command: str = "", warm_start: str | Path | None = None) -> SteeringPolicy:
    """Run (or resume) the pretraining into the folder ``out`` (module docstring); returns the policy.
    ``warm_start``: a checkpoint of another run (an earlier design, fewer weights) to begin from when ``out`` has
    none: its weights, Adam's moments, iteration and random state, the weights it lacks at zero; recorded in
    ``pretrain.json``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    record_path, checkpoint_path = out / "pretrain.json", out / "checkpoint.json"
    record: dict[str, Any] = read_json_file(record_path) if record_path.exists() else {
        "config": asdict(config), "command": command, "seconds": {"training": 0.0}, "validation": []}
    if warm_start is not None and not checkpoint_path.exists():
        write_json_file(read_json_file(warm_start), checkpoint_path)
        record["warm_start"] = {"checkpoint": str(warm_start), "iteration": read_json_file(warm_start)["iteration"]}
    problems_file = out / "problems.jsonl"
    problems = _Problems([])

    def read_problems() -> tuple[list[int], np.ndarray]:
        """Take up the problems written since; the validation and training indices."""
        lines = list(read_problem_lines(problems_file)) if problems_file.exists() else []
        problems.lines = [line for line in lines if "start" in line]
        held_out = np.arange(0, len(problems), config.validation_every)
        return held_out[:config.validation_problems].tolist(), np.setdiff1d(np.arange(len(problems)), held_out)

    validation, training = read_problems()
    if training.size < config.population:
        raise ValueError(f"{problems_file} holds {len(problems)} problems within memory: too few to train on "
                         f"(write them with python -m agents.steering.problems)")
    k = SteeringPolicy().vector.size
    if checkpoint_path.exists():
        state = read_json_file(checkpoint_path)
        # a checkpoint of fewer weights (design 1, before the stage weights): the new ones start at zero
        mu, first, second = (np.pad(np.array(state[key]), (0, k - len(state[key]))) for key in
                             ("mu", "first", "second"))
        iteration, rng = state["iteration"], np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        plain_validation = {int(i): v for i, v in state["plain_validation"].items()}
        log(f"resumed at iteration {iteration}")
    else:
        mu, first, second, iteration = np.zeros(k), np.zeros(k), np.zeros(k), 0
        rng, plain_validation = np.random.default_rng(config.seed), {}
        record["validation"].append({"iteration": 0, "reward": evaluate(mu, problems, validation, config.steps,
                                                                         plain_validation)})
        log(f"iteration 0: validation reward {record['validation'][-1]['reward']:+.4f}")
    saved = time.perf_counter()

    def save() -> None:
        write_json_file({"mu": mu.tolist(), "first": first.tolist(), "second": second.tolist(),
                         "iteration": iteration, "rng": rng.bit_generator.state,
                         "plain_validation": {str(i): v for i, v in plain_validation.items()}}, checkpoint_path)
        SteeringPolicy.from_vector(mu, {"command": command, "iterations": iteration,
                                        "problems": len(problems)}).save(out / "policy.json")
        write_json_file(record, record_path)

    training_began = time.process_time()  # CPU seconds: a paused or shared run counts only its own work
    while iteration < config.iterations:
        chosen = rng.choice(training, size=config.population, replace=False)
        gradient, rewards = np.zeros(k), []
        for i in chosen:
            eps = rng.normal(size=k) * config.sigma
            seed = int(rng.integers(2**31))
            problem = problems[int(i)]
            scale = run_steered(problem, None, 0, seed)  # the start's makespan
            up = (scale - run_steered(problem, mu + eps, config.steps, seed)) / scale
            down = (scale - run_steered(problem, mu - eps, config.steps, seed)) / scale
            gradient += (up - down) / 2 * eps / config.sigma**2
            rewards += [up, down]
        gradient /= config.population
        iteration += 1
        first = 0.9 * first + 0.1 * gradient  # Adam, ascending
        second = 0.999 * second + 0.001 * gradient**2
        mu = mu + config.learning_rate * (first / (1 - 0.9**iteration)) / (
            np.sqrt(second / (1 - 0.999**iteration)) + 1e-8)
        log(f"iteration {iteration}: reward {np.mean(rewards):+.4f}  mu {np.round(mu, 3).tolist()}")
        if iteration % config.evaluate_every == 0 or iteration == config.iterations:
            reward = evaluate(mu, problems, validation, config.steps, plain_validation)
            record["validation"].append({"iteration": iteration, "reward": reward})
            log(f"iteration {iteration}: validation reward {reward:+.4f}")
        if time.perf_counter() - saved > config.checkpoint_seconds or iteration == config.iterations:
            record["seconds"]["training"] += time.process_time() - training_began
            training_began, saved = time.process_time(), time.perf_counter()
            save()
            validation, training = read_problems()
    record["seconds"]["training"] += time.process_time() - training_began
    save()
    return SteeringPolicy.from_vector(mu, {"command": command, "iterations": iteration})


def ship(out: str | Path, policy_file: str | Path, to: Path) -> None:
    """Copy the policy ``policy_file`` of the run in ``out`` into the folder ``to`` (``policy.json``) with a
    ``pretrain.json``: the run's record (config, command, validation curve), the problems file's size and the
    CPU seconds its problems took where recorded, and the training's seconds (with those of the run it was warm
    started from)."""
    out, to = Path(out), Path(to)
    policy = SteeringPolicy.load(policy_file)
    record = read_json_file(out / "pretrain.json")
    lines = list(read_problem_lines(out / "problems.jsonl"))
    timed = [line["seconds"] for line in lines if "seconds" in line]
    warm = record.get("warm_start")  # the run it began from: its training seconds count too
    warm_record = Path(warm["checkpoint"]).parent / "pretrain.json" if warm else None
    warm_seconds = read_json_file(warm_record)["seconds"]["training"] if warm_record and warm_record.exists() else 0.0
    to.mkdir(parents=True, exist_ok=True)
    policy.save(to / "policy.json")
    write_json_file({"policy": policy.made_by, "run": str(out), "record": record,
                     "problems": {"lines": len(lines), "usable": sum("start" in line for line in lines),
                                  "commands": ["python -m agents.steering.problems --out " + str(out / "problems.jsonl")
                                               + " --count 3000",
                                               "python -m agents.steering.problems --msr --out "
                                               + str(out / "problems.jsonl")]},
                     "compute_seconds": {"training": record["seconds"]["training"],
                                         "warm_start_training": warm_seconds,
                                         "problems_timed": sum(timed), "problems_timed_lines": len(timed),
                                         "problems_untimed_lines": len(lines) - len(timed)}},
                    to / "pretrain.json")


def main(argv: list[str] | None = None) -> int:
    """``python -m agents.steering.training --out DIR [--problems N] [--iterations N] [--steps N]``."""
    parser = argparse.ArgumentParser(prog="python -m agents.steering.training", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    defaults = SteeringTrainConfig()
    for name in ("validation_every", "validation_problems", "steps", "population", "iterations", "evaluate_every",
                 "seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    for name in ("sigma", "learning_rate", "checkpoint_seconds"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=getattr(defaults, name))
    parser.add_argument("--warm-start", metavar="CHECKPOINT", help="begin from another run's checkpoint.json "
                                                                   "(an earlier design: new weights at zero)")
    parser.add_argument("--ship", metavar="POLICY", help="instead of training: ship the run's policy file POLICY "
                                                        "as the package's (agents/steering/pretrained)")
    args = parser.parse_args(argv)
    if args.ship:
        ship(args.out, args.ship, Path(__file__).parent / "pretrained")
        return 0
    config = SteeringTrainConfig(**{k: v for k, v in vars(args).items() if k not in ("out", "ship", "warm_start")})
    command = "python -m agents.steering.training " + " ".join(sys.argv[1:] if argv is None else argv)
    pretrain_steering(config, args.out, lambda line: print(line, flush=True), command, args.warm_start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
