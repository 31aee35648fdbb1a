"""`sponge status --run DIR` prints a run's figures from its files (the reading itself:
tests/core/test_run_status.py); --json prints them as one JSON object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.cli.main import main
from core.run_output import MARKER
from core.run_status import LATEST, STATUS_DIR


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / STATUS_DIR).mkdir(parents=True)
    (run / MARKER).write_text(json.dumps({"query": "q5", "started": "then", "identity": {}}))
    latest = {"at": 1.0, "state": "stopped", "policy": "noscaling", "t": 30.0, "backlog": 42, "share": 0.0}
    (run / STATUS_DIR / LATEST).write_text(json.dumps(latest))
    return run


def status(*args: str) -> int:
    try:
        main(["status", *args])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0


def test_status_run_prints_the_run(run_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert status("--run", str(run_dir)) == 0
    text = capsys.readouterr().out
    assert f"run {run_dir}: q5" in text and "backlog 42 records" in text and "policy noscaling" in text


def test_status_run_json_is_one_object(run_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert status("--run", str(run_dir), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["query"] == "q5" and report["live"]["backlog"] == 42 and report["state"] == "stopped"
