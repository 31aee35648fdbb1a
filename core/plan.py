"""The logical DAG: operators as frozen data, edges with their communication pattern.

A plan describes work and never runs it; `core/rewrite.py` turns it into the rewritten DAG of the
Sponge paper (Algorithm 1) and `core/spark/lower.py` translates that into a Spark streaming plan.
Nothing here imports pyspark, so the compiler runs (and is tested) without a JVM.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from core.errors import PlanError
from core.expr import DType, Expr


class Comm(StrEnum):
    """How records travel along an edge between the parallel tasks of two operators."""

    ONE_TO_ONE = "one_to_one"
    SHUFFLE = "shuffle"
    BROADCAST = "broadcast"


@dataclass(frozen=True)
class WindowSpec:
    """Event-time window over column `on`; slide == size means tumbling."""

    size_s: int
    slide_s: int
    on: str = "date_time"

    @property
    def tumbling(self) -> bool:
        return self.size_s == self.slide_s


# Name of the column a windowed operator adds; chained windowed operators group by it.
WINDOW = "window"


@dataclass(frozen=True)
class AggCall:
    """One aggregate in a window aggregate: `out = fn(arg)`.

    `fn` names a signature of `core/aggregate_signatures.py`; how its partial state is built on
    Lambda workers and merged on the VM is merge/algebra.py's.
    """

    out: str
    fn: str
    arg: Expr | None = None
    fields: tuple[str, ...] = ()  # for aggregates that keep records (max_with_ties, latest_n)
    n: int = 0  # for latest_n
    order_by: tuple[str, ...] = ()  # for latest_n


# ---- operators ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operator:
    """Base class. `stateful`/`mergeable` drive the rewriter; `processes_records` marks TO candidates."""

    @property
    def kind(self) -> str:
        return type(self).KIND  # type: ignore[attr-defined]

    @property
    def stateful(self) -> bool:
        return False

    @property
    def mergeable(self) -> bool:
        return False

    @property
    def processes_records(self) -> bool:
        return True

    @property
    def arity(self) -> int:
        return 1


@dataclass(frozen=True)
class Source(Operator):
    KIND = "source"
    entity: str
    columns: tuple[tuple[str, DType], ...]

    @property
    def processes_records(self) -> bool:
        return False

    @property
    def arity(self) -> int:
        return 0


@dataclass(frozen=True)
class Map(Operator):
    """Projection: each output column is an expression over the input row."""

    KIND = "map"
    projections: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True)
class Filter(Operator):
    KIND = "filter"
    predicate: Expr


@dataclass(frozen=True)
class FlatMap(Operator):
    """One output row per element of the list column `explode`; its struct fields become columns."""

    KIND = "flat_map"
    explode: str


@dataclass(frozen=True)
class KeyBy(Operator):
    """Declares the partitioning key; the edge leaving it is a shuffle."""

    KIND = "key_by"
    keys: tuple[str, ...]


@dataclass(frozen=True)
class WindowAggregate(Operator):
    """Grouped aggregation; `window=None` regroups by the window an upstream operator assigned."""

    KIND = "window_aggregate"
    keys: tuple[str, ...]
    window: WindowSpec | None
    aggs: tuple[AggCall, ...]
    # Its state moves to workers by key group instead of merging their partials: how the paper's
    # baselines without merge operators run it (core/ablations.py).
    state_by_key: bool = False

    @property
    def stateful(self) -> bool:
        return True

    @property
    def mergeable(self) -> bool:
        return True


@dataclass(frozen=True)
class WindowJoin(Operator):
    """Inner equi-join of two keyed streams, within the same window when `window` is set."""

    KIND = "window_join"
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    window: WindowSpec | None
    right_window_on: str = "date_time"
    condition: Expr | None = None

    @property
    def stateful(self) -> bool:
        return True

    @property
    def arity(self) -> int:
        return 2


@dataclass(frozen=True)
class TopK(Operator):
    """Per window (and `partition_by`), the k rows with the largest `by`; ties at the k-th kept."""

    KIND = "top_k"
    k: int
    by: str
    partition_by: tuple[str, ...] = ()
    with_ties: bool = True

    @property
    def stateful(self) -> bool:
        return True

    @property
    def mergeable(self) -> bool:
        return True


@dataclass(frozen=True)
class WinnerAtClose(Operator):
    """Per left row, an entity alive over [`opens`, `closes`), the best right row of the same key.

    The best is the right row with the highest `by` among those with opens <= `at` < closes that
    satisfy `condition`; ties go to the earliest `at`, then to the smallest remaining right columns.
    It is decided once, when event time passes `closes` (the output's event time), and the entity's
    state is dropped then; an entity with no such right row emits nothing. NEXMark's winning bids.
    """

    KIND = "winner_at_close"
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    opens: str
    closes: str
    at: str
    by: str
    condition: Expr | None = None

    @property
    def stateful(self) -> bool:
        return True

    @property
    def arity(self) -> int:
        return 2


@dataclass(frozen=True)
class LatestAggregate(Operator):
    """For each input row, `aggs` over the `n` greatest rows of its key by `order_by` among the key's
    rows whose event time `at` is not after its own: one output row per input row (its `keys`,
    `carry` columns and aggregates), emitted as event time passes it. NEXMark Q6's running average."""

    KIND = "latest_aggregate"
    keys: tuple[str, ...]
    at: str
    n: int
    order_by: tuple[str, ...]
    carry: tuple[str, ...]
    aggs: tuple[AggCall, ...]

    @property
    def stateful(self) -> bool:
        return True


@dataclass(frozen=True)
class Sink(Operator):
    KIND = "sink"
    name: str = "output"

    @property
    def processes_records(self) -> bool:
        return False


OPERATORS: tuple[type[Operator], ...] = (
    Source,
    Map,
    Filter,
    FlatMap,
    KeyBy,
    WindowAggregate,
    WindowJoin,
    WinnerAtClose,
    LatestAggregate,
    TopK,
    Sink,
)
OPERATOR_KINDS = tuple(c.KIND for c in OPERATORS)  # type: ignore[attr-defined]


# ---- the DAG -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    id: str
    op: Operator


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    comm: Comm
    port: int = 0  # input position at dst (0 = left, 1 = right of a join)


@dataclass(frozen=True)
class LogicalPlan:
    name: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    _index: dict[str, Node] = field(default_factory=dict, compare=False, repr=False)
    # Each node's output columns and types, as the query builder checked them (empty for a plan made
    # by hand): what a worker needs to rebuild an operator's spec without data.
    schemas: Mapping[str, Mapping[str, DType]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._index.update({n.id: n for n in self.nodes})
        self.validate()

    def node(self, node_id: str) -> Node:
        return self._index[node_id]

    def in_edges(self, node_id: str) -> list[Edge]:
        return sorted((e for e in self.edges if e.dst == node_id), key=lambda e: e.port)

    def out_edges(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.src == node_id]

    def topological_order(self) -> list[Node]:
        indeg = {n.id: 0 for n in self.nodes}
        for e in self.edges:
            indeg[e.dst] += 1
        ready = [n.id for n in self.nodes if indeg[n.id] == 0]
        order: list[Node] = []
        while ready:
            nid = ready.pop(0)
            order.append(self._index[nid])
            for e in self.out_edges(nid):
                indeg[e.dst] -= 1
                if indeg[e.dst] == 0:
                    ready.append(e.dst)
        if len(order) != len(self.nodes):
            raise PlanError(f"plan {self.name!r} has a cycle", hint="a streaming query must be a DAG")
        return order

    def validate(self) -> None:
        if len(self._index) != len(self.nodes):
            raise PlanError(f"plan {self.name!r} has duplicate node ids")
        for e in self.edges:
            if e.src not in self._index or e.dst not in self._index:
                raise PlanError(f"edge {e.src}->{e.dst} names a node that is not in the plan")
        for n in self.nodes:
            ins = self.in_edges(n.id)
            if len(ins) != n.op.arity:
                raise PlanError(f"{n.op.kind} {n.id!r} needs {n.op.arity} input(s), has {len(ins)}")
        self.topological_order()

    def to_json(self) -> dict:
        return {
            "nodes": [{"id": n.id, "op": n.op.kind, "stateful": n.op.stateful} for n in self.nodes],
            "edges": [{"src": e.src, "dst": e.dst, "comm": e.comm.value} for e in self.edges],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json())
