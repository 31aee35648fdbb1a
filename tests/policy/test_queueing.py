"""Worked M/M/k numbers and the model's shape (policy/queueing.py, Es-Stream V-B)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ConfigError
from policy.queueing import (
    erlang_b,
    erlang_c,
    es_stream_servers,
    mean_in_system,
    mean_queue_length,
    mean_sojourn_time,
    mean_waiting_time,
    min_servers,
    min_stable_servers,
    stable,
)


def test_textbook_m_m_3() -> None:
    """lambda = 2, mu = 1, k = 3 (a = 2), by the Erlang B recursion:

    B(1) = 2 / 3, B(2) = (4/3) / (2 + 4/3) = 2/5, B(3) = (4/5) / (3 + 4/5) = 4/19;
    C = 3 B / (3 - 2 (1 - B)) = (12/19) / (27/19) = 4/9; W_q = C / (k mu - lambda) = 4/9;
    W = 4/9 + 1 = 13/9; L_q = lambda W_q = 8/9; Q = L_q + a = 26/9.
    """
    assert erlang_b(3, 2.0) == pytest.approx(4 / 19)
    assert erlang_c(2.0, 1.0, 3) == pytest.approx(4 / 9)
    assert mean_waiting_time(2.0, 1.0, 3) == pytest.approx(4 / 9)
    assert mean_sojourn_time(2.0, 1.0, 3) == pytest.approx(13 / 9)
    assert mean_queue_length(2.0, 1.0, 3) == pytest.approx(8 / 9)
    assert mean_in_system(2.0, 1.0, 3) == pytest.approx(26 / 9)


def test_m_m_1_reduces_to_the_single_server_formulas() -> None:
    """lambda = 0.5, mu = 1: C = utilisation = 0.5, W = 1 / (mu - lambda) = 2, L = 0.5 / 0.5 = 1."""
    assert erlang_c(0.5, 1.0, 1) == pytest.approx(0.5)
    assert mean_sojourn_time(0.5, 1.0, 1) == pytest.approx(2.0)
    assert mean_in_system(0.5, 1.0, 1) == pytest.approx(1.0)


def test_unstable_systems_wait_forever() -> None:
    assert not stable(2.0, 1.0, 2)
    assert erlang_c(2.0, 1.0, 2) == 1.0
    assert math.isinf(mean_waiting_time(2.0, 1.0, 2)) and math.isinf(mean_in_system(2.0, 1.0, 1))
    assert erlang_c(0.0, 1.0, 1) == 0.0 and mean_sojourn_time(0.0, 2.0, 1) == pytest.approx(0.5)


def test_min_servers_meets_the_target_with_the_fewest_executors() -> None:
    """lambda = 2, mu = 1: k = 3 waits 4/9 s on average; k = 4: B(4) = (8/19) / (4 + 8/19) = 2/21,
    C = 4 (2/21) / (4 - 2 (19/21)) = 4/23, W_q = (4/23) / 2 = 2/23 = 0.087 s. So a 0.1 s waiting
    target needs 4 executors, a 0.5 s target 3, and a 1.1 s sojourn target (W_q <= 0.1) 4 too.
    """
    assert min_servers(2.0, 1.0) == 3  # the stability bound: k > lambda / mu strictly
    assert min_servers(2.0, 1.0, max_wait_s=0.5) == 3
    assert min_servers(2.0, 1.0, max_wait_s=0.1) == 4
    assert mean_waiting_time(2.0, 1.0, 4) == pytest.approx(2 / 23)
    assert min_servers(2.0, 1.0, max_sojourn_s=1.1) == 4
    assert min_stable_servers(3.0, 1.0) == 4 and min_stable_servers(0.0, 1.0) == 1


def test_min_servers_refuses_unreachable_targets() -> None:
    with pytest.raises(ConfigError, match="unreachable"):
        min_servers(2.0, 1.0, max_sojourn_s=1.0)  # service alone takes 1 / mu = 1 s
    with pytest.raises(ConfigError):
        min_servers(2.0, 1.0, max_wait_s=0.0)
    with pytest.raises(ConfigError, match="more than 5"):
        min_servers(20.0, 1.0, max_servers=5)
    with pytest.raises(ConfigError):
        erlang_c(1.0, 0.0, 2)
    with pytest.raises(ConfigError):
        erlang_c(1.0, 1.0, 0)


def test_es_stream_algorithm_1_stops_where_one_more_instance_saves_less_than_its_price() -> None:
    """lambda = 2, mu = 1. Q(3) = 26/9 = 2.889, Q(4) = 2 (4/23) ... L_q(4) = 4/23, Q(4) = 2.174;
    B(5) = (4/21) / (5 + 4/21) = 4/109, C(5) = (20/109) / (5 - 2 (105/109)) = 4/67, L_q(5) = 2 (4/67) / 3
    = 8/201, Q(5) = 2.040. Savings: Q3 - Q4 = 0.715, Q4 - Q5 = 0.134.
    beta = 0.5 (price 1): 3; beta = 0.2 (price 0.25): 4; beta = 0.1 (price 0.111): 5 (Q5 - Q6 < 0.04).
    """
    assert mean_in_system(2.0, 1.0, 4) == pytest.approx(2 + 4 / 23)
    assert mean_in_system(2.0, 1.0, 5) == pytest.approx(2 + 8 / 201)
    assert es_stream_servers(2.0, 1.0, beta=0.5) == 3
    assert es_stream_servers(2.0, 1.0, beta=0.2) == 4
    assert es_stream_servers(2.0, 1.0, beta=0.1) == 5
    with pytest.raises(ConfigError):
        es_stream_servers(2.0, 1.0, beta=1.0)


def _erlang_c_log_space(a: float, k: int) -> float:
    """The closed form, Es-Stream Eq. 15-16, in log space (lgamma) so it does not overflow."""
    terms = [n * math.log(a) - math.lgamma(n + 1) for n in range(k)]
    tail = k * math.log(a) - math.lgamma(k + 1) - math.log(1 - a / k)
    top = max([*terms, tail])
    total = sum(math.exp(t - top) for t in terms) + math.exp(tail - top)
    return math.exp(tail - top) / total


@pytest.mark.parametrize(("a", "k"), [(2.0, 3), (45.0, 50), (250.0, 300), (480.0, 500), (10.0, 400)])
def test_the_recursion_agrees_with_the_closed_form_for_hundreds_of_executors(a: float, k: int) -> None:
    assert erlang_c(a, 1.0, k) == pytest.approx(_erlang_c_log_space(a, k), rel=1e-9)


@given(lam=st.floats(0.01, 400), mu=st.floats(0.1, 50), extra=st.integers(0, 50))
def test_waiting_falls_as_executors_are_added(lam: float, mu: float, extra: int) -> None:
    k = min_stable_servers(lam, mu) + extra
    c0, c1 = erlang_c(lam, mu, k), erlang_c(lam, mu, k + 1)
    assert 0.0 <= c1 <= c0 <= 1.0
    assert mean_waiting_time(lam, mu, k + 1) <= mean_waiting_time(lam, mu, k)
    assert mean_sojourn_time(lam, mu, k) >= 1.0 / mu
    assert mean_in_system(lam, mu, k) >= lam / mu - 1e-9


@given(lam=st.floats(0.01, 300), mu=st.floats(0.5, 20), slack=st.floats(0.001, 5))
def test_min_servers_is_stable_and_minimal(lam: float, mu: float, slack: float) -> None:
    target = 1.0 / mu + slack / mu
    k = min_servers(lam, mu, max_sojourn_s=target)
    assert k * mu > lam and mean_sojourn_time(lam, mu, k) <= target
    assert k == 1 or not stable(lam, mu, k - 1) or mean_sojourn_time(lam, mu, k - 1) > target
