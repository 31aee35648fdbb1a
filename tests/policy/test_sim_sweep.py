"""`python -m policy.sim.sweep`: settings of the policy's knobs side by side on the same simulated trace."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from policy.sim.experiment import SimConfig, policy_config, simulate_query
from policy.sim.sweep import main, parse_setting, sweep


def test_a_setting_is_typed_by_its_field_and_an_unknown_one_is_refused() -> None:
    assert parse_setting("period_s=1,trigger_periods=2,worker_sizing=eq3") == {
        "period_s": 1.0,
        "trigger_periods": 2,
        "worker_sizing": "eq3",
    }
    assert parse_setting("") == {}
    with pytest.raises(ConfigError, match="bad setting"):
        parse_setting("trigger_period=2")
    with pytest.raises(ConfigError, match="bad setting"):
        parse_setting("trigger_periods")


def test_the_simulation_refuses_to_override_what_the_profile_measures() -> None:
    with pytest.raises(ConfigError, match="rho"):
        SimConfig(policy={"rho": 1.0})
    config = SimConfig(policy={"trigger_periods": 3})
    assert policy_config(simulate_query("q1", ["sponge"], config).profile, config).trigger_periods == 3


def test_each_setting_gets_its_own_row_and_the_confirmation_shows_in_the_reaction(capsys) -> None:
    rows = sweep(
        [{"trigger_periods": 1}, {"trigger_periods": 4}], ["sudden:5x:20s"], ["q1"], duration_s=100.0
    )
    assert [r["setting"] for r in rows] == ["trigger_periods=1", "trigger_periods=4"]
    fast, slow = (r["reaction_s"] for r in rows)
    assert slow == pytest.approx(fast + 3 * 0.5)  # three more 0.5 s periods to confirm
    main(["--set", "", "--pattern", "sudden:5x:20s", "--query", "q1", "--duration", "100"])
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("| setting |") and "| defaults | sudden:5x:20s |" in out
