"""A window aggregate that keeps records (max_with_ties, latest_n), folded per window in transformWithState.

Why (ADR 0021): Spark has no aggregate that keeps only the records at a maximum or the n greatest, so
these calls used to be lowered as a collect_list of every record of the group, trimmed after the
aggregation. Spark's state then held every record of a window in one row until the window closed:
Q7's one global group held every bid of a 10 s window, and a long run died of OutOfMemoryError in the
state store. The partial state of these kinds is small (the ties at the maximum, the n greatest) and
merge/ folds it already; this operator keeps exactly that partial row per group and window.

Three steps, the same for the plain aggregate and for the merge operator:

1. per task, before the shuffle: the VM's records are folded into one partial row per (window, group)
   exactly as a worker folds its share (merge/partials.py `partial_aggregate`), and the workers'
   partial rows, when offloaded, are folded again with each other (`fold`). Each window's rows go on
   as one Arrow IPC blob. The fold keeps the shuffle small and Q7's one global group from sending
   every bid to one task; the records go in flat, so the hand-off to Python costs what a plain
   column does (a record lifted to a one-record list first cost Q7 a quarter of its throughput);
   the blob keeps transformWithState's pandas hand-off, which rebuilds its input row by row, to one
   row per task and window;
2. transformWithState, keyed by a bucket of the groups (`BUCKETS` of them, one for a global
   aggregate), folds each epoch's blobs into the window's blob in its state (merge/spark/window_blobs.py)
   and registers an event-time timer at the window's end;
3. once the watermark passes a window's end, its blob is finished, emitted and dropped.

Every fold and finish is merge/'s (merge/partials.py, merge/polars_fold.py), so every call of the
aggregate, scalar ones beside the record-keeping ones, follows the one definition in merge/algebra.py.
The output takes the columns and types of the native lowering (never run), so a plan writes what it
wrote before; its window keeps the event-time marker, so a stateful operator may follow. Exactly-once
comes from Spark: state and timers are checkpointed with the epoch, and a replayed epoch re-sends the
same rows. A batch DataFrame has no watermark and no timers: there each group's windows are emitted
as soon as they are folded (transformWithState hands a batch's group over in one call).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pandas as pd
import polars as pl
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StructField, StructType

from core.errors import PlanError
from core.plan import WINDOW, AggCall, WindowAggregate
from merge import polars_fold
from merge.algebra import check_supported, kind_of
from merge.partials import WINDOW_END, WINDOW_START, partial_aggregate
from merge.spark.column_fold import finished, lifted
from merge.spark.frame_state import bucket_of
from merge.spark.partial_form import local_partials, worker_partials
from merge.spark.window_blobs import WindowBlobs, input_rows

# The packed rows [_END_US, _IPC, _BUCKET], read by position in the processor (the pandas hand-off
# renames "_"-prefixed columns); the blobs' rows are [_START_US, *keys, *partial columns].
_END_US = "sponge_end_us"  # the window's end, microseconds since the epoch: the state's key
_IPC = "sponge_ipc"  # one task's partial rows of one window, an Arrow IPC stream
_BUCKET = "sponge_bucket"  # the state key: a hash bucket of the groups
_START_US = "sponge_start_us"  # the window's start, microseconds since the epoch
_PACKED = StructType(
    [StructField(_END_US, LongType()), StructField(_IPC, BinaryType()), StructField(_BUCKET, IntegerType())]
)
#: How many state keys the groups are spread over: enough to spread them over the VM's cores, few
#: enough that an epoch calls the processor a handful of times. A constant, so that a query restarted
#: from its checkpoint finds each group's state where it left it.
BUCKETS = 16
_US = 1_000_000
_MS = 1000
_NO_WATERMARK = 2**63 - 1  # a batch's windows are all complete


def keeps_records(op: WindowAggregate) -> bool:
    """Whether `op` has a call that keeps records: such an aggregate is folded here."""
    return any(kind_of(a).keep is not None for a in op.aggs)


@dataclass(frozen=True)
class WindowFold:
    """What the per-task steps and the processor need to know, kept free of Spark objects so it
    pickles small."""

    op: WindowAggregate
    columns: tuple[str, ...]  # the partial columns, in the order the blobs hold them
    output: pa.Schema  # the finished rows: window_start, window_end, keys, calls
    batch: bool = False  # a batch query: no watermark, every window is complete

    @property
    def keys(self) -> tuple[str, ...]:
        """The aggregate's keys other than the window, in their order."""
        return tuple(k for k in self.op.keys if k != WINDOW)

    def fold(self, rows: pl.DataFrame) -> pl.DataFrame:
        """One partial row per (window start, group) of one window, from any number."""
        folded = polars_fold.fold(rows, [_START_US, *self.keys], self.op.aggs, from_records=False)
        return folded.select(_START_US, *self.keys, *self.columns)

    def pack_records(self, records: pa.Table) -> pa.RecordBatch:
        """A task's records (their _BUCKET, and the columns the aggregate reads) as packed rows: folded
        as a worker folds its share, the bucket one more key."""
        grouped = WindowAggregate((*self.op.keys, _BUCKET), self.op.window, self.op.aggs)
        partial = pl.from_arrow(partial_aggregate(grouped, records))
        assert isinstance(partial, pl.DataFrame)
        return self._packed(
            partial.select(
                _BUCKET,
                pl.col(WINDOW_END).dt.epoch("us").alias(_END_US),
                pl.col(WINDOW_START).dt.epoch("us").alias(_START_US),
                *self.keys,
                *self.columns,
            )
        )

    def pack_partials(self, rows: pl.DataFrame) -> pa.RecordBatch:
        """A task's partial rows [_BUCKET, _END_US, _START_US, keys, partial columns] as packed rows."""
        by = [_BUCKET, _END_US, _START_US, *self.keys]
        return self._packed(polars_fold.fold(rows, by, self.op.aggs, from_records=False))

    def _packed(self, folded: pl.DataFrame) -> pa.RecordBatch:
        """One packed row per (bucket, window): the window's folded rows in an IPC blob."""
        packed: dict[str, list] = {_END_US: [], _IPC: [], _BUCKET: []}
        for (bucket, end), part in folded.partition_by([_BUCKET, _END_US], as_dict=True).items():
            packed[_END_US].append(end)
            packed[_IPC].append(_ipc(part.select(_START_US, *self.keys, *self.columns)))
            packed[_BUCKET].append(bucket)
        return pa.RecordBatch.from_pydict(packed, to_arrow_schema(_PACKED))

    def finish(self, rows: pl.DataFrame, end_ms: int) -> pa.Table:
        """The finished rows of the window ending at `end_ms`, from its blob."""
        out = rows.select(
            pl.col(_START_US).cast(pl.Datetime("us", "UTC")).alias(WINDOW_START),
            (pl.lit(end_ms, pl.Int64) * _MS).cast(pl.Datetime("us", "UTC")).alias(WINDOW_END),
            *self.keys,
            *[polars_fold.finish(c) for c in self.op.aggs],
        )
        return out.to_arrow().cast(self.output)


def _ipc(frame: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.write_ipc(buf)  # uncompressed: it crosses one shuffle and is read once
    return buf.getvalue()


def _unpacked(packed: pl.DataFrame) -> pl.DataFrame | None:
    frames = [
        pl.read_ipc(io.BytesIO(blob)).with_columns(pl.lit(end, pl.Int64).alias(_END_US))
        for end, blob in packed.select(_END_US, _IPC).iter_rows()
    ]
    return pl.concat(frames, how="vertical_relaxed") if frames else None


class WindowFoldProcessor(StatefulProcessor):
    """Folds a bucket's packed rows into its windows' blobs and finishes each window once it closes."""

    def __init__(self, spec: WindowFold) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.windows = WindowBlobs(handle, "windows", "done_until")

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        packed = input_rows(rows, [_END_US, _IPC])
        done = self.windows.done()
        if done is not None:  # late: the watermark passed the window's end before these rows came
            packed = packed.filter(pl.col(_END_US) // _MS > done)
        new = _unpacked(packed)
        if new is not None:
            for end_ms in self.windows.add(new, _END_US, self.spec.fold):  # blobs keyed by the end
                if not self.spec.batch:
                    self.handle.registerTimer(end_ms)
        watermark = _NO_WATERMARK if self.spec.batch else timerValues.getCurrentWatermarkInMs()
        yield from self._finish_closed(watermark)

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        watermark = max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs())
        yield from self._finish_closed(watermark)

    def _finish_closed(self, watermark_ms: int) -> Iterator[pd.DataFrame]:
        for end in self.windows.starts():  # the blobs' keys, in order: the windows' ends
            if end > watermark_ms:
                break
            out = self.spec.finish(self.windows.get(end), end)
            if out.num_rows:
                yield out.to_pandas(types_mapper=pd.ArrowDtype)  # ints with nulls stay ints
            self.windows.remove(end)
        done = self.windows.done()
        if not self.spec.batch and (done is None or watermark_ms > done):
            self.windows.mark_done(watermark_ms)  # every window ending by the watermark is out

    def close(self) -> None:
        pass


# ---- the Spark side ----------------------------------------------------------------------------


def _check(op: WindowAggregate) -> None:
    check_supported(op)
    if op.window is None and WINDOW not in op.keys:
        raise PlanError(
            "an aggregate that keeps records needs a window to close",
            hint='give it a tumbling window, or regroup by the upstream "window"',
        )


def _partial_columns(call: AggCall) -> list[str]:
    k = kind_of(call)
    return [call.out] if k.keep is not None else [c.name(call.out) for c in k.columns]


def _reads(op: WindowAggregate) -> list[str]:
    """The columns of a record the aggregate reads: its window's, its keys, its calls'."""
    reads = [op.window.on] if op.window is not None else []
    reads += [k for k in op.keys if k != WINDOW]
    for call in op.aggs:
        reads += sorted(call.arg.columns()) if call.arg is not None else []
        reads += [*call.fields, *call.order_by]
    return list(dict.fromkeys(reads))


def _bucket(keys: tuple[str, ...]) -> Column:
    return bucket_of(keys, BUCKETS).cast("int").alias(_BUCKET)


def _lifted(records: DataFrame, op: WindowAggregate, args: Mapping[str, Column | None]) -> DataFrame:
    """The records in partial form as Spark lifts them (never run): the native lowering's types, the
    event-time marker, and what the workers' rows are aligned to."""
    if op.window is not None:
        return local_partials(records, op, args)
    cols: list[Column] = [F.col(WINDOW), *[F.col(k) for k in op.keys if k != WINDOW]]
    return records.select(*cols, *[c for call in op.aggs for c in lifted(call, args[call.out])])


def _output(like: DataFrame, op: WindowAggregate) -> StructType:
    """The native lowering's columns and types (its plan is never run): the window struct, the keys,
    the scalar calls' as Spark's aggregates over partial rows give them, a record list's as its records
    cut to the call's fields."""
    if op.window is not None:
        window = like.select(F.window(F.col(op.window.on), f"{op.window.size_s} seconds")).schema[0]
    else:
        window = like.schema[WINDOW]
    scalars = [c for c in op.aggs if kind_of(c).keep is None]
    native = like.agg(*[finished(c, None, False) for c in scalars]).schema if scalars else None
    fields = [
        StructField(WINDOW_START, window.dataType["start"].dataType),  # type: ignore[index]
        StructField(WINDOW_END, window.dataType["end"].dataType),  # type: ignore[index]
        *[like.schema[k] for k in op.keys if k != WINDOW],
    ]
    for call in op.aggs:
        if kind_of(call).keep is None:
            assert native is not None
            fields.append(native[call.out])
        else:
            record = like.schema[call.out].dataType.elementType  # type: ignore[attr-defined]
            fields.append(StructField(call.out, ArrayType(StructType([record[f] for f in call.fields]))))
    return StructType([StructField(f.name, f.dataType, True) for f in fields])


def _packed_records(records: DataFrame, spec: WindowFold) -> DataFrame:
    """The VM's records, the columns the aggregate reads, folded and packed per task."""
    op = spec.op
    if op.window is not None:
        placed, bounds = F.col(op.window.on), []
    else:  # partial_aggregate reads a regrouped window as window_start/window_end
        placed = F.col(f"{WINDOW}.end")
        bounds = [F.col(f"{WINDOW}.start").alias(WINDOW_START), F.col(f"{WINDOW}.end").alias(WINDOW_END)]
    staged = records.where(placed.isNotNull()).select(  # a record without an event time is in no window
        _bucket(spec.keys), *bounds, *[F.col(c) for c in _reads(op)]
    )

    def pack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = [b for b in batches if b.num_rows]
        if got:
            yield spec.pack_records(pa.Table.from_batches(got))

    return staged.mapInArrow(pack, _PACKED)


def _packed_partials(partials: DataFrame, spec: WindowFold) -> DataFrame:
    """The workers' partial rows, aligned to the VM's (merge/spark/partial_form.py): their pane start
    is their event time."""
    assert spec.op.window is not None
    size = spec.op.window.size_s * _US
    micros = F.unix_micros(F.col(spec.op.window.on))
    start = micros - F.pmod(micros, F.lit(size))  # as F.window's start
    staged = partials.select(
        _bucket(spec.keys),
        (start + F.lit(size)).alias(_END_US),
        start.alias(_START_US),
        *[F.col(k) for k in spec.keys],
        *[F.col(c) for c in spec.columns],
    )

    def pack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        frames = [pl.from_arrow(b) for b in batches if b.num_rows]
        if frames:
            yield spec.pack_partials(pl.concat(frames, how="vertical_relaxed"))  # type: ignore[arg-type]

    return staged.mapInArrow(pack, _PACKED)


def window_fold(
    records: DataFrame,
    op: WindowAggregate,
    args: Mapping[str, Column | None],
    workers: DataFrame | None = None,
) -> DataFrame:
    """`op` over the VM's `records` and, for the merge operator, the partial rows the `workers` returned
    for the same epochs (window_start as a worker sends it, window_end dropped). `args` holds each
    call's argument lowered to a Column, by output name (for the native lowering's types; the fold
    itself evaluates them in polars, as the workers do). Returns the native lowering's columns:
    window, keys, one per call."""
    _check(op)
    like = _lifted(records, op, args)
    output = _output(like, op)
    spec = WindowFold(
        op=op,
        columns=tuple(c for call in op.aggs for c in _partial_columns(call)),
        output=to_arrow_schema(output, timezone="UTC"),
        batch=not records.isStreaming,
    )
    packed = _packed_records(records, spec)
    if workers is not None:
        packed = packed.unionByName(_packed_partials(worker_partials(workers, op, like), spec))
    folded = packed.groupBy(_BUCKET).transformWithStateInPandas(
        statefulProcessor=WindowFoldProcessor(spec),
        outputStructType=output,
        outputMode="Append",
        timeMode="EventTime",
    )
    # The window takes the event-time marker (field metadata) of the column that placed the records, as
    # Spark's window struct does: a stateful operator after this one finds its watermark there.
    window = F.struct(F.col(WINDOW_START).alias("start"), F.col(WINDOW_END).alias("end"))
    marker = like.schema[op.window.on if op.window is not None else WINDOW].metadata
    return folded.select(window.alias(WINDOW, metadata=marker), *spec.keys, *[c.out for c in op.aggs])
