"""The "nexmark" Spark data source: batch and streaming reads equal the generator, plus the punctuation row.

The offset/pacing logic is tested directly on the reader (no JVM); the rest runs real Spark queries.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from core.errors import ConfigError
from core.nexmark.generator import GeneratorConfig, generate
from core.nexmark.schedule import RateSchedule
from core.nexmark.schema import END_OF_STREAM_TIME_US, ENTITIES, schema_for
from core.offload_plan import OffloadPlan
from core.spark import source
from core.spark.admission import write_vm_scale
from core.spark.source import (
    EventRange,
    NexmarkStreamReader,
    SourceOptions,
    end_of_stream_batch,
    event_ranges,
    read_range,
    routed_step,
    split_step,
)
from router.routing_log import Segment, write_current_plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


def _end_of_stream() -> Any:
    """The filter constant of the lowering (a function: Column literals need an active session)."""
    return F.lit("2100-01-01").cast("timestamp")


def _options(**extra: str) -> SourceOptions:
    return SourceOptions.parse({"entity": "bid", "events": "1000", **extra})


def _workers_options(**extra: str) -> SourceOptions:
    """The workers' stream of a routed read (its agent is never dialled by these tests)."""
    return _options(route="offload", program="{}", agent="127.0.0.1:1", secret_file="secret", **extra)


# ---------------------------------------------------------------------------------------------
# Offsets, partitions and pacing, without Spark


def test_options_defaults_and_errors() -> None:
    opts = _options()
    assert (opts.seed, opts.events, opts.pace, opts.max_events_per_batch, opts.records_per_task) == (
        0,
        1000,
        "none",
        200_000,
        200_000,  # a task holds what the cap admits per VM core: a steady epoch is one task per core
    )
    assert opts.schedule == RateSchedule.constant(10_000)
    # A task covers the offsets holding ~records_per_task of its entity's records (1, 3, 46 of 50).
    tasks = {
        e: SourceOptions.parse({"entity": e, "events": "1", "records_per_task": "600"}).offsets_per_task
        for e in ENTITIES
    }
    assert tasks == {"person": 30_000, "auction": 10_000, "bid": 652}
    assert SourceOptions.parse({"ENTITY": "Person", "events": "5"}).entity == "person"
    for bad in (
        {"events": "10"},
        {"entity": "bid"},
        {"entity": "seller", "events": "1"},
        {"entity": "bid", "events": "-1"},
        {"entity": "bid", "events": "ten"},
        {"entity": "bid", "events": "1", "pace": "fast"},
        {"entity": "bid", "events": "1", "schedule": "0"},
        {"entity": "bid", "events": "1", "max_events_per_batch": "0"},
    ):
        with pytest.raises(ConfigError) as info:
            SourceOptions.parse(bad)
        assert info.value.hint


def test_partitions_flag_only_the_end_of_stream_position() -> None:
    ranges = event_ranges(900, 1001, 64, 1000, punctuate=True)
    assert [(r.start, r.end, r.punctuate) for r in ranges] == [(900, 964, False), (964, 1001, True)]
    assert not any(r.punctuate for r in event_ranges(0, 1000, 64, 1000, punctuate=True))
    assert event_ranges(5, 5, 64, 1000, punctuate=True) == []


def test_routed_tasks_are_sized_by_the_records_they_keep() -> None:
    """At a high share the VM stream's tasks hold little but a heartbeat: they cover more offsets."""

    def plan(share: float, key_groups: frozenset[int] = frozenset()) -> OffloadPlan:
        return OffloadPlan(version=1, share=share, key_groups=key_groups, workers=2)

    def steps(*segments: Segment) -> tuple[int, int]:
        return tuple(routed_step(100_000, route, segments, 0, 1_000) for route in ("local", "offload"))

    assert steps(Segment(0, plan(0.0))) == (100_000, 1_600_000)  # nothing offloaded: one empty task
    assert steps(Segment(0, plan(1.0))) == (1_600_000, 100_000)
    assert steps(Segment(0, plan(0.5))) == (200_000, 200_000)  # each stream's task keeps 100,000 records
    # The share over the range, from the routing log's segments (never the plan now in force).
    assert steps(Segment(0, plan(0.0)), Segment(500, plan(1.0))) == (200_000, 200_000)
    assert steps(Segment(0, plan(0.0, frozenset(range(64))))) == (200_000, 200_000)  # half the key groups
    # A stream is routed by its share or by key groups, never both: a plan naming both halves halves.
    assert steps(Segment(0, OffloadPlan.of_share(1, 0.5, 2))) == (200_000, 200_000)


def test_an_epoch_is_split_into_at_least_min_partitions_tasks() -> None:
    """Every VM core reads from the first epoch on; big epochs still split by records per task, and an
    epoch too small to be worth a second task's fixed cost is not split."""
    assert split_step(100_000, 0, 50_000, 2) == 25_000
    assert split_step(100_000, 0, 60_001, 2) == 30_001  # the last task is the short one
    assert split_step(100_000, 0, 300_000, 2) == 100_000
    assert split_step(100_000, 0, 30_000, 2) == 15_000  # tasks of an eighth of a task or more: split
    assert split_step(100_000, 0, 20_000, 2) == 20_000  # two would hold under an eighth each: one task
    assert split_step(100_000, 7, 7, 2) == 100_000  # an empty epoch plans no task either way


def test_an_epoch_is_split_into_the_nearest_number_of_even_tasks() -> None:
    """A task costs the same whatever it holds: an epoch a little over a task is one task, not a task and
    a sliver, and an epoch of two tasks or more splits evenly."""
    assert split_step(100_000, 0, 120_000, 1) == 120_000
    assert split_step(100_000, 0, 149_999, 1) == 149_999
    assert split_step(100_000, 0, 150_000, 1) == 75_000
    assert split_step(100_000, 0, 200_000, 1) == 100_000
    assert split_step(100_000, 0, 250_001, 1) == 83_334
    assert split_step(100_000, 0, 40_000, 1) == 40_000  # under one task: still one task
    reader = NexmarkStreamReader(_options(events="500000", min_partitions="1"))
    spans = [(r.start, r.end) for r in reader.partitions({"event": 0}, {"event": 250_000})]
    assert spans == [(0, 250_000)]  # 217,391 offsets hold 200,000 bids: one task, not two

    def spans(min_partitions: str, start: int, end: int) -> list[tuple[int, int]]:
        reader = NexmarkStreamReader(_options(events="500000", min_partitions=min_partitions))
        return [(r.start, r.end) for r in reader.partitions({"event": start}, {"event": end})]

    assert spans("1", 0, 50_000) == [(0, 50_000)]
    assert spans("2", 0, 60_000) == [(0, 30_000), (30_000, 60_000)]
    assert len(spans("2", 0, 400_000)) == 2  # 217,391 offsets hold 200,000 bids
    assert len(spans("1", 0, 400_000)) == 2
    # A person is 1 event in 50: 50,000 offsets hold 1,000 persons, far under an eighth of a task.
    person = NexmarkStreamReader(_options(entity="person", events="500000", min_partitions="2"))
    assert len(person.partitions({"event": 0}, {"event": 50_000})) == 1
    with pytest.raises(ConfigError):
        _options(min_partitions="0")


def test_a_fixed_number_of_tasks_splits_every_epoch_whatever_it_holds() -> None:
    """A drill's warm-up runs its small epochs in one task per executor slot, under the floor too, so the
    Python workers of a burst's split epochs start before the trace."""
    assert split_step(100_000, 0, 3_750, 1, tasks=2) == 1_875
    assert split_step(100_000, 0, 3_751, 2, tasks=4) == 938  # the last task is the short one
    assert split_step(100_000, 0, 400_000, 1, tasks=2) == 200_000  # and over the nearest number too
    person = NexmarkStreamReader(_options(entity="person", events="500000", tasks="2"))
    assert [(r.start, r.end) for r in person.partitions({"event": 0}, {"event": 3_750})] == [
        (0, 1_875),
        (1_875, 3_750),
    ]
    with pytest.raises(ConfigError):
        _options(tasks="-1")


def test_read_range_yields_arrow_batches_and_the_punctuation() -> None:
    opts = _options(seed="3")
    batches = list(read_range(opts, EventRange(950, 1001, punctuate=True)))
    expected = generate(GeneratorConfig(seed=3, events=1000), "bid", 950, 1000)
    assert batches[0].equals(expected)
    assert batches[-1].equals(end_of_stream_batch("bid"))
    row = batches[-1].to_pylist()[0]
    assert row.pop("date_time").year == 2100
    assert set(row.values()) == {None}
    assert batches[-1].schema.field("date_time").type == pa.timestamp("us", tz="UTC")


def test_unpaced_offsets_advance_by_max_events_per_batch() -> None:
    reader = NexmarkStreamReader(_options(max_events_per_batch="400"))
    assert reader.initialOffset() == {"event": 0}
    offsets, start = [], reader.initialOffset()
    for _ in range(5):
        start = reader.latestOffset(start, ReadAllAvailable())
        offsets.append(start["event"])
    assert offsets == [400, 800, 1001, 1001, 1001]
    assert reader.latestOffset({"event": 0}, ReadMaxRows(10)) == {"event": 10}


def test_the_cap_follows_the_capacity_the_driver_publishes(tmp_path: Path) -> None:
    """A VM that joins mid-run doubles the cap from the next planning on; no file means the start's."""
    scale = tmp_path / "capacity"
    reader = NexmarkStreamReader(
        _options(events="5000", max_events_per_batch="400", capacity_file=str(scale))
    )
    first = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    write_vm_scale(scale, 2.0)
    second = reader.latestOffset(first, ReadAllAvailable())
    scale.write_text("not a number")  # a reader never fails on the file: the start's capacity
    third = reader.latestOffset(second, ReadAllAvailable())
    assert [first["event"], second["event"], third["event"]] == [400, 1200, 1600]


def test_the_workers_stream_plans_no_task_for_a_range_that_offloads_nothing(tmp_path: Path) -> None:
    """An inactive router costs an epoch no Spark task on the workers' stream; the VM's reads it all."""
    write_current_plan(tmp_path, OffloadPlan.local())
    vm = NexmarkStreamReader(_options(route="local", offload_dir=str(tmp_path)))
    workers = NexmarkStreamReader(_workers_options(offload_dir=str(tmp_path)))
    assert workers.partitions({"event": 0}, {"event": 500}) == []
    assert [(p.start, p.end) for p in vm.partitions({"event": 0}, {"event": 500})] == [(0, 500)]
    write_current_plan(tmp_path, OffloadPlan.of_share(1, 0.5, 2))
    assert [(p.start, p.end) for p in workers.partitions({"event": 500}, {"event": 1001})] == [(500, 1001)]


class _Clock:
    """The wall clock as the source sees it, moved only by the test: which offsets are due then
    depends on the schedule alone, never on how long this machine took between two lines."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock(1_700_000_000.0)
    monkeypatch.setattr(source, "time", fake)  # the source reads time.time() and nothing else
    return fake


def test_paced_offsets_follow_the_wall_clock(clock: _Clock) -> None:
    now = clock.now
    reader = NexmarkStreamReader(_options(pace="arrival", schedule="1000", pace_origin=str(now - 0.5)))
    # 0.5 s of events at 1000/s are due: events 0 (due at once) to 500.
    first = reader.latestOffset({"event": 0}, ReadAllAvailable())["event"]
    assert first == 501
    clock.now += 0.25  # a power of two: the clock's sums stay exact
    assert reader.latestOffset({"event": first}, ReadAllAvailable())["event"] == 751
    # The punctuation is released only once every event is due (at 10/s, event 999 is due at 99.9 s).
    almost = NexmarkStreamReader(_options(pace="arrival", schedule="10", pace_origin=str(clock.now - 99.85)))
    assert almost.latestOffset({"event": 0}, ReadAllAvailable())["event"] == 999
    clock.now += 0.125
    assert almost.latestOffset({"event": 999}, ReadAllAvailable())["event"] == 1001
    # A stream that has not started yet has nothing due; one started now has event 0.
    future = NexmarkStreamReader(_options(pace="arrival", pace_origin=str(clock.now + 60)))
    assert future.latestOffset({"event": 0}, ReadAllAvailable())["event"] == 0
    assert NexmarkStreamReader(_options(pace="arrival")).latestOffset({"event": 0}, ReadAllAvailable()) == {
        "event": 1
    }


def test_the_routed_streams_of_a_query_end_every_epoch_at_the_same_offset(
    clock: _Clock, tmp_path: Path
) -> None:
    """Spark asks the VM's stream and the workers' for their ends one after the other, while more
    events fall due: both end where the first asked said, so the workers' rows of an epoch are never
    behind the VM's watermark."""
    write_current_plan(tmp_path, OffloadPlan.local())
    paced = {"pace": "arrival", "schedule": "1000", "pace_origin": str(clock.now - 0.5)}
    vm = NexmarkStreamReader(_options(route="local", offload_dir=str(tmp_path), **paced))
    workers = NexmarkStreamReader(_workers_options(offload_dir=str(tmp_path), **paced))
    first = vm.latestOffset(vm.initialOffset(), ReadAllAvailable())
    clock.now += 0.2
    assert workers.latestOffset(workers.initialOffset(), ReadAllAvailable()) == first
    second = workers.latestOffset(first, ReadAllAvailable())
    assert second["event"] - first["event"] >= 200  # the workers' stream decides the next epoch
    clock.now += 0.1
    assert vm.latestOffset(first, ReadAllAvailable()) == second


def test_available_now_target_is_fixed_when_prepared(clock: _Clock) -> None:
    reader = NexmarkStreamReader(_options(pace="arrival", schedule="1000", pace_origin=str(clock.now - 0.2)))
    reader.prepareForTriggerAvailableNow()
    target = reader.latestOffset({"event": 0}, ReadAllAvailable())["event"]
    assert target == 201
    clock.now += 10  # every event is due by now, but the trigger's target stays where it was
    assert reader.latestOffset({"event": 0}, ReadAllAvailable())["event"] == target
    assert reader.latestOffset({"event": target}, ReadAllAvailable())["event"] == target
    assert reader.reportLatestOffset() == {"event": 1001}


# ---------------------------------------------------------------------------------------------
# Real Spark queries


def _expected(entity: str, seed: int, events: int) -> list[dict[str, Any]]:
    return generate(GeneratorConfig(seed=seed, events=events), entity, 0, events).to_pylist()


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts, timestamps zoned UTC like the generator's, sorted by event time (unique per event)."""
    table = df.toArrow()
    table = table.cast(
        pa.schema(
            [
                f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
                for f in table.schema
            ]
        )
    )
    return sorted(table.to_pylist(), key=lambda row: row["date_time"])


def _offset(progress: Any, key: str) -> int | None:
    raw = progress["sources"][0][key]
    if raw is None:
        return None
    return int((json.loads(raw) if isinstance(raw, str) else raw)["event"])


def _await(query: StreamingQuery, done: Any, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if query.exception() is not None:
                raise AssertionError(str(query.exception()))
            progress = query.lastProgress
            if progress is not None and done(progress):
                return
            time.sleep(0.1)
        raise AssertionError(f"stream did not finish in {timeout_s}s; last progress {query.lastProgress}")
    finally:
        query.stop()


@pytest.mark.spark
@pytest.mark.parametrize("entity", ENTITIES)
def test_batch_read_equals_generate(spark: SparkSession, entity: str) -> None:
    df = (
        spark.read.format("nexmark")
        .option("entity", entity)
        .option("events", "2600")
        .option("seed", "11")
        .option("records_per_task", "700")
        .load()
    )
    assert df.rdd.getNumPartitions() == {"person": 1, "auction": 1, "bid": 4}[entity]
    assert [f.name for f in df.schema] == schema_for(entity).names
    assert _rows(df) == _expected(entity, 11, 2600)


@pytest.mark.spark
@pytest.mark.parametrize("entity", ENTITIES)
def test_stream_read_equals_generate_plus_punctuation(spark: SparkSession, entity: str) -> None:
    events = 1500
    name = f"nexmark_stream_{entity}"
    stream = (
        spark.readStream.format("nexmark")
        .option("entity", entity)
        .option("events", str(events))
        .option("seed", "5")
        .option("max_events_per_batch", "600")
        .option("records_per_task", "230")
        .load()
    )
    query = (
        stream.writeStream.format("memory").queryName(name).trigger(processingTime="100 milliseconds").start()
    )
    _await(query, lambda p: _offset(p, "endOffset") == events + 1)
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) == 3  # 600 + 600 + 301 offsets
    out = spark.table(name)
    punctuation = out.filter(F.col("date_time") >= _end_of_stream()).collect()
    assert len(punctuation) == 1
    row = punctuation[0].asDict()
    assert row.pop("date_time").timestamp() == END_OF_STREAM_TIME_US / 1e6
    assert set(row.values()) == {None}
    assert _rows(out.filter(F.col("date_time") < _end_of_stream())) == _expected(entity, 5, events)


@pytest.mark.spark
def test_stream_to_parquet_round_trips_timestamps(spark: SparkSession, tmp_path: Any) -> None:
    stream = (
        spark.readStream.format("nexmark")
        .option("entity", "auction")
        .option("events", "800")
        .option("seed", "2")
        .load()
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    _await(query, lambda p: _offset(p, "endOffset") == 801)
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.count() == 48 + 1
    assert _rows(out.filter(F.col("date_time") < _end_of_stream())) == _expected("auction", 2, 800)


@pytest.mark.spark
@pytest.mark.parametrize("trigger", [{"processingTime": "100 milliseconds"}, {"availableNow": True}])
def test_punctuation_closes_every_window(spark: SparkSession, trigger: dict[str, Any]) -> None:
    """The lowering's pattern: watermark on date_time, drop the punctuation, then a windowed count."""
    events = 24_000  # 2.4 s of events at the default 10,000/s
    stream = (
        spark.readStream.format("nexmark")
        .option("entity", "bid")
        .option("events", str(events))
        .option("max_events_per_batch", "10000")
        .load()
    )
    counts = (
        stream.withWatermark("date_time", "0 seconds")
        .filter(F.col("date_time") < _end_of_stream())
        .groupBy(F.window("date_time", "500 milliseconds"))
        .count()
        .select(F.col("window.start").alias("start"), "count")
    )
    name = "nexmark_windows_" + "_".join(trigger)
    query = (
        counts.writeStream.format("memory").queryName(name).outputMode("append").trigger(**trigger).start()
    )
    if "availableNow" in trigger:
        assert query.awaitTermination(180)  # the trigger ends the query on its own ...
        assert query.exception() is None
        # ... after a final no-data batch that runs with the end-of-stream watermark.
        assert query.lastProgress["numInputRows"] == 0
        assert query.lastProgress["eventTime"]["watermark"].startswith("2100-01-01")
    else:
        _await(query, lambda p: p["eventTime"].get("watermark", "").startswith("2100-01-01"))
    got = {row["start"].timestamp(): row["count"] for row in spark.table(name).collect()}
    times = generate(GeneratorConfig(seed=0, events=events), "bid", 0, events)["date_time"].to_numpy()
    starts, sizes = np.unique(times.astype("datetime64[us]").astype(np.int64) // 500_000, return_counts=True)
    assert got == {start * 0.5: int(size) for start, size in zip(starts, sizes, strict=True)}
    assert len(got) == 5 and END_OF_STREAM_TIME_US // 500_000 * 0.5 not in got
