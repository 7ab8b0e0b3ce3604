"""Pictures and text of a schedule: a Gantt chart (``rgb_array``) and a summary (``ansi``)."""

from __future__ import annotations

import numpy as np

from placement_env.graph.units import CATEGORY_NAMES, op_category
from placement_env.sim.simulator import SimulationResult

GANTT_WIDTH_PX = 960
GANTT_ROW_PX = 28
GANTT_MARGIN_PX = 90


def gantt_rgb(result: SimulationResult, ops: list[str], device_names: list[str], title: str = "") -> np.ndarray:
    """The schedule as an RGB image (H x W x 3, uint8): one row per device, then one per send and
    receive channel; ops coloured by op-type category, transfers grey; time in milliseconds.

    Height: ``GANTT_MARGIN_PX + GANTT_ROW_PX * 3 * devices`` pixels, width ``GANTT_WIDTH_PX``.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    m = len(device_names)
    rows = [f"{d} compute" for d in device_names] + [f"{d} send" for d in device_names] + \
           [f"{d} recv" for d in device_names]
    dpi = 100
    height = GANTT_MARGIN_PX + GANTT_ROW_PX * len(rows)
    fig = Figure(figsize=(GANTT_WIDTH_PX / dpi, height / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_axes((0.16, GANTT_MARGIN_PX * 0.6 / height, 0.82, 1 - GANTT_MARGIN_PX / height))
    cmap = matplotlib.colormaps["tab20"]
    s = result.schedule
    cats = np.array([op_category(o) for o in ops])
    for cat in np.unique(cats):
        sel = cats == cat
        for dev in range(m):
            mask = sel & (s.op_device == dev)
            if mask.any():
                ax.broken_barh(list(zip(s.op_start[mask] * 1e3, (s.op_end[mask] - s.op_start[mask]) * 1e3)),
                               (dev - 0.4, 0.8), facecolors=cmap(int(cat) % 20))
    for dev in range(m):
        out = s.transfer_src == dev
        inc = s.transfer_dst == dev
        if out.any():
            ax.broken_barh(list(zip(s.transfer_start[out] * 1e3, (s.transfer_end[out] - s.transfer_start[out]) * 1e3)),
                           (m + dev - 0.4, 0.8), facecolors="0.55")
        if inc.any():
            ax.broken_barh(list(zip(s.transfer_start[inc] * 1e3, (s.transfer_end[inc] - s.transfer_start[inc]) * 1e3)),
                           (2 * m + dev - 0.4, 0.8), facecolors="0.75")
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, max(result.makespan * 1e3, 1e-9))
    ax.set_xlabel("time (ms)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    present = [CATEGORY_NAMES[c] for c in np.unique(cats)]
    ax.legend(handles=[Patch(color=cmap(CATEGORY_NAMES.index(c) % 20), label=c) for c in present],
              fontsize=6, ncol=min(len(present), 8), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    if title:
        fig.suptitle(title, fontsize=8, x=0.01, ha="left")
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    return image


def summary_text(result: SimulationResult, memory: np.ndarray, device_names: list[str], header: str = "") -> str:
    """A few lines: makespan, lower-bound ratio, per-device busy time and peak memory, OOM."""
    lines = [header] if header else []
    lines.append(f"makespan {result.makespan * 1e3:.3f} ms, {result.lb_ratio:.3f} x lower bound, "
                 f"OOM {'yes' if result.oom else 'no'}")
    for d, name in enumerate(device_names):
        lines.append(f"  {name:<6} busy {result.busy[d] * 1e3:9.3f} ms   peak {result.peak_memory[d] / 1e9:7.3f} / "
                     f"{memory[d] / 1e9:.3f} GB")
    return "\n".join(lines) + "\n"
