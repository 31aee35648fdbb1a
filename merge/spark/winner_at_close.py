"""The best right row of each left entity, decided at the entity's close, on transformWithState.

Why an operator of its own (ADR 0020): NEXMark's winning bid of an auction is only known once the
auction closes, and until then any bid with open <= bid time < expires may still win. A windowed join
cannot say that (it cuts an auction's bids at a window boundary and emits before the close), and an
unwindowed stream-stream join keeps every bid forever. Here the state holds, per open entity, its row
and the best right row so far (one row), plus the right rows a later entity could still take (those
not yet behind the watermark); an entity's row is emitted and dropped when the watermark passes its
close. So the state is bounded by the open entities, whatever the run's length.

The input is both sides in one stream, grouped by a bucket of the join key's group (one Python call
per bucket and micro-batch, the bucket's entities in one frame, merge/spark/frame_state.py). The step
over that frame is merge/winner.py's. During a burst, key groups the workers hold arrive as receipts
of records stashed at the agent, and the processor runs each such group's batch on a worker through
a seal, by merge/keyed_groups.py's rule (ADR 0024): the group's outputs are the processor's own, in
the same batch, and its bookkeeping is checkpointed with the rest of the state. Timestamps
cross into Python as int64 microseconds; the other side's integer columns are zeros, not nulls, so
pandas keeps them int64. Exactly-once comes from Spark: state and timers are checkpointed with the
epoch, and a replayed epoch re-sends the same rows. The best of the already-best row and a candidate
is idempotent, so a right row offered twice changes nothing.

Rows that Spark's watermark calls late are dropped, as every Spark stateful operator does: an entity
whose close is already behind the watermark when it arrives, a right row no open entity can take and
that no later one could (its time is behind the watermark).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pandas as pd
import polars as pl
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import IntegralType, StructField, StructType, TimestampType

from core.offload_plan import KEY_GROUPS
from core.plan import WindowAggregate, WinnerAtClose
from merge.keyed_batch import RECEIPT_SIDE, Fetch, SealService, run_batch
from merge.keyed_groups import GROUP, RECEIPT, GroupState
from merge.partials import latest_partial_schema
from merge.spark.frame_state import FrameValue, NextTimer, input_frame
from merge.winner import SIDE, WinnerSpec, WinnerState, key_column

_BUCKET = "sponge_bucket"  # the group: a bucket of key groups


class WinnerProcessor(StatefulProcessor):
    """The state of one bucket of key groups: the VM-held entities in two frames, the batch itself
    merge/keyed_batch.py's, and (with a seal service) which groups workers hold."""

    def __init__(self, spec: WinnerSpec, service: SealService | None = None) -> None:
        self.spec = spec
        self.service = service
        self.names = [*spec.columns, GROUP, *RECEIPT]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.open = FrameValue(handle, "open")
        self.pending = FrameValue(handle, "pending")
        self.timer = NextTimer(handle, "next_timer")
        self.groups = FrameValue(handle, "groups")

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        watermark = timerValues.getCurrentWatermarkInMs()
        yield from self._run(input_frame(rows, self.names, list(self.spec.timestamps)), watermark)

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        watermark = max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs())
        yield from self._run(None, watermark)

    def _run(self, new: pl.DataFrame | None, watermark_ms: int) -> Iterator[pd.DataFrame]:
        s = self.spec
        vm = WinnerState(self.open.get(), self.pending.get())
        held = self._held() if self.service is not None else {}
        fetch = self.service.fetch if self.service is not None else Fetch.LAZY
        batch = run_batch(s, self.service, fetch, vm, held, new, watermark_ms)
        if batch.state.open is not None:
            self.open.put(batch.state.open)
        if batch.state.pending is not None:
            self.pending.put(batch.state.pending)
        if self.service is not None:  # without one, no group is ever held elsewhere
            self._keep_held(batch.held)
        self.timer.ensure(batch.next_due_ms, watermark_ms)
        for out in batch.outs:
            yield out.to_pandas()

    def _held(self) -> dict[int, GroupState]:
        frame = self.groups.get()
        if frame is None:
            return {}
        return {
            r["group"]: GroupState(r["on_workers"], r["version"], r["next_due_ms"])
            for r in frame.iter_rows(named=True)
        }

    def _keep_held(self, held: Mapping[int, GroupState]) -> None:
        kept = {g: st for g, st in held.items() if st != GroupState()}
        self.groups.put(
            pl.DataFrame(
                {
                    "group": list(kept),
                    "on_workers": [st.on_workers for st in kept.values()],
                    "version": [st.version for st in kept.values()],
                    "next_due_ms": [st.next_due_ms for st in kept.values()],
                },
                schema=_HELD,
            )
        )

    def close(self) -> None:
        pass


_HELD = {"group": pl.Int64, "on_workers": pl.Boolean, "version": pl.Int64, "next_due_ms": pl.Int64}


def _blank(field: StructField) -> Column:
    t = "bigint" if isinstance(field.dataType, TimestampType) else field.dataType
    value = F.lit(0) if isinstance(field.dataType, IntegralType | TimestampType) else F.lit(None)
    return value.cast(t).alias(field.name)


def _no_receipt() -> list[Column]:
    return [F.lit("").alias(RECEIPT[0]), *[F.lit(0).cast("bigint").alias(c) for c in RECEIPT[1:]]]


def _staged(df: DataFrame, side: int, keys: tuple[str, ...], other: StructType) -> DataFrame:
    """One side's rows in the operator's input layout; the other side's columns are typed blanks."""

    def own(field) -> Column:  # type: ignore[no-untyped-def]
        c = F.col(field.name)
        return (F.unix_micros(c) if isinstance(field.dataType, TimestampType) else c).alias(field.name)

    mine = [own(f) for f in df.schema.fields]
    blanks = [_blank(f) for f in other.fields]
    group = F.pmod(F.xxhash64(*[F.col(k) for k in keys]), F.lit(KEY_GROUPS)).cast("int").alias(GROUP)
    cols = [F.lit(side).alias(SIDE), *[F.col(k).alias(key_column(i)) for i, k in enumerate(keys)]]
    return df.select(*cols, *(mine + blanks if side == 0 else blanks + mine), group, *_no_receipt())


def _receipts(
    df: DataFrame, entity: str, left: DataFrame, right: DataFrame, keys: tuple[str, ...]
) -> DataFrame:
    """A keyed input's receipts (router/keyed_route.py) in the operator's input layout."""
    key_types = [left.schema[k] for k in keys]
    cols = [
        F.lit(RECEIPT_SIDE).alias(SIDE),
        *[_blank(StructField(key_column(i), f.dataType)) for i, f in enumerate(key_types)],
        *[_blank(f) for f in (*left.schema.fields, *right.schema.fields)],
        F.col(GROUP).cast("int").alias(GROUP),
        F.lit(entity).alias(RECEIPT[0]),
        *[F.col(c).cast("bigint").alias(c) for c in RECEIPT[1:]],
    ]
    return df.select(*cols)


def winner_at_close(
    left: DataFrame,
    right: DataFrame,
    op: WinnerAtClose,
    receipts: Mapping[str, DataFrame] | None = None,
    service: SealService | None = None,
    then: WindowAggregate | None = None,
) -> DataFrame:
    """`op` over its two inputs: one row per entity that has a winner, its columns then the winner's;
    with `then` (core/fusions.py `closed_aggregates`), those rows in `then`'s partial form instead.
    With `receipts` (by entity) and `service`, the key groups workers hold run there (ADR 0024)."""
    timestamps = {
        f.name for f in (*left.schema.fields, *right.schema.fields) if isinstance(f.dataType, TimestampType)
    }
    spec = WinnerSpec.of(op, left.columns, right.columns, timestamps, then)
    buckets = int(left.sparkSession.conf.get("spark.sql.shuffle.partitions") or "1")
    both = _staged(left, 0, op.left_keys, right.schema).unionByName(
        _staged(right, 1, op.right_keys, left.schema)
    )
    for entity, df in (receipts or {}).items():
        both = both.unionByName(_receipts(df, entity, left, right, op.left_keys))
    both = both.withColumn(_BUCKET, F.pmod(F.col(GROUP), F.lit(buckets)))
    out = StructType([*left.schema.fields, *right.schema.fields])
    if then is not None:
        rows = to_arrow_schema(out, timezone="UTC")  # the zone is only a label on UTC micros
        out = from_arrow_schema(latest_partial_schema(then, rows), prefer_timestamp_ntz=False)
    return both.groupBy(_BUCKET).transformWithStateInPandas(
        statefulProcessor=WinnerProcessor(spec, service if receipts else None),
        outputStructType=out,
        outputMode="Append",
        timeMode="EventTime",
        eventTimeColumnName=op.closes,
    )
