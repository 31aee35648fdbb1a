"""Run a NEXMark query on Spark Structured Streaming to the end of its event stream.

The source ends with an end-of-stream punctuation whose event time closes every window; the run is
over once Spark reports that watermark, i.e. once the batch that applied it has committed.

With `input` set, events come from `input/<entity>/*.jsonl` (the bounded "nexmark-files" source)
instead of the generator; lines that fail validation go to `output/dead_letter/` and are counted in
summary.json, and the run keeps going.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ConfigError, SpongeError
from core.nexmark.generator import GeneratorConfig
from core.nexmark.params import QueryParams
from core.nexmark.queries import get_query
from core.plan import Source
from core.rewrite import rewrite
from core.spark.session import SparkConfig, spark_session

EOS_TIME = "2100-01-01"  # core.nexmark.schema.END_OF_STREAM_TIME_US as a Spark literal
DEAD_LETTER_DIR = "dead_letter"  # under the output directory, next to the results


@dataclass(frozen=True)
class RunConfig:
    query: str
    generator: GeneratorConfig
    output: Path
    params: QueryParams = field(default_factory=QueryParams)
    pace: bool = False
    max_events_per_batch: int = 200_000
    spark: SparkConfig = field(default_factory=SparkConfig)
    plain: bool = False  # lower without proxies (bench baseline)
    timeout_s: float = 1800.0
    input: Path | None = None  # read input/<entity>/*.jsonl instead of generating events

    def __post_init__(self) -> None:
        if self.max_events_per_batch <= 0:
            raise ConfigError("max events per batch must be positive", hint="pass a positive --batch-events")
        if self.input is not None and self.pace:
            raise ConfigError("--rate paces generated events only", hint="drop --rate when using --input")
        if self.input is not None and self.input.resolve().is_relative_to(self.output.resolve()):
            raise ConfigError(
                f"the output {self.output} contains the input {self.input}; a run clears its output first",
                hint="pass an --output outside the --input directory",
            )


def nexmark_sources(spark, config: RunConfig, pace_origin: float) -> Callable[[Source], object]:
    from pyspark.sql import functions as F

    gen = config.generator

    def make(src: Source):
        if config.input is not None:
            df = (
                spark.readStream.format("nexmark-files")
                .option("path", str(config.input))
                .option("entity", src.entity)
                .option("dead_letter", str(config.output / DEAD_LETTER_DIR))
                .option("bounded", "true")
                .load()
            )
        else:
            df = (
                spark.readStream.format("nexmark")
                .option("entity", src.entity)
                .option("seed", str(gen.seed))
                .option("events", str(gen.events))
                .option("schedule", gen.schedule.text())
                .option("pace", "arrival" if config.pace else "none")
                .option("pace_origin", repr(pace_origin))
                .option("max_events_per_batch", str(config.max_events_per_batch))
                .load()
            )
        # The punctuation row must reach the watermark operator before it is dropped. Spark pushes
        # predicates that do not mention the event-time column below the watermark (join keys'
        # inferred not-null checks, a query's own filters), which would drop the punctuation early:
        # making every column depend on date_time keeps them all above it.
        alive = F.col("date_time") < F.lit(EOS_TIME).cast("timestamp")
        df = df.withWatermark("date_time", "0 seconds")
        return df.select(
            *[F.col(c) if c == "date_time" else F.when(alive, F.col(c)).alias(c) for c in df.columns]
        ).filter(alive)

    return make


def run_query(config: RunConfig, progress: Callable[[dict], None] | None = None) -> dict:
    """Stream the query to completion, write Parquet results and summary.json; return the summary."""
    from core.spark.file_source import dead_letter_summary, require_entity_dirs
    from core.spark.file_source import register as register_file_source
    from core.spark.lower import lower_plain, lower_rewritten

    info = get_query(config.query)
    logical = info.plan(config.params)
    rewritten = rewrite(logical)
    if config.input is not None:
        require_entity_dirs(config.input, [n.op.entity for n in logical.nodes if isinstance(n.op, Source)])
    out = config.output
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    spark = spark_session(config.spark)
    register_file_source(spark)
    started = time.time()
    sources = nexmark_sources(spark, config, pace_origin=started)
    sinks = lower_plain(logical, sources) if config.plain else lower_rewritten(rewritten, sources)
    (sink_df,) = sinks.values()
    n_sources = len([n for n in logical.nodes if isinstance(n.op, Source)])
    epochs_progress = stream_to_end(
        sink_df,
        out,
        f"sponge_{config.query}_{int(started)}",
        n_sources,
        config.generator.events,
        timeout_s=config.timeout_s,
        started=started,
        progress=progress,
    )
    records_in = sum(p["numInputRows"] for p in epochs_progress) - n_sources  # minus the punctuation rows
    epochs = len(epochs_progress)
    wall_s = time.time() - started
    events = records_in if config.input is not None else config.generator.events
    summary = {
        "query": config.query,
        "events": events,
        "seed": None if config.input is not None else config.generator.seed,
        "records_in": records_in,
        "records_local": records_in,
        "records_offloaded": 0,
        "epochs": epochs,
        "wall_s": round(wall_s, 3),
        "events_per_s": round(events / wall_s, 1) if wall_s > 0 else None,
        "rewrite_ms": round(rewritten.rewrite_ms, 3),
        "plan": "plain" if config.plain else "rewritten",
    }
    if config.input is not None:
        summary["input"] = str(config.input)
        summary["dead_letter"] = dead_letter_summary(out / DEAD_LETTER_DIR)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def stream_to_end(
    df,
    out: Path,
    name: str,
    n_sources: int,
    events: int,
    *,
    timeout_s: float,
    started: float,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Stream `df` into Parquet under `out` until every source has delivered its punctuation and
    the closing no-data epoch has run; return the progress of every epoch that read data.

    Shared by run_query and the benchmark's hand-written queries, so both end the same way.
    """
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(out / "_checkpoint"))
        .outputMode("append")
        .trigger(processingTime="0 seconds")
        .queryName(name)
        .start()
    )
    total = events + 1  # the punctuation sits at offset `events`
    seen: dict[int, dict] = {}

    def at_end(source: dict) -> bool:
        """The source has delivered its punctuation: the generator's last offset is `events + 1`; a
        bounded file source reports its last one (file count + 1) as latestOffset."""
        end = json.loads(source["endOffset"] or "{}")
        if "files" in end:
            latest = json.loads(source.get("latestOffset") or "{}")
            return "files" in latest and end["files"] >= latest["files"]
        return end.get("event", 0) >= total

    def collect() -> bool:
        """Record new epochs; True once every source has committed its last offset."""
        for p in query.recentProgress:
            if p["batchId"] not in seen and p["numInputRows"] is not None and "addBatch" in p["durationMs"]:
                seen[p["batchId"]] = p
                if progress:
                    progress(p)
        last = query.lastProgress
        return bool(last) and len(last["sources"]) == n_sources and all(at_end(s) for s in last["sources"])

    try:
        while not collect():
            if query.exception() is not None:
                raise SpongeError(f"the streaming query failed: {str(query.exception()).splitlines()[0]}")
            if time.time() - started > timeout_s:
                raise SpongeError(
                    f"the query did not finish in {timeout_s:.0f}s",
                    hint="raise the timeout or lower --events",
                )
            time.sleep(0.05)
        # Runs the no-data epoch that applies the end-of-stream watermark and closes the last windows.
        query.processAllAvailable()
        collect()
    finally:
        query.stop()
    return list(seen.values())
