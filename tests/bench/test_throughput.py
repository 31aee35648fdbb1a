"""Smoke tests of bench/throughput.py: its steady-state arithmetic, and one tiny end-to-end run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.throughput import normalized
from bench.throughput_variants import steady_state

ROOT = Path(__file__).resolve().parents[2]


def _batch(batch_id: int, start: int | None, end: int, ms: int) -> dict:
    offset = "null" if start is None else json.dumps({"event": start})
    return {
        "batchId": batch_id,
        "durationMs": {"triggerExecution": ms, "addBatch": ms - 10},
        "sources": [{"startOffset": offset, "endOffset": json.dumps({"event": end})}],
    }


def test_steady_state_leaves_out_the_first_batch_and_the_event_free_tail() -> None:
    progress = [
        _batch(0, None, 100, 5_000),  # warm-up
        _batch(1, 100, 200, 100),
        _batch(2, 200, 300, 300),
        _batch(3, 300, 301, 50),  # only the end-of-stream punctuation (offset 300)
        _batch(4, 301, 301, 70),  # the no-data batch that closes the last windows
    ]
    m = steady_state(progress, events=300, wall_s=6.0)
    assert (m.events, m.ms, m.batches, m.batch_ms) == (200, 400, 2, [100, 300])
    assert m.events_per_s == pytest.approx(500.0)


def test_plans_that_differ_only_in_ids_compare_equal() -> None:
    plan = "Exchange hashpartitioning(window#{}-T0ms, 1), [plan_id={}] lambda x_{}#{} runId = {}"
    a = plan.format(12, 40, 3, 7, "0a1b2c3d-0000-0000-0000-000000000000")
    b = plan.format(99, 77, 9, 8, "ffffffff-1111-2222-3333-444444444444")
    assert normalized(a) == normalized(b)
    assert normalized(a) != normalized(a.replace("window", "auction"))


@pytest.mark.spark
@pytest.mark.slow
def test_bench_runs_end_to_end_and_checks_the_native_baseline(tmp_path: Path) -> None:
    # A subprocess: the bench owns (and stops) its own local[1] session.
    out = tmp_path / "throughput.json"
    cmd = [sys.executable, "-m", "bench.throughput", "--queries", "q2", "--events", "50000",
           "--batch-events", "10000", "--repeats", "1", "--check-events", "10000",
           "--json", str(out), "--work-dir", str(tmp_path / "work")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    q2 = report["queries"]["q2"]
    assert q2["check"] == "checked"
    assert q2["same_physical_plan"] == {"a_vs_b": True, "a_vs_c": True}
    assert all(run["batches"] >= 4 for runs in q2["runs"].values() for run in runs)
