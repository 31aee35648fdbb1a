"""The query API: a fluent builder that records operators into a LogicalPlan and checks schemas.

    q = QueryBuilder("q1")
    bids = q.source("bid", BID_COLUMNS)
    bids.map(auction=col("auction"), price=col("price") * 0.908).sink()
    plan = q.build()

Every call type-checks its expressions against the stream's schema, so a wrong column name fails at
build time with the list of columns that do exist, not inside a Spark job.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.aggregate_signatures import signature
from core.errors import PlanError
from core.expr import DType, Expr
from core.plan import (
    WINDOW,
    AggCall,
    Comm,
    Edge,
    Filter,
    FlatMap,
    KeyBy,
    LatestAggregate,
    LogicalPlan,
    Map,
    Node,
    Operator,
    Sink,
    Source,
    TopK,
    WindowAggregate,
    WindowJoin,
    WindowSpec,
    WinnerAtClose,
)

Columns = dict[str, DType]


class QueryBuilder:
    def __init__(self, name: str) -> None:
        self.name = name
        self._nodes: list[Node] = []
        self._edges: list[Edge] = []
        self.schemas: dict[str, Columns] = {}
        self.record_fields: dict[tuple[str, str], Columns] = {}

    def _add(self, op: Operator, inputs: list[tuple[Stream, Comm]], schema: Columns) -> Stream:
        node_id = f"{op.kind}{len(self._nodes)}"
        self._nodes.append(Node(node_id, op))
        for port, (s, comm) in enumerate(inputs):
            self._edges.append(Edge(s.node_id, node_id, comm, port))
        self.schemas[node_id] = schema
        return Stream(self, node_id, schema)

    def source(self, entity: str, columns: Columns) -> Stream:
        return self._add(Source(entity, tuple(columns.items())), [], dict(columns))

    def build(self) -> LogicalPlan:
        if not any(isinstance(n.op, Sink) for n in self._nodes):
            raise PlanError(f"query {self.name!r} has no sink", hint="end the query with .sink()")
        return LogicalPlan(self.name, tuple(self._nodes), tuple(self._edges), schemas=dict(self.schemas))


class UnknownOperator(PlanError, AttributeError):
    """A stream asked for an operator the compiler does not know (still an AttributeError: `hasattr`
    and the like keep working)."""


@dataclass
class Stream:
    builder: QueryBuilder
    node_id: str
    schema: Columns

    def __getattr__(self, name: str) -> object:
        """Only reached for a name a stream does not have: a user's misspelt or unsupported operator
        fails on its line, naming the operators that exist."""
        if name.startswith("_"):
            raise AttributeError(name)
        known = sorted(n for n, v in vars(Stream).items() if callable(v) and not n.startswith("_"))
        raise UnknownOperator(f"a stream has no operator {name!r}", hint=f"operators: {', '.join(known)}")

    @property
    def _keyed(self) -> bool:
        return isinstance(self._op, KeyBy)

    @property
    def _op(self) -> Operator:
        return next(n.op for n in self.builder._nodes if n.id == self.node_id)

    def _comm(self) -> Comm:
        """The edge leaving a key_by is a shuffle; every other edge here is one-to-one."""
        return Comm.SHUFFLE if self._keyed else Comm.ONE_TO_ONE

    def _check(self, e: Expr) -> DType:
        return e.dtype(self.schema)

    def map(self, **projections: Expr) -> Stream:
        schema = {name: self._check(e) for name, e in projections.items()}
        return self.builder._add(Map(tuple(projections.items())), [(self, self._comm())], schema)

    def filter(self, predicate: Expr) -> Stream:
        if self._check(predicate) != DType.BOOL:
            raise PlanError("filter needs a boolean predicate")
        return self.builder._add(Filter(predicate), [(self, self._comm())], dict(self.schema))

    def flat_map(self, explode: str) -> Stream:
        if self.schema.get(explode) != DType.RECORDS:
            raise PlanError(f"flat_map explodes a list of records; {explode!r} is not one")
        fields = self.builder.record_fields[(self.node_id, explode)]
        schema = {k: v for k, v in self.schema.items() if k != explode} | fields
        return self.builder._add(FlatMap(explode), [(self, self._comm())], schema)

    def key_by(self, *keys: str) -> Stream:
        for k in keys:
            if k not in self.schema:
                raise PlanError(f"key {k!r} is not a column", hint=f"columns: {', '.join(self.schema)}")
        return self.builder._add(KeyBy(tuple(keys)), [(self, self._comm())], dict(self.schema))

    def _joined_schema(self, other: Stream, what: str, shared: frozenset[str] = frozenset()) -> Columns:
        """Both inputs' columns, refused when they share any but `shared`."""
        overlap = (set(self.schema) & set(other.schema)) - shared
        if overlap:
            raise PlanError(f"{what} inputs share columns {sorted(overlap)}", hint="rename them with .map()")
        return dict(self.schema) | dict(other.schema)

    def _call_type(self, call: AggCall) -> DType:
        """The result type of an aggregate call over this stream, its argument checked."""
        fn = signature(call.fn)
        if fn.needs_arg and call.arg is None:
            raise PlanError(f"aggregate {call.fn} needs an argument")
        return fn.result_type(self._check(call.arg) if call.arg is not None else None)

    def _require_keyed(self, what: str) -> None:
        if not self._keyed:
            raise PlanError(f"{what} needs a keyed stream", hint="call .key_by(...) first (key_by() for all)")

    def _window_schema(self, window: WindowSpec | None) -> Columns:
        if window is None:
            if WINDOW not in self.schema:
                raise PlanError("no window to regroup by", hint="pass window=WindowSpec(...) upstream")
            return {}
        if self.schema.get(window.on) != DType.TIMESTAMP:
            raise PlanError(f"window column {window.on!r} must be a timestamp")
        return {WINDOW: DType.WINDOW}

    def window_aggregate(self, window: WindowSpec | None, **aggs: AggCall) -> Stream:
        self._require_keyed("window_aggregate")
        keys = self._op.keys  # type: ignore[attr-defined]
        schema: Columns = self._window_schema(window) | {k: self.schema[k] for k in keys}
        calls = []
        records: dict[str, Columns] = {}
        for out, call in aggs.items():
            schema[out] = self._call_type(call)
            if schema[out] == DType.RECORDS:
                records[out] = {f: self.schema[f] for f in call.fields}
            calls.append(AggCall(out, call.fn, call.arg, call.fields, call.n, call.order_by))
        op = WindowAggregate(tuple(keys), window, tuple(calls))
        stream = self.builder._add(op, [(self, Comm.SHUFFLE)], schema)
        for out, fields in records.items():
            self.builder.record_fields[(stream.node_id, out)] = fields
        return stream

    def join(
        self,
        other: Stream,
        window: WindowSpec | None = None,
        condition: Expr | None = None,
        right_on: str | None = None,
    ) -> Stream:
        self._require_keyed("join")
        other._require_keyed("join")
        schema = self._joined_schema(other, "join", frozenset({WINDOW} if window else ()))
        right_on = right_on or (window.on if window else "date_time")
        if window is not None:
            self._window_schema(window)
            if other.schema.get(right_on) != DType.TIMESTAMP:
                raise PlanError(f"right window column {right_on!r} must be a timestamp of the right input")
            schema[WINDOW] = DType.WINDOW
        if condition is not None and condition.dtype(schema) != DType.BOOL:
            raise PlanError("join condition must be boolean")
        op = WindowJoin(
            self._op.keys,
            other._op.keys,
            window,
            right_on,
            condition,  # type: ignore[attr-defined]
        )
        return self.builder._add(op, [(self, Comm.SHUFFLE), (other, Comm.SHUFFLE)], schema)

    def _require_columns(self, kind: str, *names: str, dtype: DType | None = None) -> None:
        for name in names:
            if name not in self.schema:
                raise PlanError(
                    f"{kind} column {name!r} is not a column", hint=f"columns: {', '.join(self.schema)}"
                )
            if dtype is not None and self.schema[name] != dtype:
                raise PlanError(
                    f"{kind} column {name!r} must be a {dtype.value}, is {self.schema[name].value}"
                )

    def winner_at_close(
        self, other: Stream, *, opens: str, closes: str, at: str, by: str, condition: Expr | None = None
    ) -> Stream:
        """Per row of this stream (an entity alive over [opens, closes)), the row of `other` with the
        same key, opens <= at < closes and `condition`, with the highest `by` (earliest `at` on ties),
        decided when event time passes `closes` (core/plan.py WinnerAtClose)."""
        self._require_keyed("winner_at_close")
        other._require_keyed("winner_at_close")
        schema = self._joined_schema(other, "winner_at_close")
        self._require_columns("opens/closes", opens, closes, dtype=DType.TIMESTAMP)
        other._require_columns("at", at, dtype=DType.TIMESTAMP)
        other._require_columns("by", by)
        if other.schema[by] not in (DType.INT64, DType.FLOAT64):
            raise PlanError(f"winner_at_close ranks by a number; {by!r} is a {other.schema[by].value}")
        if condition is not None and condition.dtype(schema) != DType.BOOL:
            raise PlanError("winner_at_close condition must be boolean")
        op = WinnerAtClose(
            self._op.keys,
            other._op.keys,
            opens,
            closes,
            at,
            by,
            condition,  # type: ignore[attr-defined]
        )
        return self.builder._add(op, [(self, Comm.SHUFFLE), (other, Comm.SHUFFLE)], schema)

    def latest_aggregate(
        self, n: int, *, order_by: tuple[str, ...], at: str, carry: tuple[str, ...] = (), **aggs: AggCall
    ) -> Stream:
        """For each row, `aggs` over the n greatest rows of its key by `order_by` whose event time `at`
        is not after its own (core/plan.py LatestAggregate)."""
        self._require_keyed("latest_aggregate")
        if n <= 0 or not order_by:
            raise PlanError("latest_aggregate needs n > 0 and an order_by")
        self._require_columns("order_by/carry", *order_by, *carry)
        self._require_columns("at", at, dtype=DType.TIMESTAMP)
        keys = self._op.keys  # type: ignore[attr-defined]
        schema: Columns = {k: self.schema[k] for k in (*keys, *carry)}
        calls = []
        for out, call in aggs.items():
            if signature(call.fn).keeps_records:
                raise PlanError(
                    f"latest_aggregate computes scalars over the kept rows; {call.fn} keeps records"
                )
            schema[out] = self._call_type(call)
            calls.append(AggCall(out, call.fn, call.arg))
        op = LatestAggregate(tuple(keys), at, n, tuple(order_by), tuple(carry), tuple(calls))
        return self.builder._add(op, [(self, Comm.SHUFFLE)], schema)

    def top_k(self, k: int, by: str, *, with_ties: bool = True) -> Stream:
        self._require_keyed("top_k")
        if by not in self.schema or WINDOW not in self.schema:
            raise PlanError("top_k ranks a windowed stream by one of its columns")
        op = TopK(k, by, tuple(self._op.keys), with_ties)  # type: ignore[attr-defined]
        return self.builder._add(op, [(self, Comm.SHUFFLE)], dict(self.schema))

    def sink(self, name: str = "output") -> Stream:
        return self.builder._add(Sink(name), [(self, self._comm())], dict(self.schema))


def agg(fn: str, arg: Expr | None = None, **kw: object) -> AggCall:
    """Shorthand for an AggCall whose output name is filled in by window_aggregate(name=...)."""
    return AggCall("", fn, arg, **kw)  # type: ignore[arg-type]
