"""Lower an `Expr` to a Spark Column: the VM-side backend of the expression tree."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from core.errors import PlanError
from core.expr import PYTHON_OPERATORS, BinOp, BoolOp, Cast, Col, DType, Expr, IsIn, Lit, Not

_SPARK_TYPES = {DType.INT64: "bigint", DType.FLOAT64: "double", DType.STRING: "string", DType.BOOL: "boolean"}


def to_spark(e: Expr) -> Column:
    if isinstance(e, Col):
        return F.col(e.name)
    if isinstance(e, Lit):
        return F.lit(e.value).cast(_SPARK_TYPES[e.type_]) if e.type_ in _SPARK_TYPES else F.lit(e.value)
    if isinstance(e, BinOp):
        a, b = to_spark(e.left), to_spark(e.right)
        if e.op in PYTHON_OPERATORS:
            return PYTHON_OPERATORS[e.op](a, b)
        if e.op == "/":
            return a.cast("double") / b.cast("double")
        if e.op == "%":
            return a % b
    if isinstance(e, BoolOp):
        out = to_spark(e.args[0])
        for arg in e.args[1:]:
            out = (out & to_spark(arg)) if e.op == "and" else (out | to_spark(arg))
        return out
    if isinstance(e, Not):
        return ~to_spark(e.arg)
    if isinstance(e, IsIn):
        return to_spark(e.arg).isin(list(e.values))
    if isinstance(e, Cast):
        return to_spark(e.arg).cast(_SPARK_TYPES[e.to])
    raise PlanError(f"no Spark lowering for {type(e).__name__}")
