"""The steady-state criterion, the policy that waits for it, and the pre-burst figure."""

from __future__ import annotations

import random

import pytest

from core.drill.steady import ArmedPolicy, SteadyCriterion, SteadyWatch, pre_burst, steady_at
from core.latency import Epoch
from core.nexmark.schedule import RateSchedule

RATE = 10_000.0
ORIGIN = 1_000.0
SCHEDULE = RateSchedule.constant(RATE)


def _epochs(durations: list[float], lag_s: float = 0.0) -> list[Epoch]:
    """Back-to-back epochs of a paced source, each admitting what was released `lag_s` before it started."""
    out, t, start = [], ORIGIN + 1.0, 0
    for d in durations:
        covered = max(start, int((t - ORIGIN - lag_s) * RATE))
        out.append(Epoch(started_t=t, commit_t=t + d, start=start, covered=covered))
        t, start = t + d, covered
    return out


def test_a_run_is_steady_once_its_last_epochs_agree_and_keep_up() -> None:
    # The warm-up: slow first epochs, then settled ones at ~1 s.
    epochs = _epochs([6.0, 3.0, 2.0, 1.0, 1.05, 0.95, 1.0, 1.02, 1.0, 0.98])
    at = steady_at(epochs, SCHEDULE, ORIGIN)
    assert at is not None
    assert at == pytest.approx(epochs[8].commit_t - ORIGIN)  # the fifth settled epoch completes it
    assert steady_at(epochs[:8], SCHEDULE, ORIGIN) is None


def test_a_run_that_falls_behind_or_jitters_is_not_steady() -> None:
    behind = _epochs([1.0] * 10, lag_s=2.0)  # each epoch leaves two seconds of input behind
    assert steady_at(behind, SCHEDULE, ORIGIN) is None
    rng = random.Random(7)
    jitter = _epochs([rng.choice([0.6, 1.4]) for _ in range(30)])
    assert steady_at(jitter, SCHEDULE, ORIGIN) is None
    assert steady_at(jitter, SCHEDULE, ORIGIN, SteadyCriterion(band=1.0)) is not None


def test_the_watch_follows_epochs_as_they_commit() -> None:
    epochs = _epochs([6.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    watch = SteadyWatch(SCHEDULE)
    watch.origin = ORIGIN
    seen = []
    for e in epochs:
        watch.add(e)
        seen.append(watch.steady_s)
    # An epoch's oldest event waited for the epoch before it too: latencies settle from the fourth on.
    assert seen[:7] == [None] * 7 and seen[7] == pytest.approx(epochs[7].commit_t - ORIGIN)
    assert seen[8] == seen[7]  # it stays the first time


class _Counting:
    def __init__(self) -> None:
        self.calls = 0
        self.config = "the policy's"

    def decide(self, obs: object) -> str:
        self.calls += 1
        return "decision"


class _Obs:
    def __init__(self, t: float) -> None:
        self.t = t


def test_the_armed_policy_decides_nothing_until_armed_then_everything() -> None:
    inner, armed = _Counting(), {"now": False}
    policy = ArmedPolicy(inner, lambda t: armed["now"])
    assert policy.decide(_Obs(1.0)) is None and inner.calls == 0
    armed["now"] = True
    assert policy.decide(_Obs(2.0)) == "decision" and policy.armed_s == 2.0
    armed["now"] = False  # once armed it stays armed: the decision log has no gaps
    assert policy.decide(_Obs(3.0)) == "decision" and inner.calls == 2
    assert policy.config == "the policy's"


def test_the_pre_burst_figure_is_the_median_of_the_last_seconds() -> None:
    values = [5000.0] * 5 + [100.0, None, 120.0, 110.0] + [9000.0] * 5
    assert pre_burst(values, onset_s=9, seconds=4) == 110.0
    assert pre_burst(values, onset_s=0) is None
