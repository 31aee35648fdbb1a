"""Tests of bench/cold_start.py: its arguments, and one small real run on LocalStack whose JSON line has
cold starts slower than warm ones and each round on as many environments as it asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cold_start import parse_args

pytestmark = pytest.mark.solo

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(["--pool", "0"], "--pool"), (["--hold-s", "9"], "--hold-s"), (["--idle", "5,-1"], "--idle")],
)
def test_bad_arguments_are_refused(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert flag in capsys.readouterr().err


@pytest.mark.slow  # LocalStack
@pytest.mark.timeout(300)
def test_a_small_run_times_cold_and_warm_starts() -> None:
    argv = [sys.executable, "-m", "bench.cold_start", "--pool", "2", "--samples", "3", "--json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["cold_environments"] == 2 and report["warm_burst_environments"] == 2, report
    assert report["warm_burst_cold"] == 0 and report["warm_cold"] == 0
    assert report["cold_ms"]["p50"] > report["warm_ms"]["p50"] > 0
