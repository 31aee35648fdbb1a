"""The fold rules of partial aggregation: one frozen description per aggregate kind.

Why one description: a Lambda worker builds partial states from its share of an epoch in polars,
the VM puts its own records in partial form and folds everything in Spark (paper section 4.5), and
the fused operators fold panes in polars again. If each place spelled its own rules, a change to one
(a null, a type, a tie) would silently split the worker path from the VM path. So each kind is
written down once, here, as data; merge/polars_fold.py and merge/spark/column_fold.py translate the
description, and no other module knows what a kind's partial holds or how it combines.

A kind's partial state is either

* scalar columns, each named `<out><suffix>`: a type rule, what one record lifts into it, and the
  reduction that combines two values of it. The reductions are associative and commutative, so the
  records may be split among the VM and any number of workers and merged in any order;
* or one list of records, `<out>` list<struct<head..., fields...>>, and a keep rule applied after
  every combine (a combine concatenates lists, the keep rule trims them back).

A finish rule turns the combined partial into the result the query sees.

| kind          | partial columns (lift, combine)                          | finish          |
|---------------|----------------------------------------------------------|-----------------|
| count         | `<out>` int64 (one, sum)                                 | the value       |
| sum           | `<out>` arg type (argument, sum or null)                 | the value       |
| min, max      | `<out>` arg type (argument, min / max)                   | the value       |
| avg           | `<out>__sum` float64 (argument, sum), `<out>__count`     | sum / count     |
|               | int64 (argument present, sum)                            |                 |
| max_with_ties | `<out>` records <_v, fields...>, keep ties at the max    | the fields      |
| latest_n      | `<out>` records <_k0.., fields...>, keep the n greatest  | the fields      |
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.aggregate_signatures import SIGNATURES, AggregateSignature
from core.errors import PlanError
from core.plan import AggCall, WindowAggregate


class Lift(StrEnum):
    """What one record contributes to a scalar partial column, before the column's type rule."""

    ONE = "one"  # the record counts once, whatever its argument
    ARG = "arg"  # the argument's value; a null stays null and every reduction skips it
    ARG_PRESENT = "arg_present"  # 1 when the argument is not null, else 0


class Combine(StrEnum):
    """How values of one partial column reduce. Every reduction skips nulls."""

    # The sum; over no non-null value a backend may say 0 (polars) or null (Spark). Only for columns
    # where that cannot be seen: counts are never null, and avg's sum is read only when its count > 0.
    SUM = "sum"
    SUM_OR_NULL = "sum_or_null"  # the sum, null over no non-null value (Spark's sum, seen in results)
    MIN = "min"
    MAX = "max"


class ColumnType(StrEnum):
    INT64 = "int64"
    FLOAT64 = "float64"
    ARG = "arg"  # the argument's type


@dataclass(frozen=True)
class PartialColumn:
    suffix: str  # the column is `<out><suffix>`
    type: ColumnType
    lift: Lift
    combine: Combine

    def __post_init__(self) -> None:
        # A lift that is a count (of records, of present arguments) is folded by counting, which is
        # only the same thing as combining its ones when the combine is a sum.
        if self.lift != Lift.ARG and self.combine != Combine.SUM:
            raise ValueError(f"a {self.lift} lift must combine by sum")

    def name(self, out: str) -> str:
        return out + self.suffix


class Finish(StrEnum):
    VALUE = "value"  # the one partial column is the result
    RATIO = "ratio"  # the first column over the second; null when the second is 0 (avg over no value)
    FIELDS = "fields"  # the kept records, each cut down to the call's fields


class Keep(StrEnum):
    """Which records a record-keeping kind holds on to after a combine."""

    TIES_AT_MAX = "ties_at_max"  # every record whose value equals the group's maximum; a null value never
    GREATEST_N = "greatest_n"  # the n greatest by (order keys, fields) descending, nulls last


VALUE_FIELD = "_v"  # the head field of TIES_AT_MAX records: the argument's value


@dataclass(frozen=True)
class Kind:
    signature: AggregateSignature
    columns: tuple[PartialColumn, ...] = ()
    keep: Keep | None = None
    finish: Finish = Finish.VALUE

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def pane_mergeable(self) -> bool:
        """Whether a sliding window can be assembled from pane partials of this kind (its columns
        combine across panes; record lists are only kept per tumbling window)."""
        return self.keep is None


def _scalar(name: str, type_: ColumnType, lift: Lift, combine: Combine) -> Kind:
    return Kind(SIGNATURES[name], (PartialColumn("", type_, lift, combine),))


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        _scalar("count", ColumnType.INT64, Lift.ONE, Combine.SUM),
        _scalar("sum", ColumnType.ARG, Lift.ARG, Combine.SUM_OR_NULL),
        _scalar("min", ColumnType.ARG, Lift.ARG, Combine.MIN),
        _scalar("max", ColumnType.ARG, Lift.ARG, Combine.MAX),
        Kind(
            SIGNATURES["avg"],
            (
                PartialColumn("__sum", ColumnType.FLOAT64, Lift.ARG, Combine.SUM),
                PartialColumn("__count", ColumnType.INT64, Lift.ARG_PRESENT, Combine.SUM),
            ),
            finish=Finish.RATIO,
        ),
        Kind(SIGNATURES["max_with_ties"], keep=Keep.TIES_AT_MAX, finish=Finish.FIELDS),
        Kind(SIGNATURES["latest_n"], keep=Keep.GREATEST_N, finish=Finish.FIELDS),
    )
}
assert set(KINDS) == set(SIGNATURES), "every aggregate a query may call has fold rules"
assert all((k.keep is not None) == k.signature.keeps_records for k in KINDS.values())


def kind(name: str) -> Kind:
    if name not in KINDS:
        raise PlanError(
            f"aggregate {name!r} has no partial form", hint=f"transient aggregates: {', '.join(KINDS)}"
        )
    return KINDS[name]


def kind_of(call: AggCall) -> Kind:
    return kind(call.fn)


# ---- record-keeping kinds ----------------------------------------------------------------------


def record_head(call: AggCall) -> list[tuple[str, str | None]]:
    """The struct fields a record list holds before the call's fields, each with the input column it
    copies (None: the argument's value)."""
    if kind_of(call).keep == Keep.TIES_AT_MAX:
        return [(VALUE_FIELD, None)]
    return [(f"_k{i}", k) for i, k in enumerate(call.order_by)]


def record_order(call: AggCall) -> list[str]:
    """The struct fields the keep rule orders records by."""
    if kind_of(call).keep == Keep.TIES_AT_MAX:
        return [VALUE_FIELD]
    return [f for f, _ in record_head(call)] + list(call.fields)


# ---- which calls have a partial form -----------------------------------------------------------


def check_pane_mergeable(call: AggCall) -> None:
    if not kind_of(call).pane_mergeable:
        raise PlanError(
            f"aggregate {call.fn} is not supported on sliding windows", hint="use a tumbling window"
        )


def check_supported(op: WindowAggregate) -> None:
    """Raise unless every call of `op` has a partial form in `op`'s window."""
    for call in op.aggs:
        k = kind_of(call)
        if op.window is not None and not op.window.tumbling:
            check_pane_mergeable(call)
        if k.keep == Keep.GREATEST_N and (call.n <= 0 or not call.order_by):
            raise PlanError(f"latest_n {call.out!r} needs n > 0 and an order_by")
        if k.signature.needs_arg and call.arg is None:
            raise PlanError(f"aggregate {call.fn} {call.out!r} needs an argument")
