"""Every micro-batch's progress reaches the run exactly once, however many batches run: more than
`recentProgress` keeps (spark.sql.streaming.numRecentProgressUpdates, lowered here from its 100 so the
test runs fewer batches), and while the run's own thread is slow to look."""

from __future__ import annotations

import json
import time
from pathlib import Path

from core.nexmark.generator import GeneratorConfig
from core.nexmark.schedule import RateSchedule
from core.spark.runner import RunConfig, run_query

KEPT = 10  # the progress updates Spark keeps
BATCHES = 25
PER_BATCH = 25


def last_committed(checkpoint: Path) -> int:
    """Spark may keep only the newest commit files; their numbers run on from batch 0."""
    return max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())


def _committed(checkpoint: Path) -> int:
    """The last committed batch while the query runs, -1 before the first commit."""
    try:
        return last_committed(checkpoint)
    except (FileNotFoundError, ValueError):
        return -1


def test_each_of_more_batches_than_spark_keeps_progress_of_is_seen_once(spark, tmp_path: Path) -> None:
    seen: list[int] = []
    offsets: list[str | None] = []
    held: list[int] = []  # the batch id that had committed when the slow hook let go

    def slow_hook(progress: dict) -> None:
        seen.append(progress["batchId"])
        offsets.extend(o for s in progress["sources"] for o in (s["startOffset"], s["endOffset"]))
        if len(seen) == 3:
            # Hold the run's thread until ten more batches have committed: their progress queues up
            # meanwhile, and none of it may be lost. A bounded wait: it ends when they have.
            deadline = time.monotonic() + 120
            while (done := _committed(tmp_path / "out" / "_checkpoint")) < progress["batchId"] + 10:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            held.append(done)

    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(KEPT))
    gen = GeneratorConfig(seed=7, events=BATCHES * PER_BATCH, schedule=RateSchedule.constant(100_000))
    config = RunConfig(query="q0", generator=gen, output=tmp_path / "out", max_events_per_batch=PER_BATCH)
    try:
        summary = run_query(config, progress=slow_hook)
    finally:
        spark.conf.unset("spark.sql.streaming.numRecentProgressUpdates")

    assert held and held[0] >= seen[2] + 10, held  # the hook held on while batches went on
    assert len(seen) > KEPT + 10
    assert len(seen) == len(set(seen)), "a batch's progress was seen twice"
    assert set(seen) == set(range(last_committed(tmp_path / "out" / "_checkpoint") + 1))
    assert summary["epochs"] == len(seen)
    # Offsets as `lastProgress` gives them: JSON text, "null" where a source had none yet.
    assert all(isinstance(json.loads(o or "null"), dict | None) for o in offsets) and "null" in offsets


def test_a_run_stopped_on_purpose_ends_without_failing_the_query() -> None:
    """Spark's own termination events, as the listener gets them: the run restarted on purpose ends
    with the interrupt's error, which is not the query's; a later run's error is."""
    from types import SimpleNamespace

    from core.spark.progress_feed import ProgressFeed

    feed = ProgressFeed("q")
    feed.onQueryStarted(SimpleNamespace(name="q", id="id-1"))
    feed.stopping("run-1")
    feed.onQueryTerminated(SimpleNamespace(id="id-1", runId="run-1", exception="ClosedByInterruptException"))
    assert feed.failure is None
    feed.onQueryTerminated(SimpleNamespace(id="id-1", runId="run-2", exception="OutOfMemoryError"))
    assert feed.failure == "OutOfMemoryError"


def test_a_progress_event_crosses_py4j_as_its_json_and_only_the_named_querys_is_kept() -> None:
    """The bridge asks the Java event for its progress's JSON and nothing else (the event here answers
    only that), and the feed keeps the progress of its own query, as `lastProgress` would give it."""
    import uuid
    from types import SimpleNamespace

    from core.spark.progress_feed import ProgressFeed, _JsonProgressBridge

    def event(name: str, batch: int) -> SimpleNamespace:
        progress = {
            "id": str(uuid.uuid4()),
            "runId": str(uuid.uuid4()),
            "name": name,
            "timestamp": "2026-11-29T00:00:00.000Z",
            "batchId": batch,
            "batchDuration": 5,
            "durationMs": {"addBatch": 3},
            "stateOperators": [],
            "sources": [
                {
                    "description": "s",
                    "startOffset": None,
                    "endOffset": {"event": 9},
                    "latestOffset": {"event": 9},
                    "numInputRows": 9,
                    "inputRowsPerSecond": 1.0,
                    "processedRowsPerSecond": 2.0,
                }
            ],
            "sink": {"description": "k", "numOutputRows": 1},
        }
        return SimpleNamespace(progress=lambda: SimpleNamespace(json=lambda: json.dumps(progress)))

    feed = ProgressFeed("q")
    bridge = _JsonProgressBridge(feed)
    bridge.onQueryProgress(event("other", 0))
    bridge.onQueryProgress(event("q", 1))
    (got,) = feed.take(0)
    assert got["batchId"] == 1 and got["durationMs"] == {"addBatch": 3}
    source = got["sources"][0]
    assert source["startOffset"] == "null" and json.loads(source["endOffset"]) == {"event": 9}
    assert feed.take(0) == []
