"""Latency of simulated records, and the drill report's per-run figures, from a run's cumulative counts.

Why by inversion: every queue is FIFO, so the record that arrived when N records had arrived leaves
the source queue when N records have been pulled, and the Lambda queue when the routed records before
it have been processed. Inverting the cumulative curves gives each step's arrivals their exact
queueing delay in the fluid model; the arrivals of a step are taken at the step's middle.

Latency = queueing delay + `vm_latency_s` (a record's time in a micro-batch once pulled) + for routed
records the Lambda queue, the dispatch round trip and the chunk's processing on the worker.
The report's definitions follow the drill's (core/drill): peak p99 over the burst and what follows it,
mean p99 within the burst windows, recovery when p99 stays under 1.5x the lead-in's median.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from policy.sim.engine import RunResult

RECOVERY_FACTOR = 1.5


@dataclass(frozen=True)
class LatencyModel:
    """The fixed parts of a record's latency, on top of queueing."""

    vm_latency_s: float  # pulled -> committed on the VMs (micro-batch processing)
    lambda_extra_s: float  # dispatch round trip + the chunk's processing on a worker


def _first_reach(cum: np.ndarray, targets: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Time at which the cumulative curve (values at step ends, 0 at t = 0) first reaches each target,
    interpolated within the step, and that step's index; inf where it never does."""
    full = np.concatenate(([0.0], cum))
    k = np.searchsorted(full, targets - 1e-9 * np.maximum(targets, 1.0), side="left")
    k = np.clip(k, 1, len(full))
    never = k >= len(full)
    k = np.minimum(k, len(full) - 1)
    lo, hi = full[k - 1], full[k]
    frac = np.where(hi > lo, (targets - lo) / np.where(hi > lo, hi - lo, 1.0), 1.0)
    t = (k - 1 + np.clip(frac, 0.0, 1.0)) * dt
    return np.where(never, np.inf, t), k - 1


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """The smallest value with at least `q` of the weight at or below it; None without weight."""
    keep = weights > 0
    if not keep.any():
        return None
    return float(np.quantile(values[keep], q, weights=weights[keep], method="inverted_cdf"))


def p99_by_second(result: RunResult, model: LatencyModel, seconds: int) -> list[float | None]:
    """p99 latency (ms) of the records that arrived in each second of the trace."""
    s, dt = result.series, result.dt
    arrived = np.asarray(s.arrived)
    steps = min(result.trace_steps, seconds * round(1 / dt))
    per_step = np.diff(np.concatenate(([0.0], arrived)))[:steps]
    mid = arrived[:steps] - per_step / 2
    t_arr = (np.arange(steps) + 0.5) * dt
    t_pull, k = _first_reach(np.asarray(s.pulled), mid, dt)
    share = np.asarray(s.share)[np.minimum(k, len(s.share) - 1)]
    # The routed records ahead of this one when it entered the Lambda queue, then when they are done.
    to_l = np.concatenate(([0.0], np.asarray(s.to_lambda)))
    step = np.minimum(k, len(s.to_lambda) - 1)
    frac = np.clip(t_pull / dt - step, 0.0, 1.0)
    entered = to_l[step] + frac * (to_l[step + 1] - to_l[step])
    t_done, _ = _first_reach(np.asarray(s.lambda_done), entered, dt)
    local_ms = (t_pull - t_arr + model.vm_latency_s) * 1000.0
    routed_ms = (np.maximum(t_done, t_pull) - t_arr + model.vm_latency_s + model.lambda_extra_s) * 1000.0
    per_s = round(1 / dt)
    out: list[float | None] = []
    for sec in range(seconds):
        a, b = sec * per_s, min((sec + 1) * per_s, steps)
        if a >= b:
            out.append(None)
            continue
        w = per_step[a:b]
        values = np.concatenate((local_ms[a:b], routed_ms[a:b]))
        weights = np.concatenate((w * (1 - share[a:b]), w * share[a:b]))
        finite = np.isfinite(values)
        p99 = weighted_quantile(values[finite], weights[finite], 0.99)
        out.append(None if p99 is None or not finite[weights > 0].all() else round(p99, 1))
    return out


Windows = Sequence[tuple[float, float]]


def recovery_s(values: Sequence[float | None], windows: Windows, lead_s: float) -> float | None:
    """Seconds from the last burst's end until p99 stays under 1.5x the lead-in's median p99.

    Unlike the drill's `core.latency.recovery_s`, a None here is an unbounded latency (events
    still queued), not a second without arrivals, so it counts as not yet recovered.
    """
    base = [v for i, v in enumerate(values) if v is not None and lead_s / 2 <= i < lead_s]
    if not windows or not base:
        return None
    limit = RECOVERY_FACTOR * float(np.median(base))
    end = windows[-1][1]
    for sec in range(int(end), len(values)):
        rest = values[sec:]
        if all(v is not None and v <= limit for v in rest):
            return round(max(sec - end, 0.0), 1)
    return None


def per_second_mean(values: Sequence[float], per_s: int, seconds: int, digits: int = 4) -> list[float]:
    """The mean of each second's steps (CPU, share, cores, workers as the report's series)."""
    return [round(float(np.mean(values[s * per_s : (s + 1) * per_s])), digits) for s in range(seconds)]


def reaction_s(result: RunResult, onset_s: float) -> float | None:
    """Burst onset to the first routed record processed (sponge, sfbase) or the first second added VMs
    served records (vmbase, vminit); None when nothing was added."""
    s, dt = result.series, result.dt
    start = round(onset_s / dt)
    base_cores = s.vm_cores[0] if s.vm_cores else 0
    done_before = s.lambda_done[start - 1] if start > 0 else 0.0
    for i in range(start, len(s.arrived)):
        if s.lambda_done[i] > done_before + 1e-9 or s.vm_cores[i] > base_cores:
            return round(i * dt - onset_s, 2)
    return None
