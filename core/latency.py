"""Event latency of a drill run, per second of arrival, from the epochs Spark committed.

Event latency (DESIGN.md 5) = the wall time the epoch holding the event committed minus the wall
time the event arrived at the source. The source releases event n at `origin + schedule.offset_s(n)`
(it is paced by the schedule), and an epoch commits every event below the lowest end offset of its
sources, so both ends are known exactly without touching the records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.nexmark.schedule import RateSchedule

MAX_SAMPLES = 400_000  # events sampled (evenly) for the percentiles; plenty for a p99 per second


@dataclass(frozen=True)
class Epoch:
    """One committed micro-batch: every event below `covered` is committed at `commit_t` (unix s)."""

    started_t: float
    commit_t: float
    start: int  # lowest start offset of its sources
    covered: int  # lowest end offset of its sources


@dataclass(frozen=True)
class LatencySeries:
    p50_ms: list[float | None]
    p99_ms: list[float | None]


def per_second(
    epochs: Sequence[Epoch], schedule: RateSchedule, origin: float, duration_s: float, events: int
) -> LatencySeries:
    """p50 and p99 latency (ms) of the events arriving in each second of the trace."""
    seconds = int(duration_s)
    stride = max(1, events // MAX_SAMPLES)
    ids = np.arange(0, events, stride, dtype=np.int64)
    arrival = schedule.offset_s(ids)
    commit = np.full(len(ids), np.nan)
    done = 0
    for e in sorted(epochs, key=lambda e: e.commit_t):
        hi = int(np.searchsorted(ids, e.covered, side="left"))
        if hi > done:
            commit[done:hi] = e.commit_t - origin
            done = hi
    latency_ms = (commit - arrival) * 1000.0
    second = arrival.astype(np.int64)
    p50: list[float | None] = []
    p99: list[float | None] = []
    for s in range(seconds):
        sel = latency_ms[(second == s) & ~np.isnan(latency_ms)]
        p50.append(round(float(np.percentile(sel, 50)), 1) if len(sel) else None)
        p99.append(round(float(np.percentile(sel, 99)), 1) if len(sel) else None)
    return LatencySeries(p50, p99)


def peak(
    values: Sequence[float | None], windows: Sequence[tuple[float, float]], after_s: float = 0.0
) -> float | None:
    """Highest value in the burst windows (and up to `after_s` after each: a queue drains late)."""
    picked = [v for s, v in enumerate(values) if v is not None and _inside(s, windows, after_s)]
    return max(picked) if picked else None


def mean(values: Sequence[float | None], windows: Sequence[tuple[float, float]]) -> float | None:
    picked = [v for s, v in enumerate(values) if v is not None and _inside(s, windows, 0.0)]
    return round(sum(picked) / len(picked), 1) if picked else None


def recovery_s(
    values: Sequence[float | None], windows: Sequence[tuple[float, float]], lead_s: float, factor: float = 1.5
) -> float | None:
    """Seconds from the last burst's end until p99 is back under `factor` x the lead-in's median p99."""
    if not windows:
        return None
    base = [v for s, v in enumerate(values) if v is not None and lead_s / 2 <= s < lead_s]
    if not base:
        return None
    limit = factor * float(np.median(base))
    end = windows[-1][1]
    for s in range(int(end), len(values)):
        rest = [v for v in values[s:] if v is not None]
        if rest and max(rest) <= limit:
            return round(max(s - end, 0.0), 1)
    return None


def _inside(second: int, windows: Sequence[tuple[float, float]], after_s: float) -> bool:
    return any(lo <= second < hi + after_s for lo, hi in windows)
