"""Tests of bench/state.py: which batch's state counts, the ratios, the JSON line, one tiny real run."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import bench.state as state_bench
from bench.state import (
    keyed_operators,
    live_keys,
    operator_state,
    peak_state,
    query_figures,
    series,
)

ROOT = Path(__file__).resolve().parents[2]


def _hdfs(rows: int, memory: int) -> dict[str, Any]:
    return {
        "operatorName": "symmetricHashJoin",
        "numRowsTotal": rows,
        "memoryUsedBytes": memory,
        "numStateStoreInstances": 8,
        "customMetrics": {"stateOnCurrentVersionSizeBytes": memory // 2, "loadedMapCacheHitCount": 3},
    }


def _rocksdb(rows: int, sst: int, memory: int = 1_080_628) -> dict[str, Any]:
    return {
        "operatorName": "transformWithStateInPandasExec",
        "numRowsTotal": rows,
        "memoryUsedBytes": memory,
        "numStateStoreInstances": 2,
        "customMetrics": {"rocksdbSstFileSize": sst, "rocksdbGetCount": 55},
    }


def _batch(batch_id: int, rows_in: int, *ops: dict[str, Any]) -> dict[str, Any]:
    return {"batchId": batch_id, "numInputRows": rows_in, "stateOperators": list(ops)}


def test_an_operator_s_bytes_are_heap_for_the_hdfs_store_and_files_for_rocksdb() -> None:
    h = operator_state(_hdfs(100, 4_000))
    assert (h["store"], h["rows"], h["bytes"], h["current_version_bytes"]) == ("hdfs", 100, 4_000, 2_000)
    r = operator_state(_rocksdb(9, 75_000))
    # RocksDB's memoryUsedBytes is its native caches, not the state: kept aside, not the bytes.
    assert (r["store"], r["rows"], r["bytes"], r["memory_bytes"], r["sst_bytes"]) == (
        "rocksdb",
        9,
        75_000,
        1_080_628,
        75_000,
    )


def test_the_peak_is_over_batches_that_read_data_summed_over_operators() -> None:
    progresses = [
        _batch(0, 20_000, _hdfs(10, 1_000), _rocksdb(2, 500)),
        _batch(1, 20_000, _hdfs(30, 3_000), _rocksdb(3, 900)),  # the peak: 3,900 bytes
        _batch(2, 1, _hdfs(20, 2_000), _rocksdb(3, 800)),  # the punctuation alone
        _batch(3, 0, _hdfs(1, 9_999_999), _rocksdb(1, 9_999_999)),  # closing epoch: not counted
    ]
    peak = peak_state(progresses)
    assert peak is not None
    assert (peak["batch"], peak["rows"], peak["bytes"]) == (1, 33, 3_900)
    assert peak["memory_bytes"] == 3_000 + 1_080_628
    assert [o["operator"] for o in peak["operators"]] == [
        "symmetricHashJoin",
        "transformWithStateInPandasExec",
    ]
    assert series(progresses)[:2] == [[0, 12, 1_500], [1, 33, 3_900]]
    assert peak_state([_batch(0, 20_000), _batch(1, 0)]) is None  # stateless


def _run(rows: int, size: int, heap: int) -> dict[str, Any]:
    progresses = [_batch(0, 1_000, _hdfs(rows // 2, size // 2)), _batch(1, 1_000, _hdfs(rows, size))]
    return {
        "events": 1_000,
        "wall_s": 1.0,
        "heap": {"peak_bytes": heap, "baseline_bytes": heap // 2},
        "batches": 2,
        "state": peak_state(progresses),
        "series": series(progresses),
        "keyed": [{"keys_are": "joined records", "bytes": size, "keys": rows, "bytes_per_key": size / rows}],
    }


def test_growth_and_bytes_per_key_of_a_keyed_query() -> None:
    fig = query_figures("q3", _run(1_000, 500_000, 90), _run(10_000, 4_000_000, 120))
    assert fig["kind"] == "keyed"
    assert (fig["state_bytes_T"], fig["state_bytes_10T"]) == (500_000, 4_000_000)
    assert fig["state_growth_10x"] == pytest.approx(8.0)
    (per_key,) = fig["bytes_per_key"]
    assert (per_key["keys_T"], per_key["keys_10T"]) == (1_000, 10_000)
    assert (per_key["bytes_per_key_T"], per_key["bytes_per_key_10T"]) == (500.0, 400.0)
    assert per_key["ratio"] == fig["bytes_per_key_ratio"] == pytest.approx(0.8)
    assert fig["peak_heap_bytes"] == 120
    assert fig["operators_10T"][0]["rows"] == 10_000
    assert "state" not in fig["run_T"] and fig["run_T"]["series"] == [[0, 500, 250_000], [1, 1_000, 500_000]]


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _us(seconds: float) -> int:
    return round(_at(seconds).timestamp() * 1_000_000)


def test_live_keys_of_q4_and_q6_follow_the_auctions_lives() -> None:
    # auction 1 (seller 7) closes at 10 s with a winner; 2 (seller 7) at 10.0005 s, i.e. at 10.001 s to
    # the ms, with a winner; 3 (seller 8) at 5 s without a valid bid; 4 (seller 9) opens after the batch.
    auction = pa.table({
        "id": [1, 2, 3, 4],
        "seller": [7, 7, 8, 9],
        "category": [1, 1, 1, 1],
        "reserve": [10, 10, 10, 10],
        "date_time": [_at(0), _at(1), _at(2), _at(30)],
        "expires": [_at(10), _at(10.0005), _at(5), _at(40)],
    })  # fmt: skip
    bid = pa.table({
        "auction": [1, 2, 3],
        "price": [50, 20, 5],  # auction 3's is below its reserve
        "date_time": [_at(3), _at(4), _at(4)],
    })  # fmt: skip
    tables = {"auction": auction, "bid": bid}
    state = {"rows": 2, "watermark_us": _us(10), "max_event_us": _us(20)}
    assert live_keys("q4", tables, state) == {"open auctions": 1}  # 2; 1 and 3 closed, 4 not seen yet
    assert live_keys("q6", tables, state) == {"open auctions": 1, "sellers": 1}  # 7: auction 1 decided
    later = {**state, "watermark_us": _us(10.001)}
    assert live_keys("q6", tables, later) == {"open auctions": 0, "sellers": 1}  # 7 counted once
    assert live_keys("q3", tables, state) == {"joined records": 2}  # Spark's join: a row per record
    assert live_keys("q4", tables, {**state, "watermark_us": None}) is None


def test_each_keyed_operator_gets_its_own_keys_in_the_progress_order() -> None:
    # Q6's progress lists the per-seller operator (nearer the sink) first, then the winners' one.
    state = peak_state([_batch(0, 10, _rocksdb(2, 9_000), _rocksdb(6, 280_000))])
    assert state is not None
    ops = keyed_operators("q6", state, {"open auctions": 1_400, "sellers": 300})
    assert [(o["keys_are"], o["bytes"], o["keys"], o["bytes_per_key"]) for o in ops] == [
        ("sellers", 9_000, 300, 30.0),
        ("open auctions", 280_000, 1_400, 200.0),
    ]


def test_windowed_and_stateless_queries_have_no_bytes_per_key() -> None:
    fig = query_figures("q5", _run(8, 60_000, 90), _run(8, 66_000, 90))
    assert fig["kind"] == "windowed" and fig["state_growth_10x"] == pytest.approx(1.1)
    assert "bytes_per_key" not in fig
    empty = {"events": 1, "wall_s": 1.0, "heap": {"peak_bytes": 5}, "batches": 2, "state": None, "series": []}
    fig = query_figures("q0", empty, {**empty, "error": "boom"})
    assert fig["kind"] == "stateless"
    assert (fig["state_bytes_T"], fig["state_growth_10x"]) == (None, None)
    assert fig["error"] == "10T: boom"


def test_json_mode_ends_stdout_with_one_json_object(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    report = {
        "method": "m",
        "rate": 2_000.0,
        "seconds": 50.0,
        "scale": 10,
        "batch_seconds": 10.0,
        "elapsed_s": 1.0,
        "queries": [
            query_figures("q3", _run(1_000, 500_000, 90), _run(10_000, 4_000_000, 120)),
            {
                **query_figures("q5", _run(8, 60_000, 90), _run(8, 60_000, 90)),
                "state_growth_10x": float("nan"),
            },
        ],
    }
    monkeypatch.setattr(state_bench, "run_bench", lambda args: report)
    assert state_bench.main(["--json", "--queries", "q3,q5"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    data = json.loads(last)
    assert [q["query"] for q in data["queries"]] == ["q3", "q5"]
    q3 = data["queries"][0]
    for key in (
        "state_bytes_T",
        "state_bytes_10T",
        "state_growth_10x",
        "peak_heap_bytes",
        "bytes_per_key_ratio",
    ):
        assert key in q3
    assert data["queries"][1]["state_growth_10x"] is None  # strict JSON: no NaN


@pytest.mark.spark
@pytest.mark.slow  # ~1.5 minutes: a JVM, Q5's Python state workers, 14 batches
def test_a_tiny_real_run_of_q5_reports_positive_state(tmp_path: Path) -> None:
    # A subprocess: the bench owns (and stops) its own session.
    cmd = [sys.executable, "-m", "bench.state", "--queries", "q5", "--rate", "1000", "--seconds", "10",
           "--batch-seconds", "10", "--json", "--work-dir", str(tmp_path / "work")]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    (q5,) = report["queries"]
    assert q5["query"] == "q5" and "error" not in q5
    assert q5["state_bytes_T"] > 0 and q5["state_bytes_10T"] > 0 and q5["state_rows_10T"] > 0
    assert q5["state_growth_10x"] > 0
    assert q5["peak_heap_bytes"] >= q5["run_10T"]["heap"]["baseline_bytes"] > 0
    assert q5["run_10T"]["batches"] > q5["run_T"]["batches"] >= 2
    assert "q5: start" in done.stderr and "q5: end" in done.stderr
