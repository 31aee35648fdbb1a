"""Lower an `Expr` to a Spark Column: the VM-side backend of the expression tree.

Arithmetic and casts go through Spark's try_ functions, which are the semantics `core/expr.py` states
whatever spark.sql.ansi.enabled says: the overloaded operators and `cast` raise in ANSI mode (Spark 4's
default, and the product's session) on an overflow, a zero divisor or a NaN cast to int64, which
would fail the streaming query, while the workers' polars return a value.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from core.errors import PlanError
from core.expr import (
    PYTHON_OPERATORS,
    BinOp,
    BoolOp,
    Cast,
    Col,
    DType,
    Expr,
    IsIn,
    Lit,
    Not,
    epoch_micros,
    lit,
)

_SPARK_TYPES = {
    DType.INT64: "bigint",
    DType.FLOAT64: "double",
    DType.STRING: "string",
    DType.BOOL: "boolean",
    DType.TIMESTAMP: "timestamp",
}
_ARITHMETIC: dict[str, Callable[[Column, Column], Column]] = {
    "+": F.try_add,
    "-": F.try_subtract,
    "*": F.try_multiply,
    "/": lambda a, b: F.try_divide(a.cast("double"), b.cast("double")),
    "%": F.try_mod,
}


def _literal(e: Lit) -> Column:
    if e.type_ == DType.TIMESTAMP and e.value is not None:
        # From an integer, not F.lit(datetime): pyspark reads a naive datetime in local time.
        return F.timestamp_micros(F.lit(epoch_micros(e.value)))
    return F.lit(e.value).cast(_SPARK_TYPES[e.type_]) if e.type_ in _SPARK_TYPES else F.lit(e.value)


def to_spark(e: Expr) -> Column:
    if isinstance(e, Col):
        return F.col(e.name)
    if isinstance(e, Lit):
        return _literal(e)
    if isinstance(e, BinOp):
        a, b = to_spark(e.left), to_spark(e.right)
        if e.op in PYTHON_OPERATORS:
            return PYTHON_OPERATORS[e.op](a, b)
        if e.op in _ARITHMETIC:
            return _ARITHMETIC[e.op](a, b)
    if isinstance(e, BoolOp):
        out = to_spark(e.args[0])
        for arg in e.args[1:]:
            out = (out & to_spark(arg)) if e.op == "and" else (out | to_spark(arg))
        return out
    if isinstance(e, Not):
        return ~to_spark(e.arg)
    if isinstance(e, IsIn):
        if not e.values:
            # Spark's own null IN () is null with ANSI off (spark.sql.legacy.nullInEmptyListBehavior
            # follows the ANSI flag), false with it on.
            return F.lit(False)
        values = [F.lit(None) if v is None else _literal(lit(v)) for v in e.values]
        return to_spark(e.arg).isin(values)
    if isinstance(e, Cast) and e.to in _SPARK_TYPES:
        return to_spark(e.arg).try_cast(_SPARK_TYPES[e.to])
    raise PlanError(f"no Spark lowering for {type(e).__name__}")
