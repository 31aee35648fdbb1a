"""Windows (or panes) kept as Arrow blobs in transformWithState's state: what the fused operators share.

Why blobs: one state entry per window start, written once per epoch and read once when the window
closes, instead of one entry per (window, key) updated row by row (ADR 0014, 0015). The rows are
folded with polars on the way in, so a blob holds one row per key whatever the epochs sent.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pandas as pd
import polars as pl
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

_MS = 1000


def input_rows(batches: Iterator[pd.DataFrame], names: list[str]) -> pl.DataFrame:
    """transformWithState's input by position: the pandas hand-off renames "_"-prefixed columns."""
    frames = [pl.from_pandas(p.iloc[:, : len(names)].set_axis(names, axis=1)) for p in batches]
    return pl.concat(frames, how="vertical_relaxed")


class WindowBlobs:
    """A map state of folded rows per start (ms), and how far the windows have been emitted."""

    def __init__(self, handle: StatefulProcessorHandle, name: str, done_name: str) -> None:
        self.blobs = handle.getMapState(
            name,
            StructType([StructField("start_ms", LongType())]),
            StructType([StructField("ipc", BinaryType())]),
        )
        # Windows are emitted in order of their end; everything ending at or before this is out.
        self.done_until = handle.getValueState(done_name, StructType([StructField("end_ms", LongType())]))

    def done(self) -> int | None:
        got = self.done_until.get() if self.done_until.exists() else None
        return got[0] if got else None

    def mark_done(self, end_ms: int) -> None:
        self.done_until.update((end_ms,))

    def add(
        self, rows: pl.DataFrame, start_us: str, fold: Callable[[pl.DataFrame], pl.DataFrame]
    ) -> list[int]:
        """Fold `rows` into the blob of each start in column `start_us` (which the blobs leave out);
        returns the starts touched, in ms."""
        touched = []
        for (us,), part in rows.partition_by(start_us, as_dict=True, include_key=False).items():
            start = int(us) // _MS
            if self.blobs.containsKey((start,)):  # a window's rows come over several epochs
                part = pl.concat([self.get(start), part], how="vertical_relaxed")
            self.blobs.updateValue((start,), (to_ipc(fold(part)),))
            touched.append(start)
        return touched

    def starts(self) -> list[int]:
        return sorted(k[0] for k in self.blobs.keys())  # noqa: SIM118 (a MapState, not a dict)

    def get(self, start: int) -> pl.DataFrame:
        return pl.read_ipc(io.BytesIO(self.blobs.getValue((start,))[0]))

    def remove(self, start: int) -> None:
        self.blobs.removeKey((start,))


def to_ipc(frame: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.write_ipc(buf, compression="lz4")
    return buf.getvalue()
