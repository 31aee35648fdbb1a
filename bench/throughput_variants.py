"""The three variants the throughput bench compares, each run once and measured in steady state.

Why apart from the command line (bench/throughput.py, whose docstring gives the method): a run of a
variant and the figure it yields (`Measurement`, from Spark's progress reports) are the instrument;
bench/offload.py measures its VM path with the same one, so both benches count alike. (a) and (b) go
through the product's runner; (c), the hand-written query of bench/native_queries.py, is started by a
small loop that mirrors run_query (same sources, Parquet sink, trigger and output mode).
"""

from __future__ import annotations

import gc
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.native_queries import NATIVE_QUERIES
from core.nexmark.queries import entity_columns
from core.plan import Source
from core.run_output import Existing, claim
from core.spark.runner import RunConfig, run_query, source_offset, stream_to_end
from core.spark.streams import nexmark_sources

VARIANTS = ("a", "b", "c")
VARIANT_NAMES = {"a": "ours (rewritten, inactive proxies)", "b": "plain plan", "c": "native PySpark"}


@dataclass
class Measurement:
    """One run of one variant: the steady-state figures plus the per-batch detail they come from."""

    events: int
    ms: int
    batches: int
    wall_s: float
    batch_ms: list[int] = field(default_factory=list)

    @property
    def events_per_s(self) -> float:
        return self.events / (self.ms / 1000.0) if self.ms > 0 else float("nan")


def steady_state(progress: Sequence[dict[str, Any]], events: int, wall_s: float) -> Measurement:
    """Events over the summed trigger time of the batches with events, the first batch left out."""
    batches = sorted(progress, key=lambda p: p["batchId"])
    if not batches:
        raise RuntimeError("the query reported no micro-batch")
    first = batches[0]["batchId"]
    total_events = total_ms = n = 0
    per_batch = []
    for p in batches:
        if p["batchId"] == first:
            continue
        # Every source covers the same global event range; the punctuation sits at offset `events`.
        spans = []
        for s in p["sources"]:
            start = int(source_offset(s["startOffset"]).get("event", 0))
            end = int(source_offset(s["endOffset"]).get("event", 0))
            spans.append(min(end, events) - min(start, events))
        real = max(spans, default=0)
        if real <= 0:
            continue
        total_events += real
        total_ms += int(p["durationMs"]["triggerExecution"])
        per_batch.append(int(p["durationMs"]["triggerExecution"]))
        n += 1
    return Measurement(total_events, total_ms, n, round(wall_s, 3), per_batch)


def _progress_dict(p: Any) -> dict[str, Any]:
    """The few fields of a StreamingQueryProgress the bench uses, as plain data."""
    return {
        "batchId": p["batchId"],
        "durationMs": dict(p["durationMs"]),
        "sources": [{"startOffset": s["startOffset"], "endOffset": s["endOffset"]} for s in p["sources"]],
    }


# ---- the three variants ------------------------------------------------------------------------


def run_ours(config: RunConfig) -> list[dict[str, Any]]:
    """(a) or (b), through the product's own runner."""
    progress: list[dict[str, Any]] = []
    run_query(config, progress=lambda p: progress.append(_progress_dict(p)))
    return progress


def native_frame(spark: Any, config: RunConfig, started: float) -> tuple[Any, int]:
    """(c)'s streaming DataFrame on the run's sources, and how many sources it reads."""
    make = nexmark_sources(spark, config, pace_origin=started)
    entities: list[str] = []

    def source(entity: str) -> Any:
        entities.append(entity)
        return make(Source(entity=entity, columns=tuple(entity_columns(entity).items())))

    return NATIVE_QUERIES[config.query](source, config.params), len(entities)


def run_native(spark: Any, config: RunConfig) -> list[dict[str, Any]]:
    """(c): start the hand-written query exactly as run_query starts ours and stream it to the end."""
    out = config.output
    claim(out, config.identity(), Existing.REPLACE)
    started = time.time()
    df, n_sources = native_frame(spark, config, started)
    progress: list[dict[str, Any]] = []
    stream_to_end(
        df,
        out,
        f"bench_native_{config.query}_{int(started)}",
        n_sources,
        config.generator.events,
        timeout_s=config.timeout_s,
        started=started,
        progress=lambda p: progress.append(_progress_dict(p)),
        memory=config.spark.memory,  # the store ours runs on
    )
    return progress


def run_variant(spark: Any, variant: str, config: RunConfig) -> Measurement:
    _quiesce(spark)
    started = time.time()
    progress = run_native(spark, config) if variant == "c" else run_ours(config)
    wall = time.time() - started
    m = steady_state(progress, config.generator.events, wall)
    shutil.rmtree(config.output, ignore_errors=True)
    return m


def _quiesce(spark: Any) -> None:
    """Collect garbage on both sides so one run's leftovers do not bill the next run."""
    gc.collect()
    spark.sparkContext._jvm.java.lang.System.gc()
