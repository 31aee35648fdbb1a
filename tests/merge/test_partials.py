"""The partial-state algebra: finalize(merge(partial(A), partial(B), ...)) == aggregate(A ∪ B ∪ ...).

The reference is computed row by row in pure Python from the semantic definitions in
tests/merge/reference_semantics.py (create/add/merge/extract), with windows assigned the way Spark does
(epoch-aligned, [k*W, (k+1)*W), sliding windows [k*P, k*P + W)); timestamps are drawn around window
boundaries on purpose.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import PlanError
from core.expr import BinOp, Col, Expr, Lit, col
from core.plan import WINDOW, AggCall, WindowAggregate, WindowSpec
from merge.partials import (
    TIMESTAMP,
    WINDOW_START,
    final_schema,
    finalize,
    latest_partials,
    merge_partials,
    partial_aggregate,
    partial_schema,
)
from tests.merge.reference_semantics import aggregate as semantic
from tests.merge.reference_semantics import fold

pytestmark = pytest.mark.timeout(300)

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z, a multiple of every window size used here
S = 1_000_000
SCHEMA = pa.schema(
    [
        pa.field("t", TIMESTAMP),
        pa.field("k", pa.int64()),
        pa.field("v", pa.int64()),
        pa.field("s", pa.string()),
        pa.field("f", pa.float64()),
    ]
)
REGROUP_SCHEMA = pa.schema([pa.field("window_start", TIMESTAMP), pa.field("window_end", TIMESTAMP), *SCHEMA])

offsets = st.one_of(
    st.integers(-25 * S, 25 * S),
    st.sampled_from([k * S + d for k in range(-24, 25, 2) for d in (-1, 0, 1)]),  # window and pane edges
)
rows_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "t": offsets,
            "k": st.integers(0, 3),
            "v": st.one_of(st.none(), st.integers(-50, 50)),
            "s": st.one_of(st.none(), st.sampled_from(["a", "b", "cc", ""])),
            "f": st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)),
            "w": st.integers(-2, 2),
        }
    ),
    max_size=60,
)


def _table(rows: list[dict[str, Any]], regroup: bool) -> pa.Table:
    data: dict[str, Any] = {
        "t": pa.array([T0 + r["t"] for r in rows], pa.int64()).cast(TIMESTAMP),
        "k": pa.array([r["k"] for r in rows], pa.int64()),
        "v": pa.array([r["v"] for r in rows], pa.int64()),
        "s": pa.array([r["s"] for r in rows], pa.string()),
        "f": pa.array([r["f"] for r in rows], pa.float64()),
    }
    if regroup:
        starts = [T0 + r["w"] * 10 * S for r in rows]
        data = {
            "window_start": pa.array(starts, pa.int64()).cast(TIMESTAMP),
            "window_end": pa.array([s + 10 * S for s in starts], pa.int64()).cast(TIMESTAMP),
            **data,
        }
        return pa.table(data, schema=REGROUP_SCHEMA)
    return pa.table(data, schema=SCHEMA)


# ---- the pure-Python reference ----------------------------------------------------------------


def _windows(op: WindowAggregate, row: dict[str, Any]) -> list[tuple[int, int] | tuple[()]]:
    if op.window is None:
        if WINDOW in op.keys:
            start = T0 + row["w"] * 10 * S
            return [(start, start + 10 * S)]
        return [()]
    t = row["t"]
    size, slide = op.window.size_s * S, op.window.slide_s * S
    last = t - t % slide
    return [(s, s + size) for s in range(last - size + slide, last + 1, slide)]


def _eval(e: Expr, row: dict[str, Any]) -> Any:
    """A row-at-a-time evaluator for the expressions these tests use (an independent check of polars)."""
    if isinstance(e, Col):
        return row[e.name]
    if isinstance(e, Lit):
        return e.value
    if isinstance(e, BinOp):
        a, b = _eval(e.left, row), _eval(e.right, row)
        if a is None or b is None:
            return None
        return {"+": a + b, "-": a - b, "*": a * b}[e.op]
    raise NotImplementedError(type(e).__name__)


def _arg(call: AggCall, row: dict[str, Any]) -> Any:
    return _eval(call.arg, row) if call.arg is not None else None


def _sort_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is not None, v) for v in values)  # null is the smallest, like Spark's struct order


def reference(op: WindowAggregate, rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in ({**r, "t": T0 + r["t"]} for r in rows):
        for w in _windows(op, r):
            groups[(*w, *[r[k] for k in op.keys if k != WINDOW])].append(r)
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, members in groups.items():
        result: dict[str, Any] = {}
        for call in op.aggs:
            fn = semantic(call.fn)
            if call.fn == "count":
                result[call.out] = fold(fn, members)
            elif call.fn in ("sum", "min", "max", "avg"):
                result[call.out] = fn.extract(
                    fold(fn, [_arg(call, r) for r in members if _arg(call, r) is not None])
                )
            elif call.fn == "max_with_ties":
                items = [
                    (_arg(call, r), {f: r[f] for f in call.fields})
                    for r in members
                    if _arg(call, r) is not None
                ]
                result[call.out] = fn.extract(fold(fn, items))
            elif call.fn == "latest_n":
                items = [
                    tuple(r[k] for k in call.order_by) + tuple(r[f] for f in call.fields) for r in members
                ]
                kept = sorted(fn.extract(fold(fn, items)), key=_sort_key, reverse=True)[: call.n]
                result[call.out] = [
                    dict(zip(call.fields, item[len(call.order_by) :], strict=True)) for item in kept
                ]
        out[key] = result
    return out


def _plain(value: Any) -> Any:
    if hasattr(value, "timestamp"):
        return round(value.timestamp() * S)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def as_groups(op: WindowAggregate, table: pa.Table) -> dict[tuple[Any, ...], dict[str, Any]]:
    key_cols = (["window_start", "window_end"] if op.window is not None or WINDOW in op.keys else []) + [
        k for k in op.keys if k != WINDOW
    ]
    out = {}
    for row in table.to_pylist():
        key = tuple(_plain(row[c]) for c in key_cols)
        out[key] = {c.out: _plain(row[c.out]) for c in op.aggs}
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    if isinstance(a, list) and isinstance(b, list):
        norm = lambda items: sorted((tuple(sorted(d.items())) for d in items), key=repr)  # noqa: E731
        return norm(a) == norm(b)
    return a == b


def assert_groups_equal(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, values in want.items():
        for name, value in values.items():
            assert _same(got[key][name], value), (key, name, got[key][name], value)


# ---- the property ------------------------------------------------------------------------------

TUMBLING = WindowSpec(10, 10, on="t")
SLIDING = WindowSpec(10, 2, on="t")
CALLS = {
    "count": AggCall("out", "count"),
    "sum": AggCall("out", "sum", col("v")),
    "min": AggCall("out", "min", col("s")),
    "max": AggCall("out", "max", col("f")),
    "avg": AggCall("out", "avg", col("v")),
    "max_with_ties": AggCall("out", "max_with_ties", col("v"), fields=("k", "s", "t")),
    "latest_n": AggCall("out", "latest_n", fields=("s", "v"), n=2, order_by=("t", "v")),
}
MODES = {"tumbling": TUMBLING, "sliding": SLIDING, "regroup": None, "unwindowed": None}
CASES = [
    pytest.param(fn, mode, keys, id=f"{fn}-{mode}-{'-'.join(keys) or 'global'}")
    for fn in CALLS
    for mode in MODES
    for keys in ((), ("k",))
    if not (mode == "sliding" and fn in ("max_with_ties", "latest_n"))
    and not (mode == "unwindowed" and not keys)
]


def _op(fn: str, mode: str, keys: tuple[str, ...]) -> WindowAggregate:
    return WindowAggregate((WINDOW, *keys) if mode == "regroup" else keys, MODES[mode], (CALLS[fn],))


@pytest.mark.parametrize(("fn", "mode", "keys"), CASES)
# 20 draws a case (900 a run over the 45 cases) keep the fast lane under two minutes; same property.
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, parts=st.lists(st.integers(0, 3), min_size=60, max_size=60))
def test_merged_partials_equal_the_direct_aggregate(
    fn: str, mode: str, keys: tuple[str, ...], rows: list[dict], parts: list[int]
) -> None:
    op = _op(fn, mode, keys)
    table = _table(rows, regroup=mode == "regroup")
    splits = [table.filter(pa.array([p == i for p in parts[: len(rows)]], pa.bool_())) for i in range(4)]
    partials = [partial_aggregate(op, s) for s in splits]
    for p in partials:
        assert p.schema == partial_schema(op, table.schema)
    merged = merge_partials(op, partials)
    result = finalize(op, merged)
    assert result.schema == final_schema(op, merged.schema)
    assert_groups_equal(as_groups(op, result), reference(op, rows))
    # Merging is associative: folding the parts pairwise gives the same state.
    pairwise = merge_partials(op, [merge_partials(op, partials[:2]), merge_partials(op, partials[2:])])
    assert_groups_equal(as_groups(op, finalize(op, pairwise)), reference(op, rows))


@pytest.mark.parametrize("window", [TUMBLING, SLIDING], ids=["tumbling", "sliding"])
@pytest.mark.parametrize("fn", ["count", "min", "avg"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy)
def test_latest_partials_carry_the_latest_event_time_into_the_same_pane(
    fn: str, window: WindowSpec, rows: list[dict]
) -> None:
    """Each row is the pane's partial, and its event time the latest of its records: an aggregate that
    assigns it to a pane by that time folds what it would have folded from the records."""
    op = WindowAggregate(("k",), window, (CALLS[fn],))
    records = pl.from_arrow(_table(rows, regroup=False))
    assert isinstance(records, pl.DataFrame)
    got = latest_partials(op, records)
    panes = pl.from_arrow(partial_aggregate(op, records.to_arrow()))
    assert isinstance(panes, pl.DataFrame)
    pane = pl.col("t").dt.truncate(f"{window.slide_s}s").alias(WINDOW_START)
    latest = records.group_by(pane, "k").agg(pl.col("t").max())
    want = panes.drop("window_end").join(latest, on=[WINDOW_START, "k"]).drop(WINDOW_START)
    assert got.sort("t", "k").equals(want.select(got.columns).sort("t", "k"))


def test_multiple_aggregates_over_an_expression_in_one_operator() -> None:
    op = WindowAggregate(
        ("k",),
        SLIDING,
        (
            AggCall("n", "count"),
            AggCall("total", "sum", col("v") * 2 + 1),
            AggCall("mean", "avg", col("f")),
            AggCall("hi", "max", col("t")),
        ),
    )
    rows = [
        {"t": i * 700_001 - 9 * S, "k": i % 3, "v": (i * 7) % 11 - 5, "s": "x", "f": i / 3, "w": 0}
        for i in range(40)
    ]
    table = _table(rows, regroup=False)
    merged = merge_partials(
        op, [partial_aggregate(op, table.slice(0, 13)), partial_aggregate(op, table.slice(13))]
    )
    got = as_groups(op, finalize(op, merged))
    for key, group in reference(op, rows).items():
        absolute = [{**r, "t": T0 + r["t"]} for r in rows]
        members = [r for r in absolute if any((*w, r["k"]) == key for w in _windows(op, r))]
        assert got[key]["total"] == sum(r["v"] * 2 + 1 for r in members)
        assert got[key]["hi"] == max(r["t"] for r in members)
        assert got[key]["n"] == group["n"]
        assert math.isclose(got[key]["mean"], group["mean"], rel_tol=1e-12)


def test_partial_schema_is_the_documented_row_type() -> None:
    op = WindowAggregate(
        (WINDOW, "k"),
        None,
        (
            AggCall("n", "count"),
            AggCall("m", "avg", col("v")),
            AggCall("top", "max_with_ties", col("v"), fields=("s",)),
            AggCall("recent", "latest_n", fields=("v",), n=3, order_by=("t",)),
        ),
    )
    schema = partial_schema(op, REGROUP_SCHEMA)
    assert schema.names == ["window_start", "window_end", "k", "n", "m__sum", "m__count", "top", "recent"]
    assert schema.field("m__sum").type == pa.float64() and schema.field("m__count").type == pa.int64()
    assert schema.field("top").type == pa.list_(pa.struct([("_v", pa.int64()), ("s", pa.string())]))
    assert schema.field("recent").type == pa.list_(pa.struct([("_k0", TIMESTAMP), ("v", pa.int64())]))
    final = final_schema(op, schema)
    assert final.field("m").type == pa.float64()
    assert final.field("top").type == pa.list_(pa.struct([("s", pa.string())]))


def test_unsupported_shapes_fail_with_a_hint() -> None:
    with pytest.raises(PlanError, match="sliding"):
        partial_schema(WindowAggregate((), SLIDING, (CALLS["max_with_ties"],)), SCHEMA)
    with pytest.raises(PlanError, match="window_start"):
        partial_schema(WindowAggregate((WINDOW,), None, (CALLS["count"],)), SCHEMA)
    with pytest.raises(PlanError, match="not in the aggregate's input"):
        partial_schema(WindowAggregate(("nope",), TUMBLING, (CALLS["count"],)), SCHEMA)
    with pytest.raises(PlanError, match="partial form"):
        partial_schema(WindowAggregate((), TUMBLING, (AggCall("x", "median", col("v")),)), SCHEMA)
    op = _op("count", "tumbling", ("k",))
    a = partial_aggregate(op, _table([{"t": 0, "k": 1, "v": 1, "s": "a", "f": 1.0, "w": 0}], False))
    with pytest.raises(PlanError, match="different row types"):
        merge_partials(op, [a, a.drop_columns(["k"])])
    with pytest.raises(PlanError, match="at least one"):
        merge_partials(op, [])
    assert merge_partials(op, [], a.schema).num_rows == 0


def test_empty_input_gives_an_empty_partial_of_the_right_type() -> None:
    op = _op("max_with_ties", "tumbling", ("k",))
    empty = partial_aggregate(op, SCHEMA.empty_table())
    assert empty.num_rows == 0 and empty.schema == partial_schema(op, SCHEMA)
    assert finalize(op, empty).num_rows == 0
