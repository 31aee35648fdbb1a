"""A running aggregate over each key's n latest rows, one answer per row: its step, free of Spark.

Why a step of its own (ADR 0020): NEXMark Q6 averages a seller's last 10 winning bids each time one
of the seller's auctions closes; the answer of a row needs the seller's recent history, which no
partial of other rows can stand for. So a worker holding key groups of it runs this same step over
the same state as the VM's processor (merge/spark/latest_aggregate.py, ADR 0028).

The state is two frames: per key, only the n rows the keep rule of `latest_n` keeps (merge/algebra.py
GREATEST_N, spelled by merge/polars_fold.py), and the input rows the watermark has not reached yet.
A row is answered when the watermark reaches its event time `at`, together with every row of the
same instant, so the answer does not depend on how rows were cut into micro-batches: the aggregates
over the n greatest rows by `order_by` among the key's rows whose `at` is not after its own.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import polars as pl

from core.plan import AggCall, LatestAggregate
from merge import polars_fold
from merge.keyed_groups import Frames
from merge.keyed_step import SIDE, Stepped, key_column, next_due, stacked

KEPT, WAITING = "kept", "waiting"
NAMES = (KEPT, WAITING)
_RID = "sponge_rid"  # a due row's number within the micro-batch
_LATEST = "sponge_latest"


@dataclass(frozen=True)
class LatestStep:
    """What the step needs to know, free of Spark objects so it pickles small."""

    op: LatestAggregate
    read: tuple[str, ...]  # the input columns the step reads, in order
    fields: tuple[str, ...]  # the columns the aggregates read, other than the order keys
    timestamps: tuple[str, ...]

    @classmethod
    def of(cls, op: LatestAggregate, timestamps: Collection[str]) -> LatestStep:
        """The step of `op`; `timestamps` names the input's timestamp columns."""
        read = sorted({c for a in op.aggs if a.arg is not None for c in a.arg.columns()})
        fields = tuple(c for c in read if c not in op.order_by)
        columns = tuple(dict.fromkeys((*op.keys, op.at, *op.order_by, *op.carry, *fields)))
        return cls(op, columns, fields, tuple(c for c in columns if c in timestamps))

    @property
    def keys(self) -> list[str]:
        return list(self.op.keys)

    @property
    def columns(self) -> list[str]:
        """The step's input in the keyed layout: the side (always 0: one input), the key renamed as
        every keyed input's is, and the columns it reads (the key among them, by its own name)."""
        return [SIDE, *[key_column(i) for i in range(len(self.op.keys))], *self.read]

    @property
    def keep_call(self) -> AggCall:
        """The keep rule as merge/algebra.py states it: latest_n over the kept columns."""
        return AggCall(_LATEST, "latest_n", fields=self.fields, n=self.op.n, order_by=self.op.order_by)

    @property
    def kept_columns(self) -> list[str]:
        return [*self.op.keys, *self.op.order_by, *self.fields]

    @property
    def out_columns(self) -> list[str]:
        return [*self.op.keys, *self.op.carry, *[a.out for a in self.op.aggs]]

    def latest(self, rows: pl.DataFrame, by: list[str]) -> pl.DataFrame:
        """The n greatest of `rows` per `by`, by the order keys (then the fields), as plain columns."""
        call = self.keep_call
        recs = rows.select(*by, polars_fold.record(call).alias(call.out))
        kept = polars_fold.keep(recs, by, call).explode(call.out).unnest(call.out)
        return kept.rename({f"_k{i}": c for i, c in enumerate(self.op.order_by)})

    def answer(self, kept: pl.DataFrame, due: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The output rows of `due` (rows whose instant the watermark has reached) and the new kept rows."""
        op = self.op
        due = due.with_row_index(_RID)
        rows = due.select(*self.kept_columns, op.at)
        earlier = kept.with_columns(pl.lit(None, dtype=rows.schema[op.at]).alias(op.at))
        candidates = pl.concat([earlier, rows], how="vertical_relaxed").rename({op.at: "sponge_cand_at"})
        pairs = due.select(_RID, *op.keys, op.at).join(
            candidates, on=list(op.keys), how="inner", nulls_equal=True
        )
        pairs = pairs.filter(pl.col("sponge_cand_at").is_null() | (pl.col("sponge_cand_at") <= pl.col(op.at)))
        folded = polars_fold.fold(self.latest(pairs, [_RID]), [_RID], op.aggs, from_records=True)
        folded = folded.with_columns(polars_fold.computed_finishes(op.aggs))
        out = due.select(_RID, *op.keys, *op.carry).join(
            folded.select(_RID, *[a.out for a in op.aggs]), on=_RID
        )
        new_kept = self.latest(pl.concat([kept, rows.drop(op.at)], how="vertical_relaxed"), list(op.keys))
        return out.sort(_RID).drop(_RID), new_kept.select(self.kept_columns)

    def _due_at(self) -> pl.Expr:
        return polars_fold.ceil_ms(pl.col(self.op.at).dt.epoch("us"))

    # ---- the keyed step (merge/keyed_step.py) ----

    def step(self, state: Frames, new: pl.DataFrame, watermark_ms: int) -> Stepped:
        rows = new.select(self.read)
        held = state.get(WAITING)
        waiting = (
            rows if held is None else pl.concat([held, rows.select(held.columns)], how="vertical_relaxed")
        )
        return self._answered(state.get(KEPT), waiting, watermark_ms)

    def expire(self, state: Frames, watermark_ms: int) -> Stepped:
        return self._answered(state.get(KEPT), state.get(WAITING), watermark_ms)

    def _answered(
        self, kept: pl.DataFrame | None, waiting: pl.DataFrame | None, watermark_ms: int
    ) -> Stepped:
        out = None
        if waiting is not None and waiting.height:
            due = waiting.filter(self._due_at() <= watermark_ms)
            waiting = waiting.filter(self._due_at() > watermark_ms)
            if due.height:
                base = kept if kept is not None else due.select(self.kept_columns).clear()
                out, kept = self.answer(base, due)
        state = {KEPT: kept, WAITING: waiting}
        return Stepped(state, out, next_due(self, state), out.height if out is not None else 0)

    def due_keys(self, state: Frames, watermark_ms: int) -> pl.DataFrame | None:
        """The keys of the rows the watermark makes due."""
        waiting = state.get(WAITING)
        if waiting is None or waiting.height == 0:
            return None
        return waiting.filter(self._due_at() <= watermark_ms).select(self.keys)

    @property
    def names(self) -> tuple[str, ...]:
        return NAMES

    def joined(self, *states: Frames) -> Frames:
        return {name: stacked([s.get(name) for s in states]) for name in NAMES}

    def due_at(self) -> dict[str, pl.Expr]:
        return {WAITING: self._due_at().min()}
