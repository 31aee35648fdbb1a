"""Transient operators: a chain of a query's operators, executed on Arrow with polars.

Why the same operator values: a transient operator (TO) is the paper's clone of a VM operator,
prepared to run on a Lambda worker (section 4.1). It is built from the very `LogicalPlan` nodes the
Spark lowering uses, and every expression goes through `core.expr_polars.to_polars`, so the worker
path and the VM path compute the same thing by construction; a final window aggregate becomes its
*partial* form (merge/partials.py), which the VM merges into Spark's state.

A chain may cross a shuffle edge into its final aggregate: the router (on a VM) decides which records
a worker sees, the worker pre-aggregates whatever subset it gets, and the partial rows travel back
by key to the merge operator, which is exactly why only mergeable aggregates end a chain. A chain
that reaches a join whose only reader counts its pairs ends there too: the worker counts its side's
records per window and key (merge/join_count.py), and those counts stand for the join's and the
count's work on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa

from core.errors import PlanError
from core.expr import Col
from core.expr_polars import to_polars
from core.fusions import join_counts
from core.plan import WINDOW, Filter, FlatMap, KeyBy, LogicalPlan, Map, Operator, WindowAggregate, WindowJoin
from merge.algebra import check_supported
from merge.join_count import JoinSide
from merge.partials import WINDOW_END, WINDOW_START, normalise_schema, partial_aggregate

TRANSIENT_SUFFIX = "~to"
_STATELESS = (Map, Filter, KeyBy, FlatMap)


def base_node_id(node_id: str) -> str:
    """Accept both a logical node id and its transient id from the rewritten DAG (`<id>~to`)."""
    return node_id[: -len(TRANSIENT_SUFFIX)] if node_id.endswith(TRANSIENT_SUFFIX) else node_id


def _map(op: Map, df: pl.DataFrame) -> pl.DataFrame:
    exprs: list[pl.Expr] = []
    for name, e in op.projections:
        if WINDOW in e.columns():
            # The window travels as window_start/window_end; only a plain pass-through is meaningful.
            if not (isinstance(e, Col) and name == WINDOW):
                raise PlanError(
                    f"map output {name!r} computes on the window column; only window=col('window') works"
                )
            exprs += [pl.col(WINDOW_START), pl.col(WINDOW_END)]
        else:
            exprs.append(to_polars(e).alias(name))
    return df.select(exprs)


def _flat_map(op: FlatMap, df: pl.DataFrame) -> pl.DataFrame:
    # Like Spark's explode: a null or empty list yields no row; the struct's fields become columns.
    return df.explode(op.explode, keep_nulls=False, empty_as_null=False).unnest(op.explode)


def _apply(op: Operator, df: pl.DataFrame) -> pl.DataFrame:
    if isinstance(op, Map):
        return _map(op, df)
    if isinstance(op, Filter):
        return df.filter(to_polars(op.predicate))
    if isinstance(op, KeyBy):
        return df  # partitioning is the router's business; a worker sees its records already routed
    if isinstance(op, FlatMap):
        return _flat_map(op, df)
    raise PlanError(f"no transient form for {op.kind!r}")


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    if table.num_rows == 0:
        return _empty_batch(table.schema)
    return table.combine_chunks().to_batches()[0]


@dataclass(frozen=True)
class CountedJoin:
    """A chain's end at one side of a join whose pairs only a count reads (core/fusions.py)."""

    join: WindowJoin
    count: WindowAggregate
    side: int
    fused: tuple[str, ...]  # the key_by and count nodes whose work the side's counts stand for

    def side_of(self, columns: Sequence[str]) -> JoinSide:
        return JoinSide.of(self.join, self.count, self.side, columns)


def _counted_join(plan: LogicalPlan, join_id: str, before: str | None) -> CountedJoin:
    """The side of join `join_id` that node `before` feeds, when a count alone reads the join."""
    counted = join_counts(plan).get(join_id)
    ports = [e.port for e in plan.in_edges(join_id) if e.src == before]
    if counted is None or len(ports) != 1:
        raise PlanError(
            f"window_join {join_id!r} has no transient form here",
            hint="a chain may end at one input of a tumbling-window join whose pairs only a count reads",
        )
    count = plan.node(counted[1]).op
    assert isinstance(count, WindowAggregate)
    return CountedJoin(plan.node(join_id).op, count, ports[0], counted)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TransientProgram:
    """The transient form of a chain of operators: Arrow records in, rows or partial states out."""

    query: str
    node_ids: tuple[str, ...]
    ops: tuple[Operator, ...]
    counted_join: CountedJoin | None = None
    _schemas: dict[pa.Schema, pa.Schema] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_plan(cls, plan: LogicalPlan, node_ids: Sequence[str]) -> TransientProgram:
        """Compile the chain `node_ids` of `plan`, checking that it is a chain a worker can run.

        Each node after the first must have exactly one input, the node before it; only Map, Filter,
        KeyBy and FlatMap may appear, and as the last node a WindowAggregate or a join whose pairs
        only a count reads.
        """
        if isinstance(node_ids, str) or not node_ids:
            raise PlanError("a transient program needs a non-empty list of node ids")
        ids = tuple(base_node_id(n) for n in node_ids)
        known = [n.id for n in plan.nodes]
        counted_join: CountedJoin | None = None
        ops: list[Operator] = []
        for i, nid in enumerate(ids):
            if nid not in known:
                raise PlanError(
                    f"node {nid!r} is not in plan {plan.name!r}", hint=f"nodes: {', '.join(known)}"
                )
            op = plan.node(nid).op
            last = i == len(ids) - 1
            if isinstance(op, (WindowAggregate, WindowJoin)) and not last:
                raise PlanError(
                    f"{op.kind} {nid!r} must end the transient chain",
                    hint="its state goes back to the VM's merge operator; chain again after it",
                )
            if isinstance(op, WindowAggregate):
                check_supported(op)
            elif isinstance(op, WindowJoin):
                counted_join = _counted_join(plan, nid, ids[i - 1] if i else None)
            elif not isinstance(op, _STATELESS):
                raise PlanError(
                    f"{op.kind} {nid!r} has no transient form yet",
                    hint="transient chains hold map, filter, key_by, flat_map and a final window_aggregate "
                    "or counted join",
                )
            if i > 0 and counted_join is None:
                ins = plan.in_edges(nid)
                if len(ins) != 1 or ins[0].src != ids[i - 1]:
                    srcs = [e.src for e in ins]
                    raise PlanError(
                        f"{nid!r} does not follow {ids[i - 1]!r} in plan {plan.name!r} (its inputs: {srcs})",
                        hint="list the node ids of one chain in order",
                    )
            ops.append(op)
        return cls(plan.name, ids, tuple(ops), counted_join)

    @property
    def aggregate(self) -> WindowAggregate | None:
        """The final window aggregate, whose partial state this program emits, if any."""
        last = self.ops[-1]
        return last if isinstance(last, WindowAggregate) else None

    def input_columns(self) -> frozenset[str] | None:
        """The input columns the chain reads, or None when it passes input columns through unnamed.

        Why: the router sends a worker only these, so a record's unread fields (Q5 reads two of a
        bid's seven, and its long url and extra strings are most of its bytes) are neither built nor
        shipped. A Map or the final aggregate names everything the chain outputs, so the reads up to
        it are the whole need; a chain that ends without one, or flat-maps first, outputs its input
        columns and needs them all.
        """
        needed: set[str] = set()
        for op in self.ops:
            if isinstance(op, Filter):
                needed |= op.predicate.columns()
            elif isinstance(op, KeyBy):
                needed |= set(op.keys)
            elif isinstance(op, Map):
                return frozenset(needed.union(*(e.columns() for _, e in op.projections)))
            elif isinstance(op, WindowJoin):
                assert self.counted_join is not None
                # The count's keys stand for the side's own columns, which are only known with data.
                return frozenset(needed | self.counted_join.side_of(self.counted_join.count.keys).reads)
            elif isinstance(op, WindowAggregate):
                needed |= set(op.keys)
                if op.window is not None:
                    needed.add(op.window.on)
                for call in op.aggs:
                    needed |= {*call.fields, *call.order_by}
                    if call.arg is not None:
                        needed |= call.arg.columns()
                return frozenset(needed)
            else:
                return None
        return None

    def records_in(self, data: pa.Table) -> int:
        """The records a chunk of this program carries: its rows."""
        return data.num_rows

    def run_table(self, data: pa.Table | pa.RecordBatch, counts: dict[str, int] | None = None) -> pa.Table:
        """Run the chain; with `counts`, add the records going into each node under its logical id."""
        df = pl.from_arrow(data)
        assert isinstance(df, pl.DataFrame)
        for node_id, op in zip(self.node_ids, self.ops, strict=True):
            if counts is not None:
                counts[node_id] = counts.get(node_id, 0) + df.height
            if isinstance(op, WindowAggregate):
                return partial_aggregate(op, df.to_arrow())
            if isinstance(op, WindowJoin):
                assert self.counted_join is not None
                if counts is not None:
                    for fused in self.counted_join.fused:
                        counts[fused] = counts.get(fused, 0) + df.height
                df = self.counted_join.side_of(df.columns).counts(df)
                break
            df = _apply(op, df)
        table = df.to_arrow()
        return table.cast(normalise_schema(table.schema))

    def run(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Run the chain over one batch: the output records, or the partial state of the final aggregate."""
        return _one_batch(self.run_table(batch))

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """The schema `run` returns for inputs of `input_schema` (computed once by a dry run)."""
        if input_schema not in self._schemas:
            empty = pa.Table.from_batches([_empty_batch(input_schema)], schema=input_schema)
            self._schemas[input_schema] = self.run_table(empty).schema
        return self._schemas[input_schema]
