"""Tests of bench/transport.py: its arguments, and one small real run whose JSON line carries both
transports and their ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.transport import parse_args

ROOT = Path(__file__).resolve().parents[2]


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])
    assert "--rounds" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_small_run_prints_both_transports_and_their_ratio() -> None:
    argv = [sys.executable, "-m", "bench.transport", "--rounds", "5", "--repeats", "1", "--chunk-mb", "0.25"]
    done = subprocess.run(
        [*argv, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=280, check=True
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for transport in ("plaintext_ms", "tls_ms"):
        assert report[transport]["p99"] >= report[transport]["p50"] > 0
    assert report["p50_ratio_tls_vs_plaintext"] > 0 and report["p99_ratio_tls_vs_plaintext"] > 0
