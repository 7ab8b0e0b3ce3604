"""The step-time simulator: one training step of a placed graph on a cluster.

* :mod:`.simulator`: :func:`simulate`, :func:`simulate_batch`, :class:`Simulator`, the lower bound;
* :mod:`.kernel`: the compiled event loop (numba) behind them;
* :mod:`.reference`: a plain heapq simulation, the kernel's differential-test oracle;
* :mod:`.memory_timeline` and :mod:`.chrome_trace`: a simulated step's memory over time and its trace.

Semantics: ``docs/spec/simulator.md``.
"""

from placement_env.sim.chrome_trace import chrome_trace, write_chrome_trace
from placement_env.sim.memory_timeline import memory_timeline
from placement_env.sim.simulator import (
    BatchResult,
    Schedule,
    SimulationResult,
    Simulator,
    check_placement,
    critical_path,
    lower_bound,
    simulate,
    simulate_batch,
)

__all__ = ["BatchResult", "Schedule", "SimulationResult", "Simulator", "check_placement", "chrome_trace",
           "critical_path", "lower_bound", "memory_timeline", "simulate", "simulate_batch", "write_chrome_trace"]
