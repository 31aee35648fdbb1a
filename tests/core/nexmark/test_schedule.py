"""Rate schedules: parsing, exact timing of constant and piecewise rates, and offset/count consistency."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ConfigError
from core.nexmark.schedule import RateSchedule, Segment


def test_constant_rate_is_exactly_n_over_r() -> None:
    schedule = RateSchedule.constant(10_000)
    n = np.arange(0, 1_000_000, 997)
    assert np.array_equal(schedule.offset_s(n), n / 10_000)
    assert schedule.events_by(0.0) == 1
    assert schedule.events_by(1.0) == 10_001
    assert schedule.events_by(-0.001) == 0


def test_parse_constant_and_text_round_trip() -> None:
    for text in ("10000", "30:10000,10:20000,30:10000", "20:10000-50000", "1.5:100.25-3,2:7"):
        schedule = RateSchedule.parse(text)
        assert RateSchedule.parse(schedule.text()) == schedule
    assert RateSchedule.parse(" 10000 ") == RateSchedule.constant(10_000)
    assert RateSchedule.parse("1e4").text() == "10000"


def test_burst_schedule_timing() -> None:
    schedule = RateSchedule.parse("30:10000,10:20000,30:10000")
    # 300k events in the first 30 s, 200k more in the burst, then back to 10k/s forever.
    assert schedule.offset_s(np.array([300_000]))[0] == pytest.approx(30.0)
    assert schedule.offset_s(np.array([300_001]))[0] == pytest.approx(30.0 + 1 / 20_000)
    assert schedule.offset_s(np.array([500_000]))[0] == pytest.approx(40.0)
    assert schedule.offset_s(np.array([800_000]))[0] == pytest.approx(70.0)
    assert schedule.offset_s(np.array([900_000]))[0] == pytest.approx(80.0)
    assert schedule.events_by(35.0) == 400_001
    assert schedule.events_by(100.0) == 1_100_001


def test_ramp_solves_the_quadratic() -> None:
    schedule = RateSchedule.parse("20:10000-50000")
    # N(t) = 10000 t + 1000 t^2 within the ramp, then 50000/s.
    for t in (0.5, 10.0, 19.9):
        count = 10_000 * t + 1_000 * t * t
        assert schedule.offset_s(np.array([count]))[0] == pytest.approx(t, rel=1e-12)
    assert schedule.offset_s(np.array([600_000 + 50_000]))[0] == pytest.approx(21.0)
    assert schedule.events_by(10.0) == 200_001


def test_decreasing_ramp_is_monotone() -> None:
    schedule = RateSchedule.parse("10:50000-1000,5:1000")
    offsets = schedule.offset_s(np.arange(0, 300_000))
    assert np.all(np.diff(offsets) > 0)
    assert offsets[-1] == pytest.approx(10.0 + (300_000 - 1 - 255_000) / 1000)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "0",
        "-5",
        "10:0",
        "10:100-",
        "x:100",
        "0:100",
        "-1:100",
        "10:1-2-3",
        "nan",
        "10:inf",
        "10:100,",
    ],
)
def test_bad_text_is_a_config_error_with_hint(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        RateSchedule.parse(text)
    assert info.value.hint


def test_segment_rejects_non_positive_rates() -> None:
    with pytest.raises(ConfigError):
        Segment(1.0, 0.0, 5.0)
    with pytest.raises(ConfigError):
        RateSchedule(())


segments = st.lists(
    st.tuples(
        st.floats(0.01, 50.0),
        st.floats(1.0, 100_000.0),
        st.floats(1.0, 100_000.0),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(segments, st.lists(st.integers(0, 5_000_000), min_size=1, max_size=50))
def test_events_by_inverts_offset_s(parts: list[tuple[float, float, float]], ns: list[int]) -> None:
    schedule = RateSchedule(tuple(Segment(*part) for part in parts))
    n = np.array(sorted(ns))
    offsets = schedule.offset_s(n)
    assert np.all(np.diff(offsets) >= 0)
    for index, offset in zip(n, offsets, strict=True):
        count = schedule.events_by(float(offset))
        assert count >= index + 1
        # events_by counts exactly the events whose offset is <= t.
        assert schedule.offset_s(np.array([count - 1]))[0] <= offset
        assert schedule.offset_s(np.array([count]))[0] > offset


@settings(max_examples=40, deadline=None)
@given(segments, st.integers(0, 2_000_000))
def test_consecutive_offsets_strictly_increase(parts: list[tuple[float, float, float]], first: int) -> None:
    schedule = RateSchedule(tuple(Segment(*part) for part in parts))
    offsets = schedule.offset_s(np.arange(first, first + 2_000))
    assert np.all(np.diff(offsets) > 0)
