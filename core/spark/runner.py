"""Run a NEXMark query on Spark Structured Streaming to the end of its event stream.

The source ends with an end-of-stream punctuation whose event time closes every window; the run is
over once Spark reports that watermark, i.e. once the batch that applied it has committed.
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

EOS_WATERMARK_PREFIX = "2100-01-01"


@dataclass(frozen=True)
class RunConfig:
    query: str
    generator: GeneratorConfig
    output: Path
    params: QueryParams = QueryParams()
    pace: bool = False
    max_events_per_batch: int = 200_000
    spark: SparkConfig = field(default_factory=SparkConfig)
    plain: bool = False  # lower without proxies (bench baseline)
    timeout_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.max_events_per_batch <= 0:
            raise ConfigError("max events per batch must be positive", hint="pass a positive --batch-events")


def nexmark_sources(spark, config: RunConfig, pace_origin: float) -> Callable[[Source], object]:  # noqa: ANN001
    from pyspark.sql import functions as F

    gen = config.generator

    def make(src: Source):  # noqa: ANN202
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
        # The punctuation row must pass the watermark operator and only then be dropped.
        return df.withWatermark("date_time", "0 seconds").filter(
            F.col("date_time") < F.lit(EOS_WATERMARK_PREFIX).cast("timestamp")
        )

    return make


def run_query(config: RunConfig, progress: Callable[[dict], None] | None = None) -> dict:
    """Stream the query to completion, write Parquet results and summary.json; return the summary."""
    from core.spark.lower import lower_plain, lower_rewritten

    info = get_query(config.query)
    logical = info.plan(config.params)
    rewritten = rewrite(logical)
    out = config.output
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    spark = spark_session(config.spark)
    started = time.time()
    sources = nexmark_sources(spark, config, pace_origin=started)
    sinks = lower_plain(logical, sources) if config.plain else lower_rewritten(rewritten, sources)
    (sink_df,) = sinks.values()
    query = (
        sink_df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(out / "_checkpoint"))
        .outputMode("append")
        .trigger(processingTime="0 seconds")
        .queryName(f"sponge_{config.query}_{int(started)}")
        .start()
    )
    records_in = epochs = 0
    seen: set[int] = set()
    try:
        while True:
            if query.exception() is not None:
                raise SpongeError(f"the streaming query failed: {query.exception()}")
            for p in query.recentProgress:
                if p["batchId"] in seen:
                    continue
                seen.add(p["batchId"])
                records_in += p["numInputRows"]
                epochs += 1
                if progress:
                    progress(p)
            last = query.lastProgress
            if last and last.get("eventTime", {}).get("watermark", "").startswith(EOS_WATERMARK_PREFIX):
                break
            if time.time() - started > config.timeout_s:
                raise SpongeError(f"the query did not finish in {config.timeout_s:.0f}s")
            time.sleep(0.05)
    finally:
        query.stop()
    wall_s = time.time() - started
    records_in -= len([n for n in logical.nodes if isinstance(n.op, Source)])  # the punctuation rows
    summary = {
        "query": config.query,
        "events": config.generator.events,
        "seed": config.generator.seed,
        "records_in": records_in,
        "records_local": records_in,
        "records_offloaded": 0,
        "epochs": epochs,
        "wall_s": round(wall_s, 3),
        "events_per_s": round(config.generator.events / wall_s, 1) if wall_s > 0 else None,
        "rewrite_ms": round(rewritten.rewrite_ms, 3),
        "plan": "plain" if config.plain else "rewritten",
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
