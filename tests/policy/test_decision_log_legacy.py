"""A decision log outlives the policy that wrote it: one written before the policy counted periods (its
header names no trigger_periods, its decisions no periods_out) replays with the behaviour it was written
with, and one written now replays exactly, the new fields included.

`data/decisions-before-trigger-periods.jsonl` was written by the policy as it was before, on a trace with
a one-second blip at t = 3 s that it offloaded at once; today's defaults would not.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

import pytest

from policy.decision_log import LEGACY, DecisionLog, config_of, read, replay
from policy.monitor import Observation
from policy.offload_policy import HOLD, INPUT_RATE, PolicyConfig, SpongePolicy

BEFORE = Path(__file__).parent / "data" / "decisions-before-trigger-periods.jsonl"


def test_a_log_from_before_replays_with_one_period_triggers() -> None:
    header = json.loads(BEFORE.read_text().splitlines()[0])["config"]
    assert "trigger_periods" not in header  # the premise: written before the knob existed
    config, steps = read(BEFORE)
    assert (config.trigger_periods, config.period_s, config.release_periods) == (1, 1.0, 1)
    assert config.worker_sizing == "eq3" and config.scale_down_hold_s == 5.0
    pairs = replay(BEFORE)
    assert len(pairs) == len(steps) == 27
    assert all(logged == again for logged, again in pairs)
    blip = next(d for _, d in steps if d.t == pytest.approx(3.002))
    assert (blip.trigger, blip.share > 0) == (INPUT_RATE, True)  # the old behaviour, reproduced


def test_the_same_observations_under_todays_defaults_ignore_the_blip() -> None:
    """What makes the test above mean something: a replay that used today's defaults would differ."""
    config, steps = read(BEFORE)
    today = SpongePolicy(PolicyConfig(**{**asdict(config), "trigger_periods": 2}))
    decisions = [today.decide(obs) for obs, _ in steps]
    blip = next(d for d in decisions if d.t == pytest.approx(3.002))
    assert (blip.trigger, blip.share, blip.periods_out) == (HOLD, 0.0, 1)
    assert any(d.share > 0 for d in decisions)  # the 8 s burst is still offloaded


def test_a_header_without_the_new_knobs_takes_their_old_values_and_one_with_them_keeps_its_own() -> None:
    base = {"per_core_rate": 1000.0, "rho": 2.0}
    assert {k: getattr(config_of(base), k) for k in LEGACY} == LEGACY
    assert config_of({**base, "trigger_periods": 3}).trigger_periods == 3
    assert config_of({**base, "trigger_periods": 3}).period_s == LEGACY["period_s"]


def _loads(rng: random.Random) -> tuple[tuple[str, float], ...] | None:
    if rng.random() < 0.3:
        return None
    return tuple((f"op{i}", round(rng.uniform(0, 1), 3)) for i in range(rng.randint(1, 5)))


@pytest.mark.parametrize("seed", range(5))
def test_a_log_written_now_replays_exactly_with_its_new_fields(tmp_path: Path, seed: int) -> None:
    """Seeded random traces (bursts, blips, operator loads): every logged decision, periods_out,
    priority and skew included, is what a fresh policy decides on the logged observations."""
    rng = random.Random(seed)
    config = PolicyConfig(per_core_rate=10_000, rho=2.0, trigger_periods=rng.randint(1, 3))
    path = tmp_path / "decisions.jsonl"
    policy, log = SpongePolicy(config), DecisionLog(path, config)
    backlog = 0
    for i in range(80):
        rate = rng.choice([7_000, 7_000, 7_000, 12_000, 20_000])
        backlog = max(0, backlog + int(rate * (1 - policy.share) - 7_500) // 2)
        o = Observation(
            i * config.period_s, 0.7, rate, 7_000, backlog, 1.0, 1, 0.1, operator_loads=_loads(rng)
        )
        log.record(o, policy.decide(o))
    log.close()
    pairs = replay(path)
    assert len(pairs) == 80 and all(logged == again for logged, again in pairs)
    logged = [d for d, _ in pairs]
    assert any(d.priority for d in logged) and any(d.periods_out > 1 for d in logged)
    header = json.loads(path.read_text().splitlines()[0])["config"]
    assert header["trigger_periods"] == config.trigger_periods  # a new log names its knobs


def test_a_decision_that_differs_in_a_new_field_is_caught(tmp_path: Path) -> None:
    """The new fields are compared when the log holds them: an edited priority shows in the replay."""
    config = PolicyConfig(per_core_rate=10_000, rho=2.0)
    path = tmp_path / "decisions.jsonl"
    policy, log = SpongePolicy(config), DecisionLog(path, config)
    o = Observation(
        0.0, 0.7, 7_000, 7_000, 0, 1.0, 1, 0.1, operator_loads=(("a", 0.9), ("b", 0.1), ("c", 0.1))
    )
    log.record(o, policy.decide(o))
    log.close()
    entry = json.loads(path.read_text().splitlines()[1])
    assert entry["decision"]["priority"] == ["a", "b", "c"]
    entry["decision"]["priority"] = ["b", "a", "c"]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], json.dumps(entry)]) + "\n")
    [(logged, again)] = replay(path)
    assert logged != again and again.priority == ("a", "b", "c")
