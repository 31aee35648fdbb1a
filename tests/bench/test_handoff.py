"""Tests of bench/handoff.py: the synthetic state and records, the arguments, and one small real run
whose JSON line carries the ratio and whose strategies moved what they say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.handoff import NODE, QUERY, auctions, bids, parse_args, vm_state
from lambda_worker.keyed import KeyedProgram
from lambda_worker.program import ProgramSpec
from merge.keyed_groups import GROUP
from merge.winner import OPEN

ROOT = Path(__file__).resolve().parents[2]


def test_the_state_holds_every_key_open_and_the_bids_fall_on_those_keys() -> None:
    program = ProgramSpec(QUERY, (NODE,)).compile()
    assert isinstance(program, KeyedProgram)
    opened = vm_state(program, 500)[OPEN]
    assert opened is not None and sorted(opened["a_id"].to_list()) == list(range(500))
    table = bids(2_000, 500, 1_000.0, seed=3)
    keys = table["auction"].to_numpy()
    assert keys.min() >= 0 and keys.max() < 500 and len(np.unique(table[GROUP].to_numpy())) > 100
    times = table["date_time"].cast("int64").to_numpy()
    assert (np.diff(times) >= 0).all() and times[-1] - times[0] == 1_999 * 1_000  # 1,000/s in µs
    assert auctions(3)["id"].to_pylist() == [0, 1, 2]


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--keys", "0"])
    assert "--keys" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_small_run_prints_every_strategy_and_the_ratio() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.handoff",
            "--keys",
            "5000",
            "--seconds",
            "1",
            "--rate",
            "2000",
            "--round-keys",
            "500",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    runs = {r["fetch"]: r for r in report["runs"]}
    assert set(runs) == {"vm-only", "all-at-once", "lazy", "progressive"}
    assert report["p99_ratio_lazy_vs_all_at_once"] > 0 and report["p99_ratio_lazy_vs_vm_only"] > 0
    alone = runs.pop("vm-only")
    assert alone["keys_left_on_vm"] == 5_000 and "keys_fetched" not in alone  # no agent: nothing moved
    whole, lazy, rounds = runs["all-at-once"], runs["lazy"], runs["progressive"]
    assert whole["keys_fetched"] == 5_000 and whole["keys_left_on_vm"] == 0  # the whole state moved
    assert 0 < lazy["keys_fetched"] < 5_000  # only keys some bid named
    assert rounds["keys_fetched"] > lazy["keys_fetched"]  # and rounds of 500 more per batch
    # A key is in one place: what did not move is still on the VM (no auction closes in the run).
    assert all(r["keys_fetched"] + r["keys_left_on_vm"] == 5_000 for r in (lazy, rounds))
    assert all(r["records"] == 2_000 and r["p99_s"] >= r["p50_s"] > 0 for r in runs.values())
