"""The steered draws of one annealing step, compiled: the features of :mod:`agents.steering.features`, the two
softmaxes of :mod:`agents.steering.policy`, and the units and devices drawn from them, in one pass.

:meth:`SteeringView.unit_features <agents.steering.features.SteeringView.unit_features>` and
:meth:`~agents.steering.features.SteeringView.device_features` are the readable definitions, a few dozen small
numpy calls a step; :func:`steered_draws` computes the same numbers in one compiled loop over the units and their
edges (``tests/test_steering.py`` checks it against them), so that a steered step costs about what a plain one
does beside judging its neighbours (``benchmarks/steering_speed.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def device_loads(current: np.ndarray, cost: np.ndarray, memory: np.ndarray,
                 speed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per device, the compute seconds and the bytes of the units ``current`` places there."""
    m = speed.shape[0]
    load, used = np.zeros(m), np.zeros(m)
    for u in range(current.shape[0]):
        load[current[u]] += cost[u] / speed[current[u]]
        used[current[u]] += memory[u]
    return load, used


@njit(cache=True)
def unit_logits(current: np.ndarray, cost: np.ndarray, memory: np.ndarray, target: np.ndarray,
                weight: np.ndarray, offsets: np.ndarray, speed: np.ndarray, capacity: np.ndarray,
                unit_weights: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``unit_features(current) @ unit_weights`` (:mod:`agents.steering.features`), per unit."""
    nu = current.shape[0]
    load, used = device_loads(current, cost, memory, speed)
    busiest = max(load.max(), 1e-300)
    logits = np.empty(nu)
    for u in range(nu):
        d = current[u]
        total, cut = 0.0, 0.0
        for k in range(offsets[u], offsets[u + 1]):
            total += weight[k]
            if current[target[k]] != d:
                cut += weight[k]
        over = min(max(used[d] / capacity[d] - 1.0, 0.0), 1.0)
        logits[u] = (unit_weights[0] * load[d] / busiest + unit_weights[1] * (1.0 if load[d] >= busiest else 0.0)
                     + unit_weights[2] * cut / max(total, 1e-300)
                     + unit_weights[3] * cost[u] / speed[d] / max(load[d], 1e-300) + unit_weights[4] * over)
    return logits


@njit(cache=True)
def device_choices(current: np.ndarray, units: np.ndarray, gumbel: np.ndarray, cost: np.ndarray,
                   memory: np.ndarray, target: np.ndarray, weight: np.ndarray, offsets: np.ndarray,
                   speed: np.ndarray, capacity: np.ndarray, node: np.ndarray,
                   device_weights: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """For each of ``units``, ``argmax_d (device_features @ device_weights + gumbel[r, d])`` over the devices
    other than its own (:mod:`agents.steering.features`): a draw from the device softmax."""
    m = speed.shape[0]
    load, used = device_loads(current, cost, memory, speed)
    busiest, fastest = max(load.max(), 1e-300), speed.max()
    chosen = np.empty(units.shape[0], np.int64)
    there = np.zeros(m)
    for r in range(units.shape[0]):
        u = units[r]
        own = current[u]
        there[:] = 0.0
        total = 0.0
        for k in range(offsets[u], offsets[u + 1]):
            there[current[target[k]]] += weight[k]
            total += weight[k]
        best, best_value = -1, -np.inf
        for d in range(m):
            if d == own:
                continue
            value = (device_weights[0] * there[d] / max(total, 1e-300) + device_weights[1] * load[d] / busiest
                     + device_weights[2] * min((used[d] + memory[u]) / capacity[d], 2.0)
                     + device_weights[3] * (1.0 if node[d] == node[own] else 0.0)
                     + device_weights[4] * speed[d] / fastest + gumbel[r, d])
            if best < 0 or value > best_value:
                best, best_value = d, value
        chosen[r] = best
    return chosen
