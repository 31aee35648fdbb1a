"""`sponge status --run DIR` reads a run from its files: live, ended, without --policy, or not a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import InputError
from core.run_output import MARKER
from core.run_status import DECISIONS, LATEST, POLICY_DIR, STATUS_DIR, last_decisions, read_status, render


def make_run(root: Path, latest: dict | None = None, summary: dict | None = None) -> Path:
    root.mkdir()
    (root / MARKER).write_text(
        json.dumps({"query": "q1", "started": "2026-01-01 10:00:00 UTC", "identity": {}})
    )
    if latest is not None:
        (root / STATUS_DIR).mkdir()
        (root / STATUS_DIR / LATEST).write_text(json.dumps(latest))
    if summary is not None:
        (root / "summary.json").write_text(json.dumps(summary))
    return root


LIVE = {
    "at": 1000.0,
    "state": "running",
    "policy": "sponge",
    "t": 12.0,
    "input_rate": 150000.0,
    "processed_rate": 90000.0,
    "backlog": 400000,
    "queue_delay_s": 2.7,
    "cpu": 0.93,
    "load": 0.93,
    "vm_cores": 2,
    "epoch_s": 1.3,
    "share": 0.5,
    "workers": 2,
    "workers_connected": 1,
    "records_offloaded": 5000,
    "trigger": "queue-delay",
    "last_fired": "queue-delay",
    "last_fired_t": 12.0,
}


def write_log(run: Path, triggers: list[str]) -> None:
    (run / POLICY_DIR).mkdir(exist_ok=True)
    lines = [json.dumps({"config": {}, "started": "x"})]
    lines += [
        json.dumps(
            {
                "observation": {},
                "decision": {
                    "t": float(i),
                    "trigger": trig,
                    "share": 0.1 * i,
                    "workers": 1,
                    "required_rate": 10.0,
                },
            }
        )
        for i, trig in enumerate(triggers)
    ]
    (run / POLICY_DIR / DECISIONS).write_text("\n".join(lines) + "\n" + '{"observation": {}, "deci')  # torn


def test_a_live_run_shows_its_figures_and_last_decisions(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", latest=LIVE)
    write_log(run, ["hold", "queue-delay", "hold", "input-rate", "release"])
    status = read_status(run, decisions=2, now=1001.0)
    assert status["state"] == "running" and status["live"]["backlog"] == 400000
    assert [d["trigger"] for d in status["decisions"]] == ["input-rate", "release"]
    text = "\n".join(render(status))
    assert "q1" in text and "running" in text and "backlog 400,000 records" in text
    assert "share 50%" in text and "1 connected" in text and "last fired: queue-delay" in text


def test_a_run_whose_figures_stopped_updating_says_so(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", latest=LIVE)
    assert read_status(run, now=1000.0 + 60)["state"] == "not updating"


def test_an_ended_run_shows_its_summary_and_policy(tmp_path: Path) -> None:
    summary = {
        "records_in": 100,
        "wall_s": 3.5,
        "records_offloaded": 40,
        "epochs": 4,
        "stopped": False,
        "policy": {
            "name": "sponge",
            "plans_published": 3,
            "max_share": 0.5,
            "offloaded_s": 4.0,
            "triggers": {"hold": 3},
        },
    }
    run = make_run(tmp_path / "run", latest={**LIVE, "state": "stopped"}, summary=summary)
    status = read_status(run, now=5000.0)
    assert status["state"] == "ended"
    text = "\n".join(render(status))
    assert "summary: 100 records" in text and "policy sponge: 3 plans" in text


def test_a_run_without_policy_has_no_live_figures_and_says_why(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", summary={"records_in": 1, "stopped": True})
    status = read_status(run)
    assert status["state"] == "stopped" and status["live"] is None and status["decisions"] == []
    assert any("started without --policy" in line for line in render(status))


def test_a_directory_that_is_not_a_run_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=f"no {MARKER}"):
        read_status(tmp_path)
    with pytest.raises(InputError, match="is not a directory"):
        read_status(tmp_path / "nothing")


def test_last_decisions_reads_only_the_end_of_a_long_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.run_status.TAIL_BYTES", 1000)  # the first line read is cut: skipped
    run = make_run(tmp_path / "run")
    write_log(run, ["queue-delay"] * 50 + ["release"])
    found = last_decisions(run / POLICY_DIR / DECISIONS, 3)
    assert [d["trigger"] for d in found] == ["queue-delay", "queue-delay", "release"]
    assert found[-1]["t"] == 50.0
