"""The reference semantics of every aggregate, one record at a time: create/add/merge/extract.

Why a test helper: production folds are generated from merge/algebra.py (vectorised, in polars and
Spark); these definitions are written independently, row by row, so the tests can hold the algebra
against them. An aggregate is mergeable exactly when extract(merge(add*(a), add*(b))) ==
extract(add*(a ++ b)); test_aggregates.py checks that law for every aggregate here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True)
class AggregateFn:
    name: str
    create: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any]
    extract: Callable[[Any], Any]


def _max_with_ties_add(state: tuple[Any, list], item: tuple[Any, Row]) -> tuple[Any, list]:
    best, rows = state
    value, row = item
    if best is None or value > best:
        return value, [row]
    if value == best:
        return best, [*rows, row]
    return state


def _max_with_ties_merge(a: tuple[Any, list], b: tuple[Any, list]) -> tuple[Any, list]:
    if a[0] is None:
        return b
    if b[0] is None or a[0] > b[0]:
        return a
    if b[0] > a[0]:
        return b
    return a[0], a[1] + b[1]


def _opt(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda a, b: b if a is None else a if b is None else fn(a, b)


AGGREGATES: dict[str, AggregateFn] = {
    a.name: a
    for a in (
        AggregateFn("count", lambda: 0, lambda s, _: s + 1, lambda a, b: a + b, lambda s: s),
        AggregateFn("sum", lambda: None, _opt(lambda a, b: a + b), _opt(lambda a, b: a + b), lambda s: s),
        AggregateFn("min", lambda: None, _opt(min), _opt(min), lambda s: s),
        AggregateFn("max", lambda: None, _opt(max), _opt(max), lambda s: s),
        AggregateFn(
            "avg",
            lambda: (0, 0),
            lambda s, x: (s[0] + x, s[1] + 1),
            lambda a, b: (a[0] + b[0], a[1] + b[1]),
            lambda s: s[0] / s[1] if s[1] else None,
        ),
        # Keeps the records behind the maximum, ties kept (Q7); merge keeps the larger side.
        AggregateFn(
            "max_with_ties", lambda: (None, []), _max_with_ties_add, _max_with_ties_merge, lambda s: s[1]
        ),
        # The n latest records by an ordering (Q6); merge keeps both sides, extract's caller cuts to n.
        AggregateFn("latest_n", lambda: [], lambda s, x: [*s, x], lambda a, b: a + b, lambda s: s),
    )
}


def aggregate(name: str) -> AggregateFn:
    return AGGREGATES[name]


def fold(fn: AggregateFn, items: Sequence[Any]) -> Any:
    state = fn.create()
    for x in items:
        state = fn.add(state, x)
    return state


def desc_nulls_last(values: Sequence[Any]) -> tuple[Any, ...]:
    """A sort key that ranks nulls below every value (used with reverse=True: descending, nulls last)."""
    return tuple((v is not None, v) for v in values)


def brute_force(call: Any, members: list[Row], arg: Callable[[Row], Any] | None = None) -> Any:
    """`call` (a core.plan.AggCall) over a group's records, one record at a time. `arg` reads the
    aggregate's argument from a record; by default the column `call.arg` names."""
    if arg is None and call.arg is not None:
        name = call.arg.name

        def arg(r: Row) -> Any:
            return r[name]

    present = [a for a in (arg(r) for r in members) if a is not None] if arg else []
    match call.fn:
        case "count":
            return len(members)
        case "sum":
            return sum(present) if present else None
        case "min":
            return min(present, default=None)
        case "max":
            return max(present, default=None)
        case "avg":
            return sum(present) / len(present) if present else None
        case "max_with_ties":
            assert arg is not None
            best = max(present, default=None)
            return [{f: r[f] for f in call.fields} for r in members if best is not None and arg(r) == best]
        case "latest_n":
            order = sorted(
                members,
                key=lambda r: desc_nulls_last([r[c] for c in (*call.order_by, *call.fields)]),
                reverse=True,
            )
            return [{f: r[f] for f in call.fields} for r in order[: call.n]]
    raise AssertionError(call.fn)
