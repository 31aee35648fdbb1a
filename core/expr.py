"""A small typed expression tree: one definition of projections and predicates, two backends.

Queries state their per-record logic once as `Expr` values. `core/spark/expr_spark.py` lowers them to
Spark Columns for the VM path and `core/expr_polars.py` to polars expressions for the Lambda workers,
so the two paths cannot disagree about what a query computes (tests check that they agree).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
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

# Operators every backend spells with Python's own operators (Spark Columns and polars expressions
# both overload them); "/" and "%" differ between backends and are lowered by each one.
PYTHON_OPERATORS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
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
        self.arg.dtype(schema)
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
    raise PlanError(f"unsupported literal {value!r}", hint="use int, float, str or bool literals")
