"""Sponge 4.3: a trigger fires once the load has been out of the stable band for consecutive periods, and
the offload is released once it has been back inside for consecutive periods (hysteresis).

Why these checks: one period's blip must cost nothing (no plan, no workers), a burst must be acted on in
the period that confirms it and not later, and the 0.5 s default period must keep the simulated reaction
within the project's 2 s bar wherever in a period the burst begins.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ConfigError
from policy.loop import PolicyLoop
from policy.monitor import Observation
from policy.offload_policy import HOLD, INPUT_RATE, RELEASE, SCALE_DOWN, PolicyConfig, SpongePolicy
from policy.sim.experiment import SimConfig, simulate_query

STABLE = 7_000.0  # the VMs' rate at the 70 % target: one core of 10,000/s
CONFIG = PolicyConfig(per_core_rate=10_000, rho=2.0, max_workers=8)


def obs(i: int, rate: float, backlog: int = 0, period: float = CONFIG.period_s) -> Observation:
    cpu = min(1.0, 0.7 * rate / STABLE)  # the VMs' load follows the input up to saturation
    return Observation(i * period, cpu, rate, min(rate, STABLE), backlog, 1.0, vm_cores=1, cost_ms=0.1)


def test_the_defaults_confirm_on_two_half_second_periods_and_release_after_ten() -> None:
    cfg = PolicyConfig(per_core_rate=1.0, rho=1.0)
    assert (cfg.period_s, cfg.trigger_periods, cfg.release_periods) == (0.5, 2, 10)


def test_one_period_out_of_the_band_does_not_trigger() -> None:
    """A single 0.5 s period at 3x the stable rate, then the stable rate: no share, no workers, ever."""
    policy = SpongePolicy(CONFIG)
    rates = [STABLE] * 4 + [3 * STABLE] + [STABLE] * 6
    decisions = [policy.decide(obs(i, r)) for i, r in enumerate(rates)]
    assert all((d.share, d.workers, d.trigger) == (0.0, 0, HOLD) for d in decisions)
    assert [d.periods_out for d in decisions[3:6]] == [0, 1, 0]  # seen, logged, and let go


@given(
    periods=st.integers(2, 5),
    blip=st.integers(1, 4),
    factor=st.floats(1.2, 20.0),
    backlog=st.integers(0, 20_000),
)
def test_fewer_consecutive_periods_than_trigger_periods_never_offload(periods, blip, factor, backlog) -> None:
    """Any run of out-of-band periods shorter than trigger_periods, however high, is ignored; the
    trigger_periods-th consecutive one fires."""
    policy = SpongePolicy(PolicyConfig(per_core_rate=10_000, rho=2.0, trigger_periods=periods))
    run = min(blip, periods - 1)
    rates = [STABLE] * 3 + [factor * STABLE] * run + [STABLE] * 3
    assert all(policy.decide(obs(i, r)).share == 0.0 for i, r in enumerate(rates))
    start = len(rates)
    decisions = [policy.decide(obs(start + i, factor * STABLE, backlog)) for i in range(periods)]
    assert all(d.trigger == HOLD and d.share == 0 for d in decisions[:-1])
    assert decisions[-1].trigger != HOLD and decisions[-1].share > 0
    assert decisions[-1].periods_out == periods


def test_one_trigger_period_fires_at_once() -> None:
    policy = SpongePolicy(PolicyConfig(per_core_rate=10_000, rho=2.0, trigger_periods=1))
    policy.decide(obs(0, STABLE))
    d = policy.decide(obs(1, 2 * STABLE))
    assert (d.trigger, d.periods_out) == (INPUT_RATE, 1) and d.share > 0


def _offloading(policy: SpongePolicy) -> int:
    """Drive `policy` into an offload; the index of the next observation."""
    for i in range(3):
        policy.decide(obs(i, 3 * STABLE))
    assert policy.share > 0
    return 3


def test_the_release_waits_for_release_periods_calm_periods_in_a_row() -> None:
    policy = SpongePolicy(CONFIG)
    start = _offloading(policy)
    share = policy.share
    decisions = [policy.decide(obs(start + i, 0.5 * STABLE)) for i in range(2 * CONFIG.release_periods)]
    n = CONFIG.release_periods
    assert all((d.trigger, d.share) == (HOLD, share) for d in decisions[: n - 1])
    assert decisions[n - 1].trigger in (RELEASE, SCALE_DOWN) and decisions[n - 1].share < share
    # Eq. 1's excess of the burst still asked for a share in the first round; the next calm hold ends it.
    assert (decisions[-1].trigger, decisions[-1].share, decisions[-1].workers) == (RELEASE, 0.0, 0)


@given(blip_at=st.integers(0, 8), seed=st.integers(0, 2**16))
def test_a_blip_during_the_calm_restarts_the_release_count(blip_at, seed) -> None:
    """An out-of-band period inside the calm is not calm: the count starts again after it."""
    policy = SpongePolicy(CONFIG)
    start = _offloading(policy)
    n = CONFIG.release_periods
    rng = random.Random(seed)
    rates = [rng.uniform(0.3, 1.0) * STABLE for _ in range(blip_at)] + [2 * STABLE]
    rates += [rng.uniform(0.3, 1.0) * STABLE for _ in range(n)]
    decisions = [policy.decide(obs(start + i, r)) for i, r in enumerate(rates)]
    released = [i for i, d in enumerate(decisions) if d.trigger in (RELEASE, SCALE_DOWN)]
    assert released and released[0] == blip_at + n  # the n-th calm period after the blip
    assert all(d.share > 0 for d in decisions[: blip_at + n])


@pytest.mark.parametrize(
    "knob, value",
    [
        ("trigger_periods", 0),
        ("release_periods", 0),
        ("trigger_periods", 1.5),
        ("period_s", 0.0),
        ("period_s", float("nan")),
        ("scale_down_hold_s", -1.0),
    ],
)
def test_bad_knobs_are_refused(knob, value) -> None:
    with pytest.raises(ConfigError, match=knob):
        PolicyConfig(per_core_rate=1.0, rho=1.0, **{knob: value})


def test_the_loop_observes_at_the_policys_period_unless_told_otherwise() -> None:
    policy = SpongePolicy(PolicyConfig(per_core_rate=1.0, rho=1.0, period_s=0.25))
    loop = PolicyLoop(monitor=None, policy=policy, apply=lambda d: None, log=None)  # type: ignore[arg-type]
    assert loop.interval_s == 0.25 and loop.recent_s == 0.25
    assert PolicyLoop(monitor=None, policy=None, apply=lambda d: None, log=None).interval_s == 1.0  # type: ignore[arg-type]
    assert (
        PolicyLoop(monitor=None, policy=policy, apply=lambda d: None, log=None, interval_s=2.0).interval_s
        == 2.0
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("pattern", ["sudden:5x:30s", "sudden:2x:30s"])
def test_the_simulated_reaction_stays_within_2_s_wherever_in_a_period_the_burst_begins(pattern) -> None:
    """Seeded onsets anywhere within a second: with two 0.5 s periods to confirm, the first routed record
    is processed within 2 s of the onset for Q1 and Q5."""
    rng = random.Random(7)
    for phase in [0.0, 0.45, *(round(rng.uniform(0, 1), 2) for _ in range(4))]:
        config = SimConfig(pattern=pattern, duration_s=120.0, lead_s=40.0 + phase)
        for query in ("q1", "q5"):
            [run] = simulate_query(query, ["sponge"], config).report["runs"]
            assert run["reaction_s"] is not None and run["reaction_s"] <= 2.0, (
                query,
                phase,
                run["reaction_s"],
            )


def test_one_second_periods_confirmed_twice_would_miss_the_bar() -> None:
    """Why the period is 0.5 s: the same confirmation on 1 s periods reacts in 2.1 s to a burst that
    begins on a period's boundary (the attempt that kept 1 s periods was reverted for this)."""
    config = SimConfig(
        pattern="sudden:5x:30s", duration_s=120.0, lead_s=40.0, policy={"period_s": 1.0, "trigger_periods": 2}
    )
    [run] = simulate_query("q1", ["sponge"], config).report["runs"]
    assert run["reaction_s"] > 2.0
