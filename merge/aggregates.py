"""Mergeable aggregates: each declares create/add/merge/extract.

Why declare all four: a Lambda worker builds a partial state from its share of an epoch's records
and the VM merges it into Spark's state (paper section 4.5). An aggregate is mergeable exactly when
`merge` exists with extract(merge(add*(a), add*(b))) == extract(add*(a ++ b)); the tests check that
law for every aggregate here. These are the semantic definitions; the Spark lowering maps each name
to Spark's native aggregate and the worker path (issue 3) to vectorised partials.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import PlanError
from core.expr import DType

Row = dict[str, Any]


@dataclass(frozen=True)
class AggregateFn:
    name: str
    needs_arg: bool
    create: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any]
    extract: Callable[[Any], Any]
    result_type: Callable[[DType | None], DType]


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


_SAME = lambda t: t  # noqa: E731 - result type equals the argument type

AGGREGATES: dict[str, AggregateFn] = {
    a.name: a
    for a in (
        AggregateFn(
            "count",
            False,
            lambda: 0,
            lambda s, _: s + 1,
            lambda a, b: a + b,
            lambda s: s,
            lambda _: DType.INT64,
        ),
        AggregateFn(
            "sum", True, lambda: None, _opt(lambda a, b: a + b), _opt(lambda a, b: a + b), lambda s: s, _SAME
        ),
        AggregateFn("min", True, lambda: None, _opt(min), _opt(min), lambda s: s, _SAME),
        AggregateFn("max", True, lambda: None, _opt(max), _opt(max), lambda s: s, _SAME),
        AggregateFn(
            "avg",
            True,
            lambda: (0, 0),
            lambda s, x: (s[0] + x, s[1] + 1),
            lambda a, b: (a[0] + b[0], a[1] + b[1]),
            lambda s: s[0] / s[1] if s[1] else None,
            lambda _: DType.FLOAT64,
        ),
        # Keeps the records behind the maximum, ties kept (Q7); merge keeps the larger side.
        AggregateFn(
            "max_with_ties",
            True,
            lambda: (None, []),
            _max_with_ties_add,
            _max_with_ties_merge,
            lambda s: s[1],
            lambda _: DType.RECORDS,
        ),
        # The n latest records by an ordering (Q6); merge keeps the n latest of both sides.
        AggregateFn(
            "latest_n",
            False,
            lambda: [],
            lambda s, x: [*s, x],
            lambda a, b: a + b,
            lambda s: s,
            lambda _: DType.RECORDS,
        ),
    )
}


def aggregate(name: str) -> AggregateFn:
    try:
        return AGGREGATES[name]
    except KeyError:
        raise PlanError(
            f"unknown aggregate {name!r}", hint=f"use one of: {', '.join(sorted(AGGREGATES))}"
        ) from None


def fold(fn: AggregateFn, items: Sequence[Any]) -> Any:
    state = fn.create()
    for x in items:
        state = fn.add(state, x)
    return state
