"""`--inject` specs: every documented example parses, prints back the same, and typos are refused."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from core.fault_spec import EXAMPLES, KINDS, TRIGGERS, FaultSpec, Triggers, parse_duration


@pytest.mark.parametrize("text", EXAMPLES)
def test_examples_parse_and_round_trip(text: str) -> None:
    spec = FaultSpec.parse(text)
    assert FaultSpec.parse(spec.text()) == spec
    names = set(dict(spec.params))
    triggers = names & set(TRIGGERS.get(spec.kind, ()))
    assert names - triggers == set(KINDS[spec.kind])
    assert len(triggers) == (1 if spec.kind in TRIGGERS else 0)


def test_event_triggers_are_whole_numbers() -> None:
    assert FaultSpec.parse("query-restart:after-epoch=5")["after-epoch"] == 5
    assert FaultSpec.parse("kill-worker:after-chunks=0").text() == "kill-worker:after-chunks=0"
    assert FaultSpec.parse("agent-restart:at=3s").get("after-epoch") is None


def test_values_are_seconds_and_fractions() -> None:
    spec = FaultSpec.parse("slow-worker:share=0.1,delay=1.5m")
    assert spec["share"] == 0.1 and spec["delay"] == 90.0
    assert FaultSpec.parse("slow-worker:share=0.1")["delay"] == 30.0  # the documented default
    assert parse_duration("500ms") == 0.5 and parse_duration("2") == 2.0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("boom:every=1s", "unknown fault kind"),
        ("kill-worker", "lacks every= or after-chunks="),
        ("query-restart:at=1s,after-epoch=2", "takes only one of at= or after-epoch="),
        ("agent-restart:after-epoch=1.5", "not a whole number"),
        ("agent-restart:after-epoch=-1", "not a whole number"),
        ("throttle", "lacks share="),
        ("kill-worker:every=0s", "must be positive"),
        ("kill-worker:every=soon", "not a duration"),
        ("throttle:share=1.2", "not in [0, 1]"),
        ("throttle:share=0.1,every=1s", "not a parameter of throttle"),
        ("task-failure:share", "not a parameter"),
    ],
)
def test_bad_specs_say_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        FaultSpec.parse(text)
    assert needle in e.value.one_line()


def test_triggers_fire_once_each_at_their_time_or_epoch() -> None:
    specs = [
        FaultSpec.parse(t) for t in ("driver-kill:at=5s", "driver-kill:after-epoch=2", "kill-worker:every=1s")
    ]
    triggers = Triggers.of(specs, "driver-kill")
    assert (triggers.at, triggers.after_epochs) == ([5.0], [2])
    assert not triggers.due(elapsed_s=1.0, committed_epoch=1)
    assert triggers.due(elapsed_s=1.0, committed_epoch=3)  # the epoch trigger, spent
    assert not triggers.due(elapsed_s=4.9, committed_epoch=9)
    assert triggers.due(elapsed_s=5.0, committed_epoch=9)
    assert not triggers.due(elapsed_s=60.0, committed_epoch=99)
