"""The input streams of a run: the NEXMark sources or a user's job's own, watermarked on their event
time, with punctuation and heartbeats dropped.

Why a module of their own: the runner reads the VM's share through them and the offload session the
workers' share, so both take them from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from core.file_schema import NEXMARK_EVENT_TIME, FileSchema
from core.kinesis import KinesisEndpoint
from core.nexmark.generator import GeneratorConfig
from core.plan import Source

EOS_TIME = "2100-01-01"  # core.nexmark.schema.END_OF_STREAM_TIME_US as a Spark literal
DEAD_LETTER_DIR = "dead_letter"  # under the output directory, next to the results


class StreamedRun(Protocol):
    """What a stream needs of a run's configuration (core.spark.runner.RunConfig)."""

    @property
    def generator(self) -> GeneratorConfig: ...
    @property
    def pace(self) -> bool: ...
    @property
    def max_events_per_batch(self) -> int: ...
    @property
    def min_partitions(self) -> int: ...
    @property
    def tasks_per_epoch(self) -> int: ...
    @property
    def capacity_file(self) -> Path | None: ...
    @property
    def input(self) -> Path | None: ...
    @property
    def max_files_per_batch(self) -> int: ...
    @property
    def follow(self) -> bool: ...
    @property
    def output(self) -> Path: ...
    @property
    def kinesis(self) -> KinesisEndpoint | None: ...


def nexmark_sources(
    spark,
    config: StreamedRun,
    pace_origin: float,
    routes: Mapping[str, Mapping[str, str]] | None = None,
    schemas: Mapping[str, FileSchema] | None = None,
) -> Callable[[Source], object]:
    """The factory of source streams; `routes` maps an entity to the options of its routed read, and
    `schemas` a user's source to its records' schema (read from its files under the run's input)."""

    def make(src: Source):
        route = (routes or {}).get(src.entity)
        own = (schemas or {}).get(src.entity)
        df = source_stream(spark, config, src.entity, own, pace_origin, route or {})
        return keep_alive(df, own.event_time if own else NEXMARK_EVENT_TIME, heartbeats=route is not None)

    return make


def source_stream(
    spark,
    config: StreamedRun,
    entity: str,
    own: FileSchema | None,
    pace_origin: float,
    options: Mapping[str, str],
):
    """One read of a source, routed by `options` if any: its files under the run's input (`own`
    describes a user's source; else `entity` names a NEXMark entity), its stream's records, or the
    generator's events."""
    if config.kinesis is not None:
        return kinesis_stream(spark, config, entity, own, options)
    if config.input is None:
        return generated_stream(spark, config, entity, pace_origin, options)
    reader = (
        spark.readStream.format("nexmark-files")
        .option("path", str(config.input))
        .option("dead_letter", str(config.output / DEAD_LETTER_DIR))
        .option("bounded", "false" if config.follow else "true")
        .option("max_files_per_batch", str(config.max_files_per_batch))
    )
    reader = reader.option("schema", own.to_option()) if own else reader.option("entity", entity)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def kinesis_stream(
    spark, config: StreamedRun, entity: str, own: FileSchema | None, options: Mapping[str, str]
):
    """A source's records from the run's Kinesis stream (core/spark/kinesis_source.py), to the
    producer's end-of-stream markers, routed by `options` if any."""
    stream = config.kinesis
    assert stream is not None
    reader = (
        spark.readStream.format("kinesis")
        .option("stream", stream.stream)
        .option("region", stream.region)
        .option("dead_letter", str(config.output / DEAD_LETTER_DIR))
        .option("max_records_per_shard", str(config.max_events_per_batch))
    )
    if stream.endpoint_url:
        reader = reader.option("endpoint_url", stream.endpoint_url)
    reader = reader.option("schema", own.to_option()) if own else reader.option("entity", entity)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def generated_stream(spark, config: StreamedRun, entity: str, pace_origin: float, options: Mapping[str, str]):
    gen = config.generator
    reader = (
        spark.readStream.format("nexmark")
        .option("entity", entity)
        .option("seed", str(gen.seed))
        .option("events", str(gen.events))
        .option("schedule", gen.schedule.text())
        .option("pace", "arrival" if config.pace else "none")
        .option("pace_origin", repr(pace_origin))
        .option("max_events_per_batch", str(config.max_events_per_batch))
        .option("min_partitions", str(config.min_partitions))
        .option("tasks", str(config.tasks_per_epoch))
    )
    if config.capacity_file is not None:
        reader = reader.option("capacity_file", str(config.capacity_file))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def keep_alive(df, time_column: str | None, heartbeats: bool):
    """Watermark on `time_column` first, then drop the punctuation (and heartbeat) rows.

    Those rows must reach the watermark operator before they are dropped. Spark pushes predicates
    that do not mention the event-time column below the watermark (join keys' inferred not-null
    checks, a query's own filters), which would drop them early: making every column, and the
    filter itself, depend on the event-time column keeps them all above it.
    """
    from pyspark.sql import functions as F

    from router.source_router import HEARTBEAT

    if time_column is None:  # nothing downstream needs a watermark (a stateless chain's output)
        return df.filter(F.col(HEARTBEAT).isNull()).drop(HEARTBEAT)
    eos = F.lit(EOS_TIME).cast("timestamp")
    t = F.col(time_column)
    alive = ~F.coalesce(F.col(HEARTBEAT), t >= eos) if heartbeats else t < eos
    df = df.withWatermark(time_column, "0 seconds")
    raw = (time_column, HEARTBEAT)  # what `alive` reads stays as it came
    df = df.select(*[F.col(c) if c in raw else F.when(alive, F.col(c)).alias(c) for c in df.columns])
    df = df.filter(alive)
    return df.drop(HEARTBEAT) if heartbeats else df
