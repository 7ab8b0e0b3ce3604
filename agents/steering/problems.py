"""The problems the steering policy trains on: a graph, a cluster, a step and the start the annealing leaves from.

:func:`problem_specs` draws ``count`` problem specifications from a seed, mixing (in turn):

* the suites' training graphs (``ptb/s``, ``cifar10/s``, ``nmt/s`` for s in 0-99; the benchmark holds out 100 and
  above);
* synthetic layered graphs of many shapes (``layered/s``: :func:`layered_graph` draws the shape from ``s``: 100 to
  1,500 forward ops, wide or deep, regular or not, light or heavy tensors and parameters);
* clusters of 2 to 64 devices of every kind, as one node or as nodes of 4 or 8, and mixed clusters (nodes of two
  kinds);
* the plain step and the pipelined step (GPipe or 1F1B, 2 to 8 micro-batches, the most up to the drawn count
  that divide the graph's batch: :func:`microbatches_for`);
* placing freely, and in 30% of the problems contiguously (pipeline stages, the contiguous start placers);
* with ``--msr``, the profiled BERT and GNMT graphs of Microsoft Research's ``dnn-partitioning``
  (:data:`MSR_GRAPHS`, :func:`msr_specs`).

:func:`build_problem` makes a spec a :class:`TrainingProblem`: the graph, the cluster, the step and the start
(the fastest placement within memory of the annealing's own start placers,
:func:`~baselines.starts.ranked_starts` over :data:`~baselines.placers.SEARCH_STARTS` within
:data:`START_SECONDS`, the way the ``anneal`` placer starts). :func:`write_problems` keeps them in a JSON-lines
file, one per line (the spec and the start), appending, so that a stopped run resumes where it stopped. No graph
of the benchmark's held-out cells, real models or transformers is among them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from baselines.memory import PlacementInfeasibleError
from baselines.placers import CONTIGUOUS_PLACERS, PLACERS, SEARCH_STARTS
from baselines.starts import ranked_starts
from placement_env.cluster import DEVICE_KINDS, Cluster
from placement_env.graph.io import write_graph
from placement_env.graph.model import ComputationGraph
from placement_env.graph.synthetic import layered_dag
from placement_env.importers.msr import from_msr
from placement_env.sim.pipeline import PLAIN_STEP, Step
from placement_env.zoo.registry import load_graph

START_SECONDS = 10.0
"""The start placers of a problem run as within an annealing of this budget (a further one begins only when it is
expected to end within half of it), so that a problem of 1,500 ops on 64 devices takes seconds, not minutes."""

PROBLEM_SECONDS = 60.0
"""A problem whose start takes longer (the memory repair of a large pipelined graph can take minutes) is kept as
an error line and skipped."""

MSR_FOLDER = Path(__file__).parent / "msr"
"""The profiled graphs of Microsoft Research's ``dnn-partitioning`` (MIT, its licence beside them), converted by
:func:`placement_env.importers.msr.from_msr` (``python -m agents.steering.problems --convert-msr FOLDER``)."""

MSR_GRAPHS = ("bert_l-3_training", "bert_l-6_training", "bert_L-12_training", "bert24_training", "gnmt_training",
              "bert_l-3_inference", "bert_l-6_inference", "bert_l-12_inference", "bert24_inference",
              "gnmt_inference")
"""The MSR graphs trained on: BERT and GNMT. Their ResNet-50 and Inception-v3 stay out: the benchmark's real
models include those two networks."""

TRAINING_SUITE_SEEDS = range(100)
"""The suites' seeds a policy may train on; the benchmark's held-out seeds start at 100."""


@dataclass(frozen=True)
class TrainingProblem:
    """One problem: anneal ``graph`` on ``cluster`` for ``step`` from ``start`` (a device per unit), in pipeline
    stages when ``contiguous``."""

    spec: dict
    graph: ComputationGraph
    cluster: Cluster
    step: Step
    start: np.ndarray
    contiguous: bool = False


def layered_graph(seed: int) -> ComputationGraph:
    """A synthetic training graph whose shape is drawn from ``seed`` (module docstring)."""
    rng = np.random.default_rng([7, seed])
    params = {"num_ops": int(rng.integers(100, 1501)), "fat": float(np.exp(rng.uniform(np.log(0.2), np.log(2.0)))),
              "regularity": float(rng.uniform()), "density": float(rng.uniform(0.02, 0.3)),
              "jump": int(rng.integers(1, 6)), "cost_median": float(np.exp(rng.uniform(np.log(2e-5), np.log(2e-3)))),
              "cost_sigma": float(rng.uniform(0.3, 1.5)),
              "bytes_median": float(np.exp(rng.uniform(np.log(1e5), np.log(2e7)))),
              "bytes_sigma": float(rng.uniform(0.3, 1.5)), "param_fraction": float(rng.uniform(0.1, 0.7)),
              "param_median": float(np.exp(rng.uniform(np.log(1e5), np.log(5e7))))}
    return layered_dag(seed, training=True, name=f"layered/{seed}", **params)


def problem_graph(name: str) -> ComputationGraph:
    """The graph of a spec's ``graph`` field: ``layered/s`` or a name :func:`~placement_env.zoo.load_graph`
    knows."""
    if name.startswith("layered/"):
        return layered_graph(int(name.split("/", 1)[1]))
    if name.startswith("msr/"):
        return load_graph(MSR_FOLDER / f"{name.split('/', 1)[1]}.json.gz")
    return load_graph(name)


def problem_cluster(spec: dict) -> Cluster:
    """The cluster of a spec's ``nodes`` field: ``[[kind, devices], ...]``."""
    return Cluster.of_nodes([(kind, int(count)) for kind, count in spec["nodes"]])


def problem_specs(count: int, seed: int = 0) -> list[dict]:
    """``count`` problem specs drawn from ``seed`` (module docstring): ``{"graph", "nodes", "microbatches",
    "schedule"}``, and ``"contiguous": true`` for 30% of them (pipeline stages; the field is absent otherwise)."""
    rng, stages = np.random.default_rng([11, seed]), np.random.default_rng([13, seed])
    specs = []
    for i in range(count):
        family = ("ptb", "cifar10", "nmt", "layered")[i % 4]
        graph = f"layered/{int(rng.integers(1_000_000))}" if family == "layered" else \
            f"{family}/{int(rng.choice(TRAINING_SUITE_SEEDS))}"
        specs.append(_drawn_setting(graph, rng, stages))
    return specs


def msr_specs(per_graph: int = 8, seed: int = 0) -> list[dict]:
    """``per_graph`` specs for each of the MSR training graphs (:data:`MSR_GRAPHS`), clusters and steps drawn as
    :func:`problem_specs` draws them."""
    rng, stages = np.random.default_rng([17, seed]), np.random.default_rng([19, seed])
    return [_drawn_setting(f"msr/{name}", rng, stages) for name in MSR_GRAPHS for _ in range(per_graph)]


def _drawn_setting(graph: str, rng: np.random.Generator, stages: np.random.Generator) -> dict:
    """The spec of ``graph`` with a cluster, a step and a mode drawn (``stages`` draws the mode, a stream of its
    own: the free specs stay those drawn before contiguous ones were)."""
    kinds = list(DEVICE_KINDS)
    devices = int(np.clip(round(np.exp(rng.uniform(np.log(2), np.log(64)))), 2, 64))
    per_node = int(rng.choice([devices, 4, 8])) if devices > 4 else devices
    per_node = min(per_node, devices)
    first = str(rng.choice(kinds))
    second = str(rng.choice(kinds)) if rng.random() < 0.25 else first
    nodes, left, k = [], devices, 0
    while left > 0:
        nodes.append([first if k % 2 == 0 else second, min(per_node, left)])
        left -= per_node
        k += 1
    pipelined = rng.random() < 0.3
    spec = {"graph": graph, "nodes": nodes, "microbatches": int(rng.choice([2, 4, 8])) if pipelined else 1,
            "schedule": str(rng.choice(["gpipe", "1f1b"])) if pipelined else "1f1b"}
    if stages.random() < 0.3:
        spec["contiguous"] = True
    return spec


def microbatches_for(graph: ComputationGraph, wanted: int) -> int:
    """The most micro-batches up to ``wanted`` that divide the batch ``graph`` was traced with (``wanted`` when it
    records none): a spec's micro-batches are drawn before its graph is known."""
    if graph.batch is None:
        return wanted
    return max(k for k in range(1, min(wanted, graph.batch) + 1) if graph.batch % k == 0)


def build_problem(spec: dict, start: list[int] | None = None) -> TrainingProblem:
    """The :class:`TrainingProblem` of ``spec``; its start computed when not given (module docstring).

    Raises:
        baselines.memory.PlacementInfeasibleError: no start placer fits the graph in the cluster's memory.
    """
    graph, cluster = problem_graph(spec["graph"]), problem_cluster(spec)
    m = microbatches_for(graph, spec["microbatches"])
    step = Step(m, spec["schedule"]) if m > 1 else PLAIN_STEP
    if start is None:
        placers = CONTIGUOUS_PLACERS if spec.get("contiguous") else PLACERS
        found, _ = ranked_starts(graph, cluster, {name: placers[name] for name in SEARCH_STARTS}, step=step,
                                 budget_seconds=START_SECONDS)
        start = graph.unit_placement(found[0][2]).tolist()
    return TrainingProblem(spec, graph, cluster, step, np.asarray(start, dtype=np.int64),
                           bool(spec.get("contiguous", False)))


def write_problems(path: str | os.PathLike, specs: list[dict], log: Callable[[str], None] = print) -> int:
    """Append to the JSON-lines file ``path`` the problems of ``specs`` it does not hold yet, each line
    ``{"spec", "start", "seconds"}`` (``seconds``: the CPU seconds it took); a problem no start placer fits in
    memory: ``{"spec", "infeasible", "seconds"}``; one its graph cannot take, or whose start takes more than
    :data:`PROBLEM_SECONDS`: ``{"spec", "error", "seconds"}``, with the reason. Returns how many it holds."""
    path = Path(path)
    done = {json.dumps(p["spec"], sort_keys=True) for p in read_problem_lines(path)} if path.exists() else set()
    path.parent.mkdir(parents=True, exist_ok=True)
    for i, spec in enumerate(specs):
        key = json.dumps(spec, sort_keys=True)
        if key in done:
            continue
        began = time.process_time()
        try:
            with time_limit(PROBLEM_SECONDS):
                line = {"spec": spec, "start": build_problem(spec).start.tolist()}
        except TimeoutError:
            line = {"spec": spec, "error": f"its start placers took more than {PROBLEM_SECONDS:g} s"}
        except PlacementInfeasibleError as error:
            line = {"spec": spec, "infeasible": str(error)}
        except ValueError as error:  # a spec its graph cannot take: kept with the reason, the job goes on
            line = {"spec": spec, "error": str(error)}
        line["seconds"] = time.process_time() - began  # CPU seconds: the pretraining's compute split sums them
        with open(path, "a", encoding="utf-8") as f:  # a line at a time: a stopped run keeps what it made
            f.write(json.dumps(line) + "\n")
        done.add(key)
        if (i + 1) % 25 == 0:
            log(f"problems: {i + 1} / {len(specs)}")
    return len(done)


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``TimeoutError`` in the main thread when the block runs past ``seconds`` (``SIGALRM``)."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def read_problem_lines(path: str | os.PathLike) -> Iterator[dict]:
    """The lines of a problems file (a last line cut short by a stopped run is skipped)."""
    with open(path, encoding="utf-8") as f:
        for text in f:
            try:
                yield json.loads(text)
            except json.JSONDecodeError:
                continue


def convert_msr(checkout: Path) -> None:
    """Write :data:`MSR_FOLDER`'s graphs from a ``dnn-partitioning`` checkout (the throughput inputs: operator
    graphs, layer graphs for ``bert24`` and ``gnmt``) with its licence."""
    MSR_FOLDER.mkdir(parents=True, exist_ok=True)
    for name in MSR_GRAPHS:
        folder = "LayerGraphs" if name.startswith(("bert24", "gnmt")) else "OperatorGraphs"
        write_graph(from_msr(checkout / "throughput-inputs" / folder / f"{name}.json", name=f"msr/{name}"),
                    MSR_FOLDER / f"{name}.json.gz")
    shutil.copy(checkout / "LICENSE.txt", MSR_FOLDER / "LICENSE.txt")


def main(argv: list[str] | None = None) -> int:
    """``python -m agents.steering.problems --out FILE [--count N] [--seed S]``: write (or complete) the problems
    file; a line of progress every 25 problems."""

    parser = argparse.ArgumentParser(prog="python -m agents.steering.problems", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the problems file (JSON lines), appended to")
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--msr", action="store_true", help="write the MSR graphs' problems (8 a graph) instead")
    parser.add_argument("--convert-msr", metavar="FOLDER",
                        help="convert the MSR files of a dnn-partitioning checkout's *-inputs folders into "
                             f"{MSR_FOLDER} first")
    args = parser.parse_args(argv)
    if args.convert_msr:
        convert_msr(Path(args.convert_msr))
    specs = msr_specs(seed=args.seed) if args.msr else problem_specs(args.count, args.seed)
    held = write_problems(args.out, specs, lambda line: print(line, flush=True))
    print(f"{args.out}: {held} problems", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
