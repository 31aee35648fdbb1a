"""A plan as JSON and back: every built-in query, random expressions, and what a malformed plan meets."""

from __future__ import annotations

import copy
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import PlanError
from core.expr import ARITHMETIC, COMPARISON, BinOp, BoolOp, Cast, Col, DType, Expr, IsIn, Lit, Not, col
from core.nexmark.params import QueryParams
from core.nexmark.queries import QUERIES
from core.plan_codec import MAX_DEPTH, expr_from_json, expr_to_json, plan_from_json, plan_to_json

pytestmark = pytest.mark.timeout(60)


def _through_text(data: dict[str, Any]) -> Any:
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize("params", [QueryParams(), QueryParams(6, 3)], ids=["10-2", "6-3"])
def test_every_built_in_plan_comes_back_whole(name: str, params: QueryParams) -> None:
    plan = QUERIES[name].plan(params)
    data = plan_to_json(plan)
    back = plan_from_json(_through_text(data))
    assert plan_to_json(back) == data
    assert [(n.id, n.op.kind) for n in back.nodes] == [(n.id, n.op.kind) for n in plan.nodes]
    assert back.edges == plan.edges and back.schemas == plan.schemas
    # expressions compare by identity; every operator without one compares by value
    plain = [n for n in plan.nodes if not _holds_expr(vars(n.op))]
    assert plain and all(back.node(n.id).op == n.op for n in plain)


def _holds_expr(value: object) -> bool:
    if isinstance(value, Expr):
        return True
    if isinstance(value, dict):
        return any(_holds_expr(v) for v in value.values())
    if isinstance(value, tuple):
        return any(_holds_expr(v) for v in value)
    return hasattr(value, "__dataclass_fields__") and _holds_expr(vars(value))


_NAMES = st.sampled_from(["a", "b", "price", "ts"])
_SCALARS = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(lambda v: Lit(v, DType.INT64)),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda v: Lit(v, DType.FLOAT64)),
    st.text(max_size=8).map(lambda v: Lit(v, DType.STRING)),
    st.booleans().map(lambda v: Lit(v, DType.BOOL)),
    st.datetimes(timezones=st.just(UTC)).map(lambda v: Lit(v, DType.TIMESTAMP)),
)


_ISIN_VALUES = st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=4), st.booleans())


def _exprs() -> st.SearchStrategy[Expr]:
    leaves = st.one_of(_NAMES.map(Col), _SCALARS)
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.tuples(st.sampled_from(ARITHMETIC + COMPARISON), inner, inner).map(lambda t: BinOp(*t)),
            st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=1, max_size=3)).map(
                lambda t: BoolOp(t[0], tuple(t[1]))
            ),
            inner.map(Not),
            st.tuples(
                inner, st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=4)), max_size=3)
            ).map(lambda t: IsIn(t[0], tuple(t[1]))),
            st.tuples(inner, st.sampled_from([DType.INT64, DType.FLOAT64])).map(lambda t: Cast(*t)),
        ),
        max_leaves=12,
    )


@settings(max_examples=300, deadline=None)
@given(_exprs())
def test_random_expressions_come_back_whole(e: Expr) -> None:
    data = expr_to_json(e)
    assert expr_to_json(expr_from_json(_through_text(data))) == data


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        datetime(2026, 11, 26, 7, 0, 0, 123_456, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    ],
)
def test_literals_json_cannot_spell_come_back_exactly(value: object) -> None:
    dtype = DType.TIMESTAMP if isinstance(value, datetime) else DType.FLOAT64
    back = expr_from_json(_through_text(expr_to_json(Lit(value, dtype))))
    assert isinstance(back, Lit) and back.type_ is dtype
    if isinstance(value, float) and math.isnan(value):
        assert isinstance(back.value, float) and math.isnan(back.value)
    elif isinstance(value, float):
        assert back.value == value and math.copysign(1, back.value) == math.copysign(1, value)  # type: ignore[arg-type]
    else:
        assert back.value == value


def test_a_naive_timestamp_literal_is_read_as_utc_as_both_backends_read_it() -> None:
    back = expr_from_json(expr_to_json(Lit(datetime(2026, 1, 1), DType.TIMESTAMP)))
    assert back.value == datetime(2026, 1, 1, tzinfo=UTC)  # type: ignore[attr-defined]


def _q3() -> dict[str, Any]:
    return plan_to_json(QUERIES["q3"].plan())


def _node(data: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(n for n in data["nodes"] if n["op"]["kind"] == kind)


def _set(path: str, value: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        kind, field = path.split(".")
        _node(data, kind)["op"][field] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(format=2), "plan format 2"),
        (lambda d: d.update(extra=1), "unknown fields"),
        (lambda d: _node(d, "filter")["op"].update(kind="udf"), "unknown operator kind 'udf'"),
        (_set("filter.code", "import os"), r"unknown fields \['code'\]"),
        (lambda d: _node(d, "key_by")["op"].pop("keys"), "missing field 'keys'"),
        (_set("key_by.keys", "seller"), "must be a JSON list"),
        (_set("key_by.keys", [1]), "must be a str"),
        (_set("filter.predicate", {"col": "no_such_column"}), "unknown column 'no_such_column'"),
        (_set("filter.predicate", {"col": "name"}), "predicate is a string, not a bool"),
        (_set("filter.predicate", {"binop": "**", "left": {"col": "a"}, "right": {"col": "b"}}), "'\\*\\*'"),
        (_set("filter.predicate", {"lit": True, "type": "tensor"}), "'tensor' is not a DType"),
        (_set("filter.predicate", {"lit": 1, "type": "bool"}), "must be a bool"),
        (_set("filter.predicate", {"eval": "1"}), "not an expression"),
        (lambda d: d["edges"][0].update(comm="teleport"), "'teleport' is not a Comm"),
        (lambda d: d["edges"].append(dict(d["edges"][-1])), "input"),
        (lambda d: d["edges"][0].update(dst="nowhere"), "names a node that is not in the plan"),
        (lambda d: d.update(nodes="all"), "must be a JSON list"),
    ],
)
def test_a_malformed_plan_is_refused_naming_what_is_wrong(edit: Any, message: str) -> None:
    data = copy.deepcopy(_q3())
    edit(data)
    with pytest.raises(PlanError, match=message):
        plan_from_json(data)


def test_a_number_is_not_taken_for_a_bool_nor_a_bool_for_a_number() -> None:
    top = plan_to_json(QUERIES["q5"].plan())
    _node(top, "top_k")["op"]["k"] = True
    with pytest.raises(PlanError, match="must be a int"):
        plan_from_json(top)
    _node(top, "top_k")["op"].update(k=1, with_ties=1)
    with pytest.raises(PlanError, match="must be a bool"):
        plan_from_json(top)


def test_an_expression_nested_past_the_limit_is_refused_not_recursed() -> None:
    e: dict[str, Any] = {"col": "a"}
    for _ in range(MAX_DEPTH + 2):
        e = {"not": e}
    with pytest.raises(PlanError, match="nested deeper"):
        expr_from_json(e)


def test_timestamps_encode_as_epoch_microseconds() -> None:
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=1_700_000_000_123_456)
    assert expr_to_json(col("ts") >= at)["right"] == {"lit": 1_700_000_000_123_456, "type": "timestamp"}
