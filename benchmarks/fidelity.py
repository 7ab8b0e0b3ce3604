"""The simulator against measured training steps on 2 local devices.

    python benchmarks/fidelity.py [--repeats 5] [--rounds 3] [--models mlp,cnn,...] [--json out.json]

For each model (an MLP, a ResNet-style CNN, a transformer encoder, a two-branch model, an LSTM, and two the
project did not write: Hugging Face's GPT-2 and BERT of ``benchmarks/pipeline_fidelity.py``), the graph
is imported with ``from_torch(..., profile=True)`` in this process on one CPU thread (the setting of each local
worker), the cluster is ``local_cluster(2)`` (measured: speed 1.0, the gloo link's latency and bandwidth while
the workers compute), and the placements of eight placers (single, split, m-ETF, HEFT, m-TOPO, anneal, random,
round-robin) are both simulated and run by ``measure_step``.
Printed per cell: simulated and measured step (ms) and their ratio, for the profiled backward costs (the
model now), for the 2x / 1x rule they replace and for the link measured between idle workers; per model:
Spearman's rank correlation of the placements and whether the placement the simulator ranks best is the one
measured fastest.

The host is shared and noisy (identical placements measured 59 to 104 ms in one run), so both sides are taken
the way ``benchmarks/simulator.py`` takes speeds: each op's cost is the fastest of ``--rounds`` profiles (each
the median of 10 runs), and each placement's step the fastest of ``--rounds`` medians of ``measure_step``
(``--repeats`` steps each), the placements interleaved round by round. Placers that return the same placement
are measured once and counted once in the rank correlation.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch
from machine import machine_line
from placed_module_speed import ResidualCNN
from torch import nn

from baselines.placers import place
from placement_env import from_torch, simulate
from placement_env.graph.model import ComputationGraph, Node
from placement_env.graph.training import to_training_graph
from placement_env.runtime.local_cluster import local_cluster
from placement_env.runtime.measured_step import measure_step

PLACERS = ("single", "split", "m-etf", "heft", "m-topo", "anneal", "random", "round-robin")


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(1024, 1024), nn.ReLU())])

    def forward(self, x):
        return self.layers(x)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.encoder(x))


class TwoBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU())
        self.right = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU())
        self.head = nn.Linear(2048, 10)

    def forward(self, x):
        return self.head(torch.cat([self.left(x), self.right(x)], dim=1))


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(128, 256, num_layers=2, batch_first=True)
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


def models() -> dict[str, tuple[nn.Module, tuple, dict]]:
    """name -> (model, positional inputs, keyword inputs)."""
    from pipeline_fidelity import models as hugging_face

    torch.manual_seed(0)
    ours: dict[str, tuple[nn.Module, tuple, dict]] = {
        "mlp": (MLP(), (torch.randn(128, 1024),), {}),
        "cnn": (ResidualCNN(32), (torch.randn(16, 3, 32, 32),), {}),
        "transformer": (Encoder(), (torch.randn(8, 64, 128),), {}),
        "two-branch": (TwoBranch(), (torch.randn(128, 512),), {}),
        "lstm": (Tagger(), (torch.randn(16, 32, 128),), {}),
    }
    theirs = {name: model[:3] for name, model in hugging_face().items() if name in ("gpt2", "bert")}
    return {**ours, **theirs}


def with_rule(graph: ComputationGraph) -> ComputationGraph:
    """The same profiled forward costs with the 2x / 1x backward rule."""
    forward = ComputationGraph([n for n in graph.nodes if n.phase != "backward"],
                               [e for e in graph.edges() if graph.nodes[graph.index_of(e.src)].phase != "backward"
                                and graph.nodes[graph.index_of(e.dst)].phase != "backward"], name=graph.name)
    return to_training_graph(forward, name=graph.name)


def fastest_costs(graphs: list[ComputationGraph]) -> ComputationGraph:
    """The first graph with each op's cost and fixed cost the smallest of the graphs' (the same model profiled
    again)."""
    costs = np.min([[n.cost for n in g.nodes] for g in graphs], axis=0)
    fixed = np.min([[n.fixed_cost or 0.0 for n in g.nodes] for g in graphs], axis=0)
    first = graphs[0]
    nodes = [Node(n.id, n.op, float(c), n.output_bytes, n.param_bytes, n.colocation, n.flops, n.phase, n.module,
                  None if n.fixed_cost is None else float(min(f, c)))
             for n, c, f in zip(first.nodes, costs, fixed)]
    return ComputationGraph(nodes, first.edges(), name=first.name)


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 1 and np.std(ra) > 0 and np.std(rb) > 0 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default=",".join(models()))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    print(machine_line())
    torch.set_num_threads(1)
    cluster, idle = local_cluster(2), local_cluster(2, loaded=False)
    for label, c in (("loaded (the model)", cluster), ("idle", idle)):
        print(f"local_cluster(2) link, {label}: latency {c.latency[0, 1] * 1e6:.0f} us, "
              f"bandwidth {c.bandwidth[0, 1] / 1e9:.2f} GB/s", flush=True)
    rows, summary = [], []
    for name in args.models.split(","):
        model, x, kwargs = models()[name]
        graph = fastest_costs([from_torch(model, x, example_kwargs=kwargs, profile=True, repeats=10, name=name)
                               for _ in range(args.rounds)])
        rule = with_rule(graph)
        placements: dict[tuple[int, ...], list[str]] = {}
        for placer in PLACERS:
            placements.setdefault(tuple(place(graph, cluster, placer, seed=0).tolist()), []).append(placer)
        measured_rounds: dict[tuple[int, ...], list[float]] = {p: [] for p in placements}
        for _ in range(args.rounds):
            for p in placements:
                measured_rounds[p].append(measure_step(model, x, graph, list(p), repeats=args.repeats,
                                                       example_kwargs=kwargs,
                                                       cluster=cluster).seconds)
        sims, rule_sims, measured, labels = [], [], [], []
        for p, names in placements.items():
            sim = simulate(graph, list(p), cluster, param_factor=2.0)
            sim_rule = simulate(rule, list(p), cluster, param_factor=2.0).makespan
            sim_idle = simulate(graph, list(p), idle, param_factor=2.0).makespan
            got = min(measured_rounds[p])
            label = " = ".join(names)
            rows.append({"model": name, "placement": label, "devices_used": len(set(p)),
                         "simulated_ms": sim.makespan * 1e3, "rule_ms": sim_rule * 1e3,
                         "measured_ms": got * 1e3, "ratio": sim.makespan / got, "rule_ratio": sim_rule / got,
                         "idle_link_ratio": sim_idle / got,
                         "measured_rounds_ms": [t * 1e3 for t in measured_rounds[p]]})
            sims.append(sim.makespan)
            rule_sims.append(sim_rule)
            measured.append(got)
            labels.append(label)
            r = rows[-1]
            print(f"{name:12s} {label:32s} devices {r['devices_used']}  simulated {r['simulated_ms']:8.2f} ms  "
                  f"measured {r['measured_ms']:8.2f} ms  ratio {r['ratio']:.2f}  (2x rule {r['rule_ratio']:.2f}, "
                  f"idle link {r['idle_link_ratio']:.2f})",
                  flush=True)
        best_sim, best_real = int(np.argmin(sims)), int(np.argmin(measured))
        same_best = best_sim == best_real
        summary.append({"model": name, "spearman": spearman(sims, measured),
                        "rule_spearman": spearman(rule_sims, measured),
                        "simulated_best": labels[best_sim], "measured_best": labels[best_real],
                        "same_best": same_best})
        s = summary[-1]
        print(f"{name:12s} spearman {s['spearman']:.2f} (2x rule {s['rule_spearman']:.2f}); best simulated "
              f"{s['simulated_best']}, fastest measured {s['measured_best']}", flush=True)
    within = sum(0.75 <= r["ratio"] <= 1.25 for r in rows)
    print(f"cells within 25%: {within} / {len(rows)} (2x rule: "
          f"{sum(0.75 <= r['rule_ratio'] <= 1.25 for r in rows)}, idle link: "
          f"{sum(0.75 <= r['idle_link_ratio'] <= 1.25 for r in rows)}); models whose simulated best is the fastest "
          f"measured: {sum(s['same_best'] for s in summary)} / {len(summary)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"link": {k: {"latency_s": float(c.latency[0, 1]), "bandwidth_Bps": float(c.bandwidth[0, 1])}
                                for k, c in (("loaded", cluster), ("idle", idle))},
                       "rows": rows, "summary": summary}, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
