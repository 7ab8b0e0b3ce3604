"""The paper's figure 4: learning curves per encoder, drawn with matplotlib (``figure4.png``) and tabulated."""

from __future__ import annotations

import numpy as np

from placement_env.json_files import replace_atomically

from .runs import ENCODERS, SUITES, ExperimentConfig, Run, classical_rows, run_training, suite_graphs


def experiment_figure4(settings: ExperimentConfig, csv_rows: list[dict]) -> tuple[str, list[str]]:
    """Figure 4: the learning curves of every encoder per suite and device count, drawn to ``figure4.png`` in
    ``settings.out`` and tabulated; ``(markdown, findings)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs_of = suite_graphs(settings)
    fig, axes = plt.subplots(len(settings.devices), len(SUITES), figsize=(4 * len(SUITES), 3 * len(settings.devices)),
                             squeeze=False, dpi=90)
    lines = ["| Encoder | Dataset | GPUs | best after 25% of the steps (ms) | after 50% | final |",
             "|---|---|---|---|---|---|"]
    for col, suite in enumerate(SUITES):
        for row, d in enumerate(settings.devices):
            ax = axes[row][col]
            placers = classical_rows(graphs_of[suite], d, settings)
            for i, encoder in enumerate(ENCODERS):
                curves = []
                for seed in range(settings.seeds):
                    for g in graphs_of[suite]:
                        r = run_training(Run(encoder, g, d, seed, (), encoder), settings)
                        if "failed" in r:
                            continue
                        steps, values = zip(*r["curve"])
                        curves.append((np.asarray(steps), np.asarray(values)))
                        for s, v in r["curve"]:
                            csv_rows.append({"encoder": encoder, "suite": suite, "graph": g, "devices": d,
                                             "seed": seed, "step": s, "best_makespan_ms": v * 1e3})
                if not curves:
                    lines.append(f"| {encoder} | {suite} | {d} | failed | failed | failed |")
                    continue
                grid = np.linspace(0, min(c[0][-1] for c in curves), 50)
                mean = np.mean([np.interp(grid, s, v) for s, v in curves], axis=0) * 1e3
                ax.plot(grid, mean, label=encoder, color=f"C{i}", linewidth=2.0 if encoder == "fadp-gt" else 1.0)
                lines.append(f"| {encoder} | {suite} | {d} | {mean[12]:.3f} | {mean[25]:.3f} | {mean[-1]:.3f} |")
            for placer in ("single", "heft"):
                ax.axhline(placers[placer][0] * 1e3, linestyle="--", color="gray", linewidth=0.7)
            ax.axhline(placers["lower bound"][0] * 1e3, color="k", linewidth=0.7)
            ax.set_title(f"{suite}, {d} GPUs", fontsize=9)
            ax.set_xlabel("environment steps", fontsize=8)
            ax.set_ylabel("best makespan (ms)", fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    settings.out.mkdir(parents=True, exist_ok=True)
    with replace_atomically(settings.out / "figure4.png") as temporary:
        fig.savefig(temporary)
    plt.close(fig)
    finals: dict[tuple[str, str], dict[str, float]] = {}
    for line in lines[2:]:
        cells_ = [c.strip() for c in line.strip("|").split("|")]
        if cells_[5] == "failed":
            continue
        finals.setdefault((cells_[1], cells_[2]), {})[cells_[0]] = float(cells_[5])
    lowest = sum(1 for v in finals.values() if "fadp-gt" in v and v["fadp-gt"] <= min(v.values()))
    findings = [f"FADP-GT's curve ends lowest of the {len(ENCODERS)} encoders in {lowest} of {len(finals)} "
                "panels (the paper: lowest from start to end in every panel)."]
    return ("![learning curves](figure4.png)\n\nDashed: single device and HEFT; solid black: the lower bound. "
            "Curves are the best makespan seen so far, mean over seeds and graphs.\n\n" + "\n".join(lines), findings)
