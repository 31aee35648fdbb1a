"""Worked examples of the offloading policy's equations (Sponge section 4.3)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ConfigError
from policy.equations import (
    excess_events,
    lambda_cores,
    lambda_instances,
    outside_band,
    per_core_rate,
    recovery_throughput,
    simpson,
)


def test_simpson_is_exact_for_cubics_and_handles_odd_interval_counts() -> None:
    xs = [i * 0.5 for i in range(5)]  # 4 intervals on [0, 2]
    assert simpson([x**3 - x for x in xs], 0.5) == pytest.approx(4 - 2)
    assert simpson([1.0, 1.0, 1.0, 1.0], 1.0) == pytest.approx(3.0)  # 3 intervals: Simpson + trapezoid
    assert simpson([5.0], 1.0) == 0.0


def test_a_burst_queues_what_the_input_adds_beyond_the_throughput() -> None:
    # Input rises to 2x a 100 ev/s throughput and back over 4 s: (0, 50, 100, 50, 0) above it.
    queued = excess_events([100, 150, 200, 150, 100], [100] * 5, dt=1.0)
    assert queued == pytest.approx((0 + 4 * 50 + 2 * 100 + 4 * 50 + 0) / 3)  # 200 events
    assert excess_events([90, 80], [100, 100], 1.0) == 0.0  # no backlog when processing keeps up


def test_eq1_recovery_throughput_drains_the_backlog_by_the_deadline() -> None:
    # 200 queued events, input steady at 100 ev/s, 10 s deadline (the window): 120 ev/s needed.
    m_o = recovery_throughput(200.0, [100.0] * 11, dt=1.0)
    assert m_o == pytest.approx(120.0)
    # Eq. 1 holds with equality: what m_o adds beyond the input over D drains exactly the backlog.
    assert simpson([m_o - 100.0] * 11, 1.0) == pytest.approx(200.0)


def test_eq2_scales_a_stable_rate_to_a_full_core() -> None:
    assert per_core_rate(1400.0, 70.0) == pytest.approx(2000.0)
    with pytest.raises(ConfigError):
        per_core_rate(1400.0, 0.0)


def test_eq3_counts_lambda_cores_at_the_70_percent_target() -> None:
    # 5000 ev/s on cores as fast as a VM core (rho 1) running 2000 ev/s at 100 %: 5000 / 1400 -> 4.
    assert lambda_cores(5000.0, 2000.0, rho=1.0) == 4
    # With rho = 7.7 (bench/offload.py, Q1), one Lambda core carries 10,780 ev/s at 70 %.
    assert lambda_cores(5000.0, 2000.0, rho=7.7) == 1
    assert lambda_cores(10_780.0, 2000.0, rho=7.7) == 1 and lambda_cores(10_781.0, 2000.0, rho=7.7) == 2
    assert lambda_cores(0.0, 2000.0, rho=1.0) == 0
    assert lambda_instances(5, cores_per_instance=2) == 3


@given(
    m_o=st.floats(1, 1e7),
    mean_rate=st.floats(1, 1e6),
    cpu=st.floats(1, 100),
    rho=st.floats(0.1, 50),
)
def test_eq3_both_forms_agree(m_o: float, mean_rate: float, cpu: float, rho: float) -> None:
    """c = ceil(m_o / (0.7 rpc_SF)) = ceil(m_o * u_cpu / (0.7 * 100 * rho * mean rate))."""
    direct = m_o * cpu / (0.7 * 100 * rho * mean_rate)
    c = lambda_cores(m_o, per_core_rate(mean_rate, cpu), rho)
    assert c == math.ceil(direct - 1e-9) or abs(direct - round(direct)) < 1e-6


def test_the_stable_band_is_60_to_80_percent() -> None:
    assert [outside_band(x) for x in (55, 60, 70, 80, 85)] == [True, False, False, False, True]
