"""When a drill's run is in its steady state, and the policy that waits for it.

Why: a drill compares policies on a burst that hits a job in its stable period, as the paper's
experiments do. A run's first epochs pay for planning, code generation and state-store set-up, so
every policy starts in a warm-up backlog; a policy that reacts to it offloads before any burst (seen:
90 % of the input from 6 s to 20 s) and a report that reads those seconds compares start-ups, not
policies. So a run is steady once its last `epochs` epochs kept up with the input (each admitted
everything released when it started) and their latencies lie within `band` of their median; the
policy decides nothing before that (or before the burst, if the run never settles), and the report
gives each policy's p99 just before the burst so unequal starting points are seen.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.latency import Epoch
from core.nexmark.schedule import RateSchedule

STEADY_EPOCHS = 5
STEADY_BAND = 0.15  # each of the last epochs' latency within +-15 % of their median
BACKLOG_SLACK_S = 0.25  # released events an epoch may leave behind, in seconds of input (planning's lag)


@dataclass(frozen=True)
class SteadyCriterion:
    epochs: int = STEADY_EPOCHS
    band: float = STEADY_BAND
    slack_s: float = BACKLOG_SLACK_S

    def describe(self) -> str:
        return (
            f"the last {self.epochs} epochs kept up with the input and their latencies lie within "
            f"+-{self.band:.0%} of their median"
        )


def epoch_latency_s(epoch: Epoch, schedule: RateSchedule, origin: float) -> float:
    """Latency of the epoch's oldest event: its commit minus that event's release (a paced source)."""
    return epoch.commit_t - origin - float(schedule.offset_s(epoch.start))


def kept_up(epoch: Epoch, schedule: RateSchedule, origin: float, slack_s: float) -> bool:
    """Whether the epoch admitted what was released when it started, bar `slack_s` of input."""
    released = schedule.events_by(max(epoch.started_t - origin - slack_s, 0.0))
    return epoch.covered >= released


def steady_at(
    epochs: Sequence[Epoch],
    schedule: RateSchedule,
    origin: float,
    criterion: SteadyCriterion = SteadyCriterion(),
) -> float | None:
    """Seconds after `origin` at which the run became steady (the commit that completed the criterion),
    or None if it never did."""
    ordered = sorted(epochs, key=lambda e: e.commit_t)
    n = criterion.epochs
    for i in range(n, len(ordered) + 1):
        last = ordered[i - n : i]
        if not all(kept_up(e, schedule, origin, criterion.slack_s) for e in last):
            continue
        latencies = [epoch_latency_s(e, schedule, origin) for e in last]
        middle = statistics.median(latencies)
        if middle > 0 and all(abs(x - middle) <= criterion.band * middle for x in latencies):
            return last[-1].commit_t - origin
    return None


class SteadyWatch:
    """Follows a run's epochs as they commit and remembers when it became steady."""

    def __init__(self, schedule: RateSchedule, criterion: SteadyCriterion = SteadyCriterion()) -> None:
        self.schedule = schedule
        self.criterion = criterion
        self.origin: float | None = None
        self.steady_s: float | None = None
        self._epochs: list[Epoch] = []

    def add(self, epoch: Epoch) -> None:
        if self.steady_s is not None or self.origin is None:
            return
        self._epochs = [*self._epochs[-(self.criterion.epochs - 1) :], epoch]
        self.steady_s = steady_at(self._epochs, self.schedule, self.origin, self.criterion)


class ArmedPolicy:
    """A policy that decides only once `armed(t)` holds: before, the loop observes and logs nothing.

    The decision log then starts at the first decision, so replaying it needs no knowledge of the gate.
    """

    def __init__(self, policy: Any, armed: Callable[[float], bool]) -> None:
        self.policy = policy
        self.armed = armed
        self.armed_s: float | None = None

    def decide(self, obs: Any) -> Any:
        if self.armed_s is None:
            if not self.armed(obs.t):
                return None
            self.armed_s = obs.t
        return self.policy.decide(obs)

    def __getattr__(self, name: str) -> Any:  # the policy's config and state, for its readers
        return getattr(self.policy, name)


PRE_BURST_S = 10  # the seconds before the onset that give a policy's starting point
# A run's trace starts in a new query, whose first epoch pays for planning and state-store set-up
# (~2.4 s for Q5 after the warm-up). At the full stable rate that left a backlog the batch cap drained
# at ~20,000 events/s, so runs took 15-20 s to settle, or never did on a slower day. The trace's
# lead-in therefore ramps up to the stable rate over its first seconds (core/nexmark/patterns.py).
LEAD_RAMP_S = 5.0


def pre_burst(values: Sequence[float | None], onset_s: float, seconds: int = PRE_BURST_S) -> float | None:
    """Median of a per-second series over the `seconds` before the onset: a policy's starting point."""
    start = max(0, int(onset_s) - seconds)
    picked = [v for v in values[start : int(onset_s)] if v is not None]
    return round(statistics.median(picked), 1) if picked else None
