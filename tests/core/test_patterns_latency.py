"""Burst patterns become the schedules the source follows; latency comes from epochs' offsets."""

from __future__ import annotations

import pytest

from core import latency
from core.errors import ConfigError
from core.nexmark.patterns import RAMP_FROM, BurstPattern


def test_sudden_holds_doubles_and_comes_back() -> None:
    trace = BurstPattern.parse("sudden:2x:30s").trace(10_000, 90, 20)
    rates = trace.rate_by_second()
    assert rates[:20] == [10_000] * 20
    assert rates[20:50] == [20_000] * 30
    assert rates[50:] == [10_000] * 40
    assert trace.bursts == ((20, 50),)
    assert trace.events == pytest.approx(20 * 10_000 + 30 * 20_000 + 40 * 10_000, abs=1)


def test_a_persistent_burst_is_a_long_sudden_one() -> None:
    persistent = BurstPattern.parse("persistent:2x:150s").trace(10_000, 200, 20)
    assert persistent.rate_by_second()[20:170] == [20_000] * 150 and persistent.bursts == ((20, 170),)
    assert persistent.schedule == BurstPattern.parse("sudden:2x:150s").trace(10_000, 200, 20).schedule
    assert BurstPattern.parse("persistent:2x:150s").text() == "persistent:2x:150s"


def test_a_lead_in_ramp_starts_low_and_reaches_the_stable_rate_within_half_the_lead() -> None:
    trace = BurstPattern.parse("sudden:2x:30s").trace(10_000, 90, 20, ramp_s=5)
    rates = trace.rate_by_second()
    assert rates[0] == pytest.approx(10_000 * (RAMP_FROM + (1 - RAMP_FROM) * 0.1), abs=1)  # mid first second
    assert rates[:5] == sorted(rates[:5]) and rates[4] < 10_000
    assert rates[5:20] == [10_000] * 15
    assert rates[20:50] == [20_000] * 30 and trace.bursts == ((20, 50),)
    short = BurstPattern.parse("sudden:2x:30s").trace(10_000, 90, 4, ramp_s=5).rate_by_second()
    assert short[1] < 10_000 and short[2:4] == [10_000] * 2  # at most half the lead ramps
    assert BurstPattern.parse("sudden:2x:30s").trace(10_000, 90, 0, ramp_s=5).rate_by_second()[0] == 20_000


def test_sine_swings_between_stable_and_peak_with_its_period() -> None:
    trace = BurstPattern.parse("sine:3x:20s").trace(10_000, 80, 10)
    rates = trace.rate_by_second()
    assert min(rates[10:]) >= 10_000 - 1
    assert max(rates) == pytest.approx(30_000, rel=0.03)
    assert trace.bursts[0] == (15.0, 25.0)  # the upper half of the first period
    assert trace.bursts[1][0] - trace.bursts[0][0] == 20


def test_gradual_ramps_up_then_down() -> None:
    rates = BurstPattern.parse("gradual:2x:20s").trace(10_000, 60, 10).rate_by_second()
    up = rates[10:20]
    assert up == sorted(up) and up[-1] > 18_000
    assert rates[20:30] == sorted(rates[20:30], reverse=True)


@pytest.mark.parametrize("text", ["sudden", "sudden:1x:10s", "boom:2x:10s", "sudden:2x:0s", "sudden:2:10"])
def test_bad_patterns_say_how_to_write_one(text: str) -> None:
    with pytest.raises(ConfigError) as e:
        BurstPattern.parse(text)
    assert "sudden:2x:30s" in e.value.one_line()


def test_a_burst_that_does_not_fit_is_refused() -> None:
    with pytest.raises(ConfigError, match="does not fit"):
        BurstPattern.parse("sudden:2x:60s").trace(1_000, 50, 10)


def test_latency_is_commit_time_minus_arrival() -> None:
    """1,000 events/s; epochs commit every event below 1,000 at t=1.5 s and below 3,000 at t=3.2 s:
    second 0's events wait 1.5 s down to 0.5 s, seconds 1 and 2 wait until 3.2 s."""
    trace = BurstPattern.parse("sudden:2x:1s").trace(1_000, 3, 2)  # only its schedule is used here
    sched = BurstPattern.parse("sudden:2x:1s").trace(1_000, 4, 3).schedule
    origin = 100.0
    epochs = [latency.Epoch(100.2, 101.5, 0, 1_000), latency.Epoch(101.5, 103.2, 1_000, 3_000)]
    series = latency.per_second(epochs, sched, origin, 3, 3_000)
    assert series.p99_ms[0] == pytest.approx(1_500 - 0.01 * 999, abs=2)  # the earliest events wait longest
    assert series.p50_ms[1] == pytest.approx(3_200 - 1_500, abs=2)
    assert series.p99_ms[2] == pytest.approx(3_200 - 2_010, abs=3)
    assert trace.duration_s == 3


def test_peak_mean_and_recovery_read_the_burst_windows() -> None:
    p99 = [100.0] * 10 + [900.0, 1_500.0, 800.0] + [400.0, 120.0] + [100.0] * 5
    windows = [(10.0, 13.0)]
    assert latency.peak(p99, windows) == 1_500
    assert latency.peak(p99, windows, after_s=1) == 1_500
    assert latency.mean(p99, windows) == pytest.approx((900 + 1_500 + 800) / 3, abs=0.1)
    assert latency.recovery_s(p99, windows, lead_s=10) == 1.0  # back under 150 ms from second 14
    assert latency.recovery_s([100.0] * 10 + [1_000.0] * 10, windows, lead_s=10) is None
