"""Es-Stream's skewness rule over the operators' loads: which operator's work moves first."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from core.errors import ConfigError
from policy.monitor import Observation
from policy.offload_policy import PolicyConfig, SpongePolicy
from policy.skew import offload_order, skewness

loads = st.lists(st.floats(0.0, 100.0), min_size=3, max_size=12)


def test_skewness_on_a_worked_example() -> None:
    """[1, 1, 1, 5]: mean 2, deviations -1, -1, -1, 3, sigma = sqrt(12 / 4) = sqrt(3);
    SK = 4 x (-3 + 27) / (3 x 2 x 3 sqrt(3)) = 96 / (18 sqrt(3)) = 3.079."""
    assert skewness([1, 1, 1, 5]) == pytest.approx(96 / (18 * math.sqrt(3)))
    assert skewness([1, 5, 5, 5]) == pytest.approx(-96 / (18 * math.sqrt(3)))
    assert skewness([1, 2]) is None and skewness([3, 3, 3]) is None


@given(values=loads, scale=st.floats(0.01, 100.0), shift=st.floats(-50.0, 50.0))
def test_skewness_is_scale_free_and_changes_sign_with_the_load(values, scale, shift) -> None:
    sk = skewness(values)
    assume(sk is not None and max(values) - min(values) > 1e-3 * max(1.0, max(values)))
    assert skewness([scale * v + shift for v in values]) == pytest.approx(sk, rel=1e-6, abs=1e-6)
    assert skewness([-v for v in values]) == pytest.approx(-sk, rel=1e-6, abs=1e-6)


def test_a_hot_operator_goes_first_and_a_spread_load_keeps_the_topological_order() -> None:
    hot = offload_order([("read", 0.1), ("window", 0.8), ("top", 0.1), ("sink", 0.05)])
    assert hot.concentrated and hot.operators[0] == "window" and hot.skew > 0
    spread = offload_order([("read", 0.7), ("window", 0.8), ("top", 0.75), ("sink", 0.1)])
    assert not spread.concentrated and spread.operators == ("read", "window", "top", "sink")
    assert spread.skew < 0  # most operators above the mean: no one operator is the bottleneck
    two = offload_order([("a", 0.2), ("b", 0.6)])
    assert two.concentrated and two.operators == ("b", "a") and two.skew is None
    assert offload_order([("a", 0.5), ("b", 0.5), ("c", 0.5)]).operators == ("a", "b", "c")


@given(values=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=10), eta=st.floats(-2.0, 2.0))
def test_the_order_is_a_permutation_hottest_first_when_concentrated(values, eta) -> None:
    names = [f"op{i}" for i in range(len(values))]
    order = offload_order(list(zip(names, values, strict=True)), eta)
    assert sorted(order.operators) == sorted(names)
    if order.concentrated:
        ranked = [values[names.index(n)] for n in order.operators]
        assert ranked == sorted(ranked, reverse=True)
        ties = [n for n in order.operators if values[names.index(n)] == ranked[0]]
        assert ties == sorted(ties, key=names.index)  # equal loads: upstream first
    else:
        assert list(order.operators) == names


def test_bad_loads_are_refused() -> None:
    with pytest.raises(ConfigError, match="twice"):
        offload_order([("a", 1.0), ("a", 2.0)])
    with pytest.raises(ConfigError, match=">= 0"):
        offload_order([("a", -1.0), ("b", 2.0)])


def test_the_policy_logs_the_order_with_each_decision() -> None:
    policy = SpongePolicy(PolicyConfig(per_core_rate=10_000, rho=2.0))
    loads = (("read", 0.1), ("window", 0.9), ("top", 0.1))
    d = policy.decide(Observation(0.0, 0.7, 7_000, 7_000, 0, 1.0, 1, 0.1, operator_loads=loads))
    assert d.priority == ("window", "read", "top") and d.skew == pytest.approx(skewness([0.1, 0.9, 0.1]))
    assert policy.decide(Observation(0.5, 0.7, 7_000, 7_000, 0, 1.0, 1, 0.1)).priority == ()
    raised = PolicyConfig(per_core_rate=10_000, rho=2.0, skew_eta=5.0)  # a higher bar for "concentrated"
    d = SpongePolicy(raised).decide(Observation(0.0, 0.7, 7_000, 7_000, 0, 1.0, 1, 0.1, operator_loads=loads))
    assert d.priority == ("read", "window", "top")
