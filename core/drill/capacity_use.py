"""What each policy did with its capacity in a burst, and what it did before the burst.

Why: a drill claims one policy handles a burst better than another, and a skeptic first asks whether
the other was limited by its capacity or by a setting. So per policy the report gives the events its
source admitted per second in the burst and its VM CPU there, and flags a policy that fell behind
while its VM cores were not busy (admission or scheduling held it back, not CPU). Offloading before
the onset is kept apart from the burst's, so a policy that reacted to its own warm-up is seen.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from core.latency import Epoch

BUSY_CPU = 0.9  # VM cores this busy are saturated: falling behind then is the capacity's limit
BEHIND_FACTOR = 1.5  # a peak p99 above this x the pre-burst p99 is falling behind
FULL = 0.98  # an epoch that covered this much of its source's cap was held by the cap


def admitted_per_s(epochs: Sequence[Epoch], origin: float, start_s: float, end_s: float) -> float | None:
    """Events per second admitted by the epochs that started inside [start_s, end_s)."""
    if end_s <= start_s:
        return None
    inside = [e for e in epochs if start_s <= e.started_t - origin < end_s]
    if not inside:
        return 0.0
    return round(sum(e.covered - e.start for e in inside) / (end_s - start_s), 1)


def held_by_cap(
    epochs: Sequence[Epoch], caps: Sequence[int], origin: float, start_s: float, end_s: float
) -> dict[str, float] | None:
    """Of the epochs that started inside [start_s, end_s): the share that covered their source's cap
    (`caps`, one per epoch; those the cap held back, whatever the VM could have done) and their median
    cap. None when no epoch started there."""
    paired = zip(epochs, caps, strict=True)
    inside = [(e, cap) for e, cap in paired if start_s <= e.started_t - origin < end_s]
    if not inside:
        return None
    full = sum(e.covered - e.start >= FULL * cap for e, cap in inside) / len(inside)
    return {"share": round(full, 3), "cap_events": float(statistics.median(cap for _, cap in inside))}


def mean_between(values: Sequence[float | None], start_s: float, end_s: float) -> float | None:
    picked = [v for s, v in enumerate(values) if start_s <= s < end_s and v is not None]
    return round(sum(picked) / len(picked), 3) if picked else None


def behind_with_idle_cores(peak_ms: float | None, pre_ms: float | None, cpu: float | None) -> bool:
    """Fell behind (peak p99 over BEHIND_FACTOR x its pre-burst p99) with its VM cores under BUSY_CPU."""
    if peak_ms is None or pre_ms is None or cpu is None:
        return False
    return peak_ms > BEHIND_FACTOR * pre_ms and cpu < BUSY_CPU


def before_onset(
    shares: Sequence[float | None], workers: Sequence[float | None], onset_s: float
) -> dict[str, float]:
    """The offloading a policy did before the burst: its highest share and its worker-seconds."""
    n = max(0, int(onset_s))
    return {
        "max_share": max((s or 0.0 for s in shares[:n]), default=0.0),
        "worker_seconds": float(sum(w or 0 for w in workers[:n])),
    }
