"""A malformed decision log: reading or replaying it stops with an InputError that names the file, the line
and what to do, never a JSON decoder's or a dataclass's traceback; the log itself is left as it was.

The logs are written as a drill writes them (DecisionLog, one JSON line per decision after the config),
then damaged the ways a file is: cut short by a killed drill, a line edited by hand, another file passed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.errors import InputError
from policy.decision_log import DecisionLog, read, read_vms, replay, replay_vms
from policy.monitor import Observation
from policy.offload_policy import PolicyConfig, SpongePolicy
from tests.policy.test_persistent_burst import PER_CORE, decision, make_rule
from tests.policy.test_persistent_burst import obs as vm_obs

CONFIG = PolicyConfig(per_core_rate=10_000, rho=2.0, deadline_s=2.0, max_workers=8, headroom=1.0)
READERS: dict[str, Callable[[Path], Any]] = {"read": read, "replay": replay}
VM_READERS: dict[str, Callable[[Path], Any]] = {"read_vms": read_vms, "replay_vms": replay_vms}


def _policy_log(path: Path) -> list[str]:
    policy, log = SpongePolicy(CONFIG), DecisionLog(path, CONFIG)
    for t, rate in enumerate([7_000] * 3 + [14_000] * 3):
        o = Observation(t, min(1.0, 0.7 * rate / 7_000), rate, rate, 0, 1.0, vm_cores=1, cost_ms=0.1)
        log.record(o, policy.decide(o))
    log.close()
    return path.read_text().splitlines()


def _vm_log(path: Path) -> list[str]:
    rule = make_rule()
    log = DecisionLog(path, PolicyConfig(per_core_rate=PER_CORE, rho=0.4), vm_rule=rule)
    for t in range(4):
        o, d = vm_obs(t, 140_000.0), decision(t, 0.0, 0)
        log.record(o, d, vms_usable=5, vms_pending=0, vm_request=rule.step(o, d, 5, 0))
    log.close()
    return path.read_text().splitlines()


def _edit(line: str, change: Callable[[dict[str, Any]], None]) -> str:
    entry = json.loads(line)
    change(entry)
    return json.dumps(entry)


def _damaged(lines: list[str]) -> dict[str, tuple[str, str]]:
    """name: (the damaged log's text, what the error must say)."""
    last = len(lines)
    return {
        "cut mid-line": ("\n".join([*lines[:-1], lines[-1][:25]]), f"line {last} is not JSON"),
        "empty": ("", "is not a decision log"),
        "no config line": ("\n".join(lines[1:]), "is not a decision log"),
        "a list": ("\n".join([lines[0], "[1, 2]"]), "line 2 is a JSON list, not an object"),
        "unknown config field": (
            "\n".join([_edit(lines[0], lambda e: e["config"].update(bogus=1)), *lines[1:]]),
            "line 1 is not a decision log entry",
        ),
        "no observation": (
            "\n".join([lines[0], _edit(lines[1], lambda e: e.pop("observation")), *lines[2:]]),
            "line 2 lacks 'observation'",
        ),
        "observation not an object": (
            "\n".join([lines[0], lines[1], _edit(lines[2], lambda e: e.update(observation=3)), *lines[3:]]),
            "line 3 is not a decision log entry",
        ),
    }


@pytest.mark.parametrize("reader", list(READERS))
def test_a_whole_log_reads_and_replays(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "output-decisions.jsonl"
    lines = _policy_log(path)
    assert len(READERS[reader](path)[1 if reader == "read" else 0]) >= 1
    assert len(read(path)[1]) == len(lines) - 1


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize(
    "case",
    [
        "cut mid-line",
        "empty",
        "no config line",
        "a list",
        "unknown config field",
        "no observation",
        "observation not an object",
    ],
)
def test_a_malformed_decision_log_names_the_file_and_line(tmp_path: Path, reader: str, case: str) -> None:
    path = tmp_path / "output-decisions.jsonl"
    text, says = _damaged(_policy_log(path))[case]
    path.write_text(text)
    with pytest.raises(InputError) as info:
        READERS[reader](path)
    assert str(path) in info.value.message and says in info.value.message, info.value.message
    assert "run the drill again" in info.value.hint
    assert info.value.__cause__ is None and (
        info.value.__context__ is None or info.value.__suppress_context__
    )
    assert path.read_text() == text


@pytest.mark.parametrize("reader", list(VM_READERS))
def test_a_malformed_vm_log_names_the_file_and_line(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "output-decisions.jsonl"
    lines = _vm_log(path)
    assert len(VM_READERS[reader](path)) > 0  # whole, it reads
    damaged = {
        "no usable count": (
            "\n".join([lines[0], _edit(lines[1], lambda e: e["vm"].pop("usable")), *lines[2:]]),
            "line 2 lacks 'usable'",
        ),
        "bad rule settings": (
            "\n".join([_edit(lines[0], lambda e: e["vm_rule"].update(config=[])), *lines[1:]]),
            "line 1 is not a decision log entry",
        ),
        "cut mid-line": ("\n".join([*lines[:-1], lines[-1][:40]]), f"line {len(lines)} is not JSON"),
    }
    for text, says in damaged.values():
        path.write_text(text)
        with pytest.raises(InputError) as info:
            VM_READERS[reader](path)
        assert str(path) in info.value.message and says in info.value.message, info.value.message


def test_a_log_without_the_vm_rule_says_whose_log_to_read(tmp_path: Path) -> None:
    path = tmp_path / "output-decisions.jsonl"
    _policy_log(path)
    with pytest.raises(InputError, match="holds no persistent-burst rule settings") as info:
        replay_vms(path)
    assert "vmbase" in info.value.hint


def test_a_missing_log_says_where_a_drill_writes_one(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no decision log at") as info:
        replay(tmp_path / "nowhere.jsonl")
    assert "output-decisions.jsonl" in info.value.hint
