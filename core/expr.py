"""A small typed expression tree: one definition of projections and predicates, two backends.

Queries state their per-record logic once as `Expr` values. `core/spark/expr_spark.py` lowers them to
Spark Columns for the VM path and `core/expr_polars.py` to polars expressions for the Lambda workers.
Offloading moves records from one to the other, so both must compute the same value for every row;
`tests/core/spark/test_expr_parity.py` checks that they do, nulls and awkward values included.

What an expression means (Spark SQL's try_ evaluation mode, which both backends implement):

- A null operand gives a null result, except in AND/OR (three-valued: false AND null is false, true OR
  null is true; NOT null is null) and an IN with an empty list (false, even for a null operand).
- An arithmetic or cast result that has no value of its type is null, never an error and never
  wrapped: int64 `+ - *` that overflow, `/` and `%` by zero (0, 0.0 or -0.0, whatever the dividend),
  and a float cast to int64 that is NaN, +-inf or outside int64 (truncation toward zero otherwise).
  One corner follows Spark's range check, which is done in double: 2.0**63 casts to int64's maximum.
- `/` always divides as float64. `%` takes the dividend's sign (C's fmod, Java's and Spark's `%`),
  exactly for floats too, so x % +-inf is x for a finite x. Other float arithmetic is IEEE 754.
- An int64 meeting a float64 (arithmetic, comparison, IN) is converted to float64 first.
- Comparisons: NaN equals NaN and is greater than every other float, -0.0 equals 0.0, strings compare
  by their UTF-8 bytes, false < true, timestamps as instants.
- `x IN (v1, ..., vn)` is `x = v1 OR ... OR x = vn`, so a miss against a list holding a null is null.
- TIMESTAMP values are UTC instants in microseconds; a naive datetime literal is read as UTC.

Why null rather than an error: an expression that raises fails the whole streaming query on one odd
record, and Spark 4 raises by default (spark.sql.ansi.enabled is on, and the product's session keeps
it), while polars would have to compute an error flag to raise at all. The Spark lowering uses the
try_ functions, so it means the same whether or not the session runs in ANSI mode; for `/` and `%` the
result is also what Spark gives with ANSI off.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from core.errors import PlanError


class DType(StrEnum):
    INT64 = "int64"
    FLOAT64 = "float64"
    STRING = "string"
    BOOL = "bool"
    TIMESTAMP = "timestamp"
    WINDOW = "window"  # the (start, end) pair a windowed operator assigns
    RECORDS = "records"  # a list of records kept by an aggregate (e.g. max_with_ties)


NUMERIC = (DType.INT64, DType.FLOAT64)
Schema = Mapping[str, DType]

ARITHMETIC = ("+", "-", "*", "/", "%")
COMPARISON = ("==", "!=", "<", "<=", ">", ">=")

# Comparisons every backend spells with Python's own operators (Spark Columns and polars expressions
# both overload them, with the semantics above). Arithmetic is lowered by each backend: the overloaded
# operators raise in Spark's ANSI mode and wrap on int64 overflow in polars.
PYTHON_OPERATORS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class Expr:
    """Base of the tree; operators build new nodes so queries read like arithmetic."""

    def dtype(self, schema: Schema) -> DType:
        raise NotImplementedError

    def columns(self) -> frozenset[str]:
        raise NotImplementedError

    def _bin(self, op: str, other: object, swap: bool = False) -> Expr:
        rhs = other if isinstance(other, Expr) else lit(other)
        return BinOp(op, rhs, self) if swap else BinOp(op, self, rhs)

    def __add__(self, o: object) -> Expr:
        return self._bin("+", o)

    def __radd__(self, o: object) -> Expr:
        return self._bin("+", o, swap=True)

    def __sub__(self, o: object) -> Expr:
        return self._bin("-", o)

    def __mul__(self, o: object) -> Expr:
        return self._bin("*", o)

    def __rmul__(self, o: object) -> Expr:
        return self._bin("*", o, swap=True)

    def __truediv__(self, o: object) -> Expr:
        return self._bin("/", o)

    def __mod__(self, o: object) -> Expr:
        return self._bin("%", o)

    def eq(self, o: object) -> Expr:
        return self._bin("==", o)

    def ne(self, o: object) -> Expr:
        return self._bin("!=", o)

    def __lt__(self, o: object) -> Expr:
        return self._bin("<", o)

    def __le__(self, o: object) -> Expr:
        return self._bin("<=", o)

    def __gt__(self, o: object) -> Expr:
        return self._bin(">", o)

    def __ge__(self, o: object) -> Expr:
        return self._bin(">=", o)

    def __and__(self, o: Expr) -> Expr:
        return BoolOp("and", (self, o))

    def __or__(self, o: Expr) -> Expr:
        return BoolOp("or", (self, o))

    def __invert__(self) -> Expr:
        return Not(self)

    def isin(self, *values: object) -> Expr:
        return IsIn(self, tuple(values))

    def cast(self, dtype: DType) -> Expr:
        return Cast(self, dtype)


@dataclass(frozen=True, eq=False)
class Col(Expr):
    name: str

    def dtype(self, schema: Schema) -> DType:
        if self.name not in schema:
            raise PlanError(
                f"unknown column {self.name!r}", hint=f"available columns: {', '.join(sorted(schema))}"
            )
        return schema[self.name]

    def columns(self) -> frozenset[str]:
        return frozenset({self.name})


@dataclass(frozen=True, eq=False)
class Lit(Expr):
    value: object
    type_: DType

    def dtype(self, schema: Schema) -> DType:
        return self.type_

    def columns(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    op: str
    left: Expr
    right: Expr

    def dtype(self, schema: Schema) -> DType:
        lt, rt = self.left.dtype(schema), self.right.dtype(schema)
        if self.op in COMPARISON:
            if lt != rt and not (lt in NUMERIC and rt in NUMERIC):
                raise PlanError(f"cannot compare {lt.value} with {rt.value} in {self!r}")
            return DType.BOOL
        if lt not in NUMERIC or rt not in NUMERIC:
            raise PlanError(f"arithmetic {self.op!r} needs numbers, got {lt.value} and {rt.value}")
        if self.op == "/" or DType.FLOAT64 in (lt, rt):
            return DType.FLOAT64
        return DType.INT64

    def columns(self) -> frozenset[str]:
        return self.left.columns() | self.right.columns()


@dataclass(frozen=True, eq=False)
class BoolOp(Expr):
    op: str  # "and" | "or"
    args: tuple[Expr, ...]

    def dtype(self, schema: Schema) -> DType:
        for a in self.args:
            if a.dtype(schema) != DType.BOOL:
                raise PlanError(f"{self.op} needs boolean operands, got {a.dtype(schema).value}")
        return DType.BOOL

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(a.columns() for a in self.args))


@dataclass(frozen=True, eq=False)
class Not(Expr):
    arg: Expr

    def dtype(self, schema: Schema) -> DType:
        if self.arg.dtype(schema) != DType.BOOL:
            raise PlanError("not needs a boolean operand")
        return DType.BOOL

    def columns(self) -> frozenset[str]:
        return self.arg.columns()


@dataclass(frozen=True, eq=False)
class IsIn(Expr):
    arg: Expr
    values: tuple[object, ...]

    def dtype(self, schema: Schema) -> DType:
        """Bool; each value must be null or comparable with the operand (as `==` would need).

        Without the check a string operand against a number would reach Spark's implicit cast, which
        raises in ANSI mode, and polars, which refuses to compare at all.
        """
        t = self.arg.dtype(schema)
        for v in self.values:
            if v is None:
                continue
            vt = lit(v).type_
            if vt != t and not (vt in NUMERIC and t in NUMERIC):
                raise PlanError(f"isin on a {t.value} operand cannot hold {v!r}")
        return DType.BOOL

    def columns(self) -> frozenset[str]:
        return self.arg.columns()


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    arg: Expr
    to: DType

    def dtype(self, schema: Schema) -> DType:
        src = self.arg.dtype(schema)
        if src != self.to and not (src in NUMERIC and self.to in NUMERIC):
            raise PlanError(f"cannot cast {src.value} to {self.to.value}")
        return self.to

    def columns(self) -> frozenset[str]:
        return self.arg.columns()


def col(name: str) -> Col:
    return Col(name)


def lit(value: object) -> Lit:
    if isinstance(value, bool):
        return Lit(value, DType.BOOL)
    if isinstance(value, int):
        return Lit(value, DType.INT64)
    if isinstance(value, float):
        return Lit(value, DType.FLOAT64)
    if isinstance(value, str):
        return Lit(value, DType.STRING)
    if isinstance(value, datetime):
        return Lit(value, DType.TIMESTAMP)
    raise PlanError(f"unsupported literal {value!r}", hint="use int, float, str, bool or datetime literals")


def epoch_micros(value: object) -> int:
    """A TIMESTAMP literal as microseconds since the epoch; a naive datetime is read as UTC.

    Both backends build timestamp literals from this integer, so neither reads a naive datetime in the
    machine's local time zone (pyspark would).
    """
    if not isinstance(value, datetime):
        raise PlanError(f"a timestamp literal must be a datetime, got {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
