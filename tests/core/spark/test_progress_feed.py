"""Every micro-batch's progress reaches the run exactly once, however many batches run: more than
`recentProgress` keeps (100), and while the run's own thread is slow to look."""

from __future__ import annotations

import time
from pathlib import Path

from core.nexmark.generator import GeneratorConfig
from core.nexmark.schedule import RateSchedule
from core.spark.runner import RunConfig, run_query

BATCHES = 160
PER_BATCH = 25


def last_committed(checkpoint: Path) -> int:
    """Spark keeps only the newest hundred commit files; their numbers run on from batch 0."""
    return max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())


def test_each_of_more_than_150_batches_is_seen_once(spark, tmp_path: Path) -> None:
    seen: list[int] = []

    def slow_hook(progress: dict) -> None:
        seen.append(progress["batchId"])
        if len(seen) == 3:
            time.sleep(3)  # batches keep committing meanwhile; none of their progress may be lost

    gen = GeneratorConfig(seed=7, events=BATCHES * PER_BATCH, schedule=RateSchedule.constant(100_000))
    config = RunConfig(query="q0", generator=gen, output=tmp_path / "out", max_events_per_batch=PER_BATCH)
    summary = run_query(config, progress=slow_hook)

    assert len(seen) > 150
    assert len(seen) == len(set(seen)), "a batch's progress was seen twice"
    assert set(seen) == set(range(last_committed(tmp_path / "out" / "_checkpoint") + 1))
    assert summary["epochs"] == len(seen)
