"""One polars frame kept as an Arrow blob in a value state of transformWithState.

Why a frame per group and not an entry per key: the operators that decide at an entity's close
(merge/spark/winner_at_close.py, merge/spark/latest_aggregate.py) group their input by a bucket of
keys, so each micro-batch makes one Python call per bucket instead of one per key; the bucket's
state is read once, updated with vectorised polars and written once (the fused operators keep
windows the same way, merge/spark/window_blobs.py).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence

import pandas as pd
import polars as pl
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from merge.spark.window_blobs import input_rows, to_ipc


def bucket_of(keys: Sequence[str], buckets: int) -> Column:
    """The group a row's key falls in: one of `buckets` (the shuffle partitions: a task each)."""
    if not keys:
        return F.lit(0)
    return F.pmod(F.xxhash64(*[F.col(k) for k in keys]), F.lit(buckets))


def timestamps_from_micros(frame: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    """Timestamp columns handed over as int64 microseconds (no pandas zone rules on the way) back
    to UTC timestamps."""
    return frame.with_columns([pl.col(n).cast(pl.Datetime("us", "UTC")) for n in names])


def input_frame(batches: Iterator[pd.DataFrame], names: list[str], timestamps: list[str]) -> pl.DataFrame:
    """transformWithState's input by position, its int64-microsecond timestamps made timestamps."""
    return timestamps_from_micros(input_rows(batches, names), timestamps)


class FrameValue:
    """A value state holding one frame (absent: no rows)."""

    def __init__(self, handle: StatefulProcessorHandle, name: str) -> None:
        self.state = handle.getValueState(name, StructType([StructField("ipc", BinaryType())]))

    def get(self) -> pl.DataFrame | None:
        got = self.state.get() if self.state.exists() else None
        return pl.read_ipc(io.BytesIO(got[0])) if got else None

    def put(self, frame: pl.DataFrame) -> None:
        if frame.height == 0:
            self.state.clear()
            return
        self.state.update((to_ipc(frame),))


class NextTimer:
    """The bucket's one pending event-time timer: registered only when an earlier one is due."""

    def __init__(self, handle: StatefulProcessorHandle, name: str) -> None:
        self.handle = handle
        self.state = handle.getValueState(name, StructType([StructField("at_ms", LongType())]))

    def ensure(self, at_ms: int | None, watermark_ms: int) -> None:
        """Make a timer fire at `at_ms` (None: nothing due). A registered timer that is still ahead of
        the watermark and not later than `at_ms` serves; a stale one fires harmlessly."""
        if at_ms is None:
            return
        got = self.state.get() if self.state.exists() else None
        if got and watermark_ms < got[0] <= at_ms:
            return
        self.handle.registerTimer(at_ms)
        self.state.update((at_ms,))
