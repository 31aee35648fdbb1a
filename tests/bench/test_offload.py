"""Tests of bench/offload.py: its unit arithmetic, the worker rig on a real fleet, one tiny full run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.offload_figures import summarize_query
from bench.offload_rigs import (
    BID_SHARE,
    PROGRAMS,
    VmRun,
    WorkerRig,
    WorkerRun,
    bid_chunks,
    vm_batch_events,
)

ROOT = Path(__file__).resolve().parents[2]


def test_bids_are_46_of_every_50_events() -> None:
    assert BID_SHARE == 46 / 50


def test_small_vm_runs_get_smaller_batches_so_four_are_measured() -> None:
    assert vm_batch_events(1_000_000, 200_000) == 200_000
    assert vm_batch_events(20_000, 200_000) == 4_000


def test_rho_is_the_ratio_of_the_median_bid_rates() -> None:
    vm = [VmRun(1000, 1, 4, 1.0, eps) for eps in (100_000.0, 300_000.0, 200_000.0)]
    worker = [WorkerRun(1000, 1, 1.0, 0.5, 0.9, bps, 0) for bps in (460_000.0, 920_000.0, 1_840_000.0)]
    s = summarize_query(vm, worker, [1.0], "checked")
    assert s["vm_bids_per_s"] == pytest.approx(200_000 * 46 / 50)
    assert s["rho"] == pytest.approx(920_000 / (200_000 * 46 / 50))
    assert s["rho_per_round"] == pytest.approx([5.0, 920_000 / 276_000, 10.0])
    assert s["worker_busy"] == pytest.approx(0.5)
    assert s["worker_bids_per_cpu_s"] == pytest.approx(2000.0)


@pytest.mark.slow  # an embedded worker process
def test_worker_rig_runs_every_chunk_on_its_one_worker_and_checks_it(tmp_path: Path) -> None:
    # Real processes, real gRPC: one embedded worker on the last allowed core.
    chunks = bid_chunks(seed=1, events=20_000, chunk_rows=4_096)
    with WorkerRig(sorted(os.sched_getaffinity(0))[-1], tmp_path / "workers.log") as rig:
        rig.prewarm([PROGRAMS["q5"]])
        assert rig.check(PROGRAMS["q5"], chunks) == "checked"
        run = rig.run(PROGRAMS["q5"], chunks, in_flight=3)
    assert (run.rows, run.chunks) == (18_400, len(chunks))
    assert run.bids_per_s > 0 and run.wall_s > 0
    assert run.redispatches == 0


@pytest.mark.spark
@pytest.mark.slow
def test_bench_runs_end_to_end_and_reports_rho_for_both_queries(tmp_path: Path) -> None:
    # A subprocess: the bench pins its own process to one core and owns its Spark session.
    out = tmp_path / "offload.json"
    cmd = [sys.executable, "-m", "bench.offload", "--events", "20000", "--worker-events", "50000",
           "--rounds", "1", "--dispatch-rounds", "20", "--json", str(out), "--work-dir", str(tmp_path / "w")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "rho" in done.stdout
    report = json.loads(out.read_text())
    assert set(report["queries"]) == {"q1", "q5"}
    for q, s in report["queries"].items():
        assert s["check"] == "checked", q
        for key in ("vm_events_per_s", "vm_bids_per_s", "worker_bids_per_s", "rho"):
            assert math.isfinite(s[key]) and s[key] > 0, (q, key, s[key])
        assert s["rho"] == pytest.approx(s["worker_bids_per_s"] / s["vm_bids_per_s"])
        assert all(r["batches"] >= 4 for r in s["runs"]["vm"])
    d = report["dispatch"]
    for key in ("offload_p50_ms", "offload_p99_ms", "worker_start_cold_s", "worker_start_warm_s"):
        assert math.isfinite(d[key]) and d[key] > 0, (key, d[key])
    assert d["offload_p99_ms"] >= d["offload_p50_ms"]
