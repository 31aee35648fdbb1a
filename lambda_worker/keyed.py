"""A keyed stage's step on a worker: a key group's state and a batch's records in, the new state out.

Why the worker runs the VM's own step: a key group held by workers during a burst must decide exactly
what the VM's operator would have (ADR 0024), so the worker runs the same pure step (merge/winner.py,
merge/join_step.py) over the state and rows the agent packs into one table (merge/keyed_groups.py).
The stashed records are the sources' own: the worker first runs each input's stateless prefix
(the transient chain up to the key_by) and lays the rows out as the operator's input, as the Spark
lowering does on the VM (merge/spark/keyed_processor.py).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from core.arrow_types import ARROW_TYPES
from core.errors import PlanError
from core.expr import DType
from core.fusions import closed_aggregates
from core.keyed_stages import keyed_stages, plan_routed, stepped
from core.plan import LatestAggregate, LogicalPlan, WindowAggregate, WindowJoin, WinnerAtClose
from core.wire.arrow_ipc import decode, encode
from lambda_worker.transient import TransientProgram
from merge.join_step import JoinStep
from merge.keyed_groups import GROUP, Frames, groups_of, read_answer, read_request, seal_answer, seal_request
from merge.keyed_step import SIDE, KeyedStep, key_column, keys_of, next_due_by_group, select
from merge.latest_step import LatestStep
from merge.pane_step import PaneStep
from merge.partials import partial_form
from merge.winner import WinnerSpec

WARM_KEYS = 64  # keys of the made-up batch that warms a keyed program
WarmBatch = tuple[Frames, dict[str, pl.DataFrame], pl.DataFrame, int]  # state, records, rows, watermark
_WARM_BASE_MS = 1_000_000  # its rows' event times start here (ms); any instant would do


def _polars_type(arrow: pa.DataType) -> pl.DataType:
    return pl.from_arrow(pa.array([], arrow)).dtype  # type: ignore[union-attr]


def _made_up(dtype: pl.DataType, n: int, base_us: int) -> pl.Series:
    """n values of `dtype` for a made-up batch: 0..n-1 for numbers (distinct keys), a ms apart from
    `base_us` for times, blanks otherwise."""
    if dtype.is_numeric():
        return pl.Series(range(n), dtype=pl.Int64).cast(dtype)
    if isinstance(dtype, pl.Datetime):
        return pl.Series([base_us + 1000 * i for i in range(n)], dtype=pl.Int64).cast(dtype)
    if dtype == pl.Boolean:
        return pl.Series([False] * n, dtype=pl.Boolean)
    if dtype == pl.Utf8:
        return pl.Series([""] * n, dtype=pl.Utf8)
    return pl.Series([None] * n, dtype=dtype)


@dataclass(frozen=True)
class _Input:
    entity: str
    prefix: TransientProgram
    keys: tuple[str, ...]  # the operator's key columns on this input (after the prefix)
    source_keys: tuple[str, ...]  # the same keys as the source's columns (core/keyed_stages.py)
    source: dict[str, pl.DataType]  # the source's columns and their types


@dataclass(frozen=True)
class KeyedProgram:
    """The step of one keyed operator of a plan, over packed seal requests."""

    query: str
    node_id: str
    spec: KeyedStep
    inputs: tuple[_Input, ...]  # by port
    types: dict[str, pl.DataType]  # every input column's type, so a one-sided batch is typed whole
    sides: tuple[tuple[str, ...], tuple[str, ...]]  # each input's columns, by port
    fused: tuple[str, ...] = ()  # the key_by and aggregate whose partials the step emits (`spec.then`)

    @classmethod
    def from_plan(cls, plan: LogicalPlan, node_id: str) -> KeyedProgram:
        """The step of keyed operator `node_id`: fed by sources' keyed chains (whose stateless prefixes
        the worker runs first), or through the VM (a stage of the plan's key groups: no prefix)."""
        op = plan.node(node_id).op
        stage = next((s for s in keyed_stages(plan) if s.op_id == node_id), None)
        if not stepped(op) or (stage is None and node_id not in plan_routed(plan)):
            hint = "winner_at_close, unwindowed joins, latest_aggregate and by-key aggregates have one"
            raise PlanError(f"{op.kind} {node_id!r} has no keyed step", hint=hint)
        schemas = [plan.schemas.get(e.src) for e in sorted(plan.in_edges(node_id), key=lambda e: e.port)]
        if any(schema is None for schema in schemas):
            raise PlanError(f"plan {plan.name!r} carries no schemas", hint="build it with the query builder")
        left, right = schemas[0] or {}, (schemas[1] if len(schemas) > 1 else None) or {}
        stamps = {c for c, t in (*left.items(), *right.items()) if t == DType.TIMESTAMP}
        fused = closed_aggregates(plan).get(node_id, ())
        spec: KeyedStep
        if isinstance(op, WindowJoin):
            spec, keys = JoinStep.of(op, list(left), list(right)), (op.left_keys, op.right_keys)
        elif isinstance(op, LatestAggregate):
            spec, keys = LatestStep.of(op, stamps), (op.keys, ())
        elif isinstance(op, WindowAggregate):  # fed its rows in partial form, not the records
            spec, keys = PaneStep.of(op), (op.keys, ())
            left = partial_form(op, left)
        else:
            assert isinstance(op, WinnerAtClose)
            then = plan.node(fused[-1]).op if fused else None
            assert then is None or isinstance(then, WindowAggregate)
            spec, keys = (
                WinnerSpec.of(op, list(left), list(right), stamps, then),
                (op.left_keys, op.right_keys),
            )
        inputs = tuple(
            _Input(
                i.entity,
                TransientProgram.from_plan(plan, i.node_ids),
                keys[i.port],
                i.keys,
                {c: _polars_type(ARROW_TYPES[t]) for c, t in (plan.schemas.get(i.source_id) or {}).items()},
            )
            for i in (stage.inputs if stage is not None else ())
        )
        arrow = {c: ARROW_TYPES[t] for c, t in (*left.items(), *right.items())}
        arrow |= {SIDE: pa.int32(), **{key_column(i): arrow[k] for i, k in enumerate(keys[0])}}
        types = {c: _polars_type(t) for c, t in arrow.items()}
        return cls(plan.name, node_id, spec, inputs, types, (tuple(left), tuple(right)), fused)

    def staged(self, parts: dict[str, pl.DataFrame], counts: dict[str, int] | None = None) -> pl.DataFrame:
        """The stashed records of each input run through its prefix (counted per node with `counts`)
        and laid out as the step's input."""
        s = self.spec
        frames = [pl.DataFrame(schema={c: self.types[c] for c in s.columns})]
        for port, inp in enumerate(self.inputs):
            records = parts.get(inp.entity)
            if records is None or records.height == 0:
                continue
            rows = pl.from_arrow(inp.prefix.run_table(records.drop(GROUP, strict=False).to_arrow(), counts))
            assert isinstance(rows, pl.DataFrame)
            if isinstance(s, PaneStep):  # an aggregate's step reads its rows in partial form
                rows = s.lifted(rows)
            frames.append(
                rows.select(
                    pl.lit(port, pl.Int32).alias(SIDE),
                    *[pl.col(k).alias(key_column(i)) for i, k in enumerate(inp.keys)],
                    *self.sides[port],
                )
            )
        return pl.concat(frames, how="diagonal_relaxed").select(s.columns)

    def touched(self, parts: dict[str, pl.DataFrame], forwarded: pl.DataFrame | None) -> pl.DataFrame:
        """The keys a batch's records are of, read off the sources' own columns (a record its prefix
        would drop still names its key: fetching a key too many is harmless, one too few is not)."""
        keys = self.spec.keys
        frames = [pl.DataFrame(schema={k: self.types[k] for k in keys})]
        for inp in self.inputs:
            records = parts.get(inp.entity)
            if records is not None and records.height:
                named = zip(inp.source_keys, keys, strict=True)
                frames.append(records.select(pl.col(c).cast(self.types[k]).alias(k) for c, k in named))
        if forwarded is not None and forwarded.height:
            frames.append(forwarded.select(keys))
        return pl.concat(frames, how="vertical_relaxed").unique()

    def select(self, state: Frames, touched: pl.DataFrame, watermark_ms: int) -> tuple[Frames, Frames]:
        """(the state a batch of the `touched` keys reads at `watermark_ms`, the rest)."""
        return select(self.spec, state, touched, watermark_ms)

    def joined(self, *states: Frames) -> Frames:
        return self.spec.joined(*states)

    def of_groups(self, state: Frames, groups: Collection[int]) -> Frames:
        """The rows of `state` whose key is in one of `groups` (ADR 0023)."""
        wanted = sorted(groups)
        return {
            name: None if f is None else f.filter(groups_of(f, self.spec.keys).is_in(wanted))
            for name, f in state.items()
        }

    def next_due_by_group(self, state: Frames, groups: Collection[int]) -> dict[int, int | None]:
        """When each of `groups` next has something due in `state` (ADR 0023's groups)."""
        return next_due_by_group(self.spec, state, groups)

    def key_count(self, state: Frames) -> int:
        keys = keys_of(self.spec, state)
        return keys.height if keys is not None else 0

    def records_in(self, data: pa.Table) -> int:
        """The routed records a seal carries: the stashed ones. The VM's rows it forwards (a stage
        fed through the VM, a group switched mid-batch) were not routed, and the group's state is no
        record: `operators_offloaded` counts what the operator ran over."""
        _, parts, _, _ = read_request(data)
        return sum(f.height for f in parts.values())

    def warm_batch(self, keys: int = WARM_KEYS) -> WarmBatch:
        """A made-up batch over `keys` keys: (a state holding them, source records of each input, the
        step's rows for them, a watermark past every row). Its values mean nothing; what it is for is
        that running it takes the step through the operations a real batch does (`warm`)."""
        base_us = _WARM_BASE_MS * 1000
        frames = []
        for port, side in enumerate(self.sides):
            if not side and port:
                continue
            cols = {SIDE: pl.Series([port] * keys, dtype=pl.Int32)}
            cols |= {k: _made_up(self.types[k], keys, base_us) for k in self.spec.keys}
            cols |= {c: _made_up(self.types[c], keys, base_us) for c in side}
            frames.append(pl.DataFrame(cols))
        rows = pl.concat(frames, how="diagonal_relaxed")
        rows = rows.with_columns(
            pl.lit(None, self.types[c]).alias(c) for c in self.spec.columns if c not in rows.columns
        ).select(self.spec.columns)
        parts = {
            inp.entity: pl.DataFrame({c: _made_up(t, keys, base_us) for c, t in inp.source.items()})
            for inp in self.inputs
            if inp.source
        }
        state = self.spec.step({}, rows, _WARM_BASE_MS - 1).state
        return state, parts, rows, _WARM_BASE_MS + 2 * keys

    def warm(self, batch: WarmBatch | None = None) -> Frames:
        """Run one made-up seal (`batch`, else `warm_batch()`'s), start to end: the first seal a worker
        or the agent runs otherwise pays polars' first runs of each operation (tens of ms on the first
        batches after a switch: ADR 0045). Counts nothing: no record of anyone's ran. The seal's new
        state, for a caller that warms what comes after it."""
        state, parts, rows, watermark_ms = batch or self.warm_batch()
        request = encode(seal_request(state, parts, rows, watermark_ms), "lz4")
        return read_answer(decode(encode(self.run_table(decode(request)), "lz4")))[0]

    def run_table(self, data: pa.Table, counts: dict[str, int] | None = None) -> pa.Table:
        """One seal: the packed request in, the packed answer out. The records count for the prefix
        nodes they ran through and for the operator."""
        state, parts, forwarded, watermark_ms = read_request(data)
        new = self.staged(parts, counts)
        if forwarded is not None and forwarded.height:
            new = pl.concat([new, forwarded.select(self.spec.columns)], how="vertical_relaxed")
        if counts is not None:
            counts[self.node_id] = counts.get(self.node_id, 0) + new.height
        stepped = self.spec.step(state, new, watermark_ms)
        if counts is not None and self.fused:
            for node in self.fused:
                counts[node] = counts.get(node, 0) + stepped.decided
        return seal_answer(dict(stepped.state), stepped.out, stepped.next_due_ms)
