"""Which machine a benchmark ran on, printed first by every script in ``benchmarks/``.

The project's 2-core machines are not all one processor (AMD EPYC of two
families, Intel Xeon), and every timing moves with it, so a figure is only
quoted together with this line.
"""

from __future__ import annotations

import os
import platform


def cpu_description() -> dict:
    """The processor as Linux names it (``/proc/cpuinfo``): ``name`` and, where listed, ``family``,
    ``model`` and ``mhz`` (the clock in MHz)."""
    info = {"name": platform.processor() or platform.machine()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            fields = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return info
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    info["name"] = fields.get("model name", info["name"])
    for key, label in (("cpu family", "family"), ("model", "model"), ("cpu MHz", "mhz")):
        if key in fields:
            info[label] = fields[key]
    return info


def machine_summary() -> dict:
    """The processor, the number of cores and the Python version, for a benchmark's ``--json`` output."""
    return {"cpu": cpu_description(), "cores": os.cpu_count(), "python": platform.python_version()}


def machine_line(summary: dict | None = None) -> str:
    """``machine: <processor> (family F, model M), <MHz> MHz, <N> cores; Python <version>``."""
    summary = summary or machine_summary()
    cpu = summary["cpu"]
    return (f"machine: {cpu['name']}" + (f" (family {cpu['family']}, model {cpu['model']})" if "family" in cpu else "")
            + (f", {float(cpu['mhz']):,.0f} MHz" if "mhz" in cpu else "")
            + f", {summary['cores']} cores; Python {summary['python']}")
