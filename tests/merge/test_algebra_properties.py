"""The fold rules of merge/algebra.py against brute force: however the records are split, folding the
parts' partials gives what one pass over all the records gives.

Each property splits random records (nulls included) into a VM part and several worker parts the
way the redirect-and-merge path does: a worker folds its part into partial rows, the VM puts each of
its records in partial form on its own (a one-record partial), and the merge folds them all, in a
random order. The expected result is computed row by row in plain Python, without the algebra.
No Spark here: the Spark spelling of the same rules is exercised by tests/merge/spark.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.arrow_types import TIMESTAMP
from core.expr import col
from core.plan import AggCall, WindowAggregate, WindowJoin, WindowSpec
from merge.algebra import KINDS
from merge.join_count import JoinCount, JoinSide
from merge.partials import finalize, merge_partials, partial_aggregate
from merge.sliding_top_k import SlidingTopK, fold_to_panes
from tests.merge.reference_semantics import brute_force

pytestmark = pytest.mark.timeout(120)

S = 1_000_000  # µs
T0 = 1_767_225_600 * S  # a multiple of every window size used here
SCHEMA = pa.schema(
    [("t", TIMESTAMP), ("k", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("f", pa.float64())]
)
TUMBLING = WindowSpec(4, 4, on="t")
SLIDING = WindowSpec(6, 2, on="t")
CALLS = {
    "count": AggCall("out", "count"),
    "sum": AggCall("out", "sum", col("v")),
    "min": AggCall("out", "min", col("s")),
    "max": AggCall("out", "max", col("f")),
    "avg": AggCall("out", "avg", col("v")),
    "max_with_ties": AggCall("out", "max_with_ties", col("v"), fields=("s", "k")),
    "latest_n": AggCall("out", "latest_n", fields=("s", "k"), n=2, order_by=("v",)),
}
assert set(CALLS) == set(KINDS), "every kind is under test"

Row = dict[str, Any]
rows_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "t": st.integers(-13 * S, 13 * S),
            "k": st.integers(0, 2),
            "v": st.one_of(st.none(), st.integers(-5, 5)),  # few values: ties at the maximum
            "s": st.one_of(st.none(), st.sampled_from(["a", "b", "cc"])),
            "f": st.one_of(st.none(), st.floats(-1e3, 1e3, allow_nan=False)),
        }
    ),
    max_size=30,
)
# A part per record: 0 is the VM's, 1..3 a worker's.
parts_strategy = st.lists(st.integers(0, 3), min_size=30, max_size=30)


def _table(rows: list[Row]) -> pa.Table:
    columns = {name: [r[name] for r in rows] for name in SCHEMA.names}
    columns["t"] = [T0 + t for t in columns["t"]]
    return pa.table(
        {f.name: pa.array(columns[f.name], pa.int64() if f.name == "t" else f.type) for f in SCHEMA}
    ).cast(SCHEMA)


def _part(rows: list[Row], parts: list[int], i: int) -> list[Row]:
    return [r for r, p in zip(rows, parts, strict=False) if p == i]


def _split(op: WindowAggregate, rows: list[Row], parts: list[int], seed: int) -> list[pa.Table]:
    """The partials the merge sees, shuffled: each VM record on its own, each worker's part folded."""
    vm = [partial_aggregate(op, _table([r])) for r in _part(rows, parts, 0)]
    workers = [partial_aggregate(op, _table(_part(rows, parts, i))) for i in (1, 2, 3)]
    partials = vm + workers
    random.Random(seed).shuffle(partials)
    return partials


# ---- brute force -------------------------------------------------------------------------------


def _windows(window: WindowSpec, t: int) -> list[tuple[int, int]]:
    """Every [start, start + size) with start a multiple of the slide that holds `t` (µs)."""
    size, slide = window.size_s * S, window.slide_s * S
    first = (t - size) // slide + 1
    return [(i * slide, i * slide + size) for i in range(first, t // slide + 1)]


def expected(op: WindowAggregate, rows: list[Row]) -> dict[tuple, dict[str, Any]]:
    assert op.window is not None
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        for w in _windows(op.window, T0 + r["t"]):
            groups[(*w, *[r[k] for k in op.keys])].append(r)
    return {g: {c.out: brute_force(c, members) for c in op.aggs} for g, members in groups.items()}


def got(op: WindowAggregate, table: pa.Table) -> dict[tuple, dict[str, Any]]:
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns(pl.col("window_start", "window_end").dt.epoch("us"))
    return {
        (r["window_start"], r["window_end"], *[r[k] for k in op.keys]): {c.out: r[c.out] for c in op.aggs}
        for r in df.to_dicts()
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, list) and isinstance(b, list):  # the kept records, in any order
        return sorted(map(repr, a)) == sorted(map(repr, b))
    return a == b


def assert_same(actual: dict, wanted: dict) -> None:
    assert set(actual) == set(wanted)
    for group, values in wanted.items():
        for out, value in values.items():
            assert _same(actual[group][out], value), (group, out, actual[group][out], value)


# ---- every kind, tumbling and sliding ----------------------------------------------------------

CASES = [
    pytest.param(fn, window, id=f"{fn}-{name}")
    for fn in CALLS
    for name, window in (("tumbling", TUMBLING), ("sliding", SLIDING))
    if window.tumbling or KINDS[fn].pane_mergeable
]


@pytest.mark.parametrize(("fn", "window"), CASES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, parts=parts_strategy, keyed=st.booleans(), seed=st.integers(0, 2**16))
def test_finish_of_merged_parts_equals_the_brute_force(
    fn: str, window: WindowSpec, rows: list[Row], parts: list[int], keyed: bool, seed: int
) -> None:
    op = WindowAggregate(("k",) if keyed else (), window, (CALLS[fn],))
    merged = merge_partials(op, _split(op, rows, parts, seed))
    assert_same(got(op, finalize(op, merged)), expected(op, rows))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, parts=parts_strategy, seed=st.integers(0, 2**16))
def test_every_kind_in_one_operator(rows: list[Row], parts: list[int], seed: int) -> None:
    """Scalar columns and record lists of several calls share one fold."""
    calls = tuple(AggCall(f"o_{fn}", c.fn, c.arg, c.fields, c.n, c.order_by) for fn, c in CALLS.items())
    op = WindowAggregate(("k",), TUMBLING, calls)
    merged = merge_partials(op, _split(op, rows, parts, seed))
    assert_same(got(op, finalize(op, merged)), expected(op, rows))


# ---- sliding_top_k: fold_per_task, the pane fold and the ranking --------------------------------

TOP_CALLS = ("count", "sum", "min", "max", "avg")


@pytest.mark.parametrize("fn", TOP_CALLS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, parts=parts_strategy, k=st.integers(1, 3))
def test_sliding_top_k_folds_and_ranks_as_the_brute_force(
    fn: str, rows: list[Row], parts: list[int], k: int
) -> None:
    """The VM's records in partial form, folded per pane by fold_per_task's function, and the
    workers' pane partials, ranked per window by the fused operator's fold, finish and top-k."""
    call = AggCall("out", fn, col("v") if fn != "count" else None)  # integers: exact ties in avg too
    op = WindowAggregate(("k",), SLIDING, (call,))
    vm_rows = _part(rows, parts, 0)
    lifted = [
        partial_aggregate(op, _table([r])).drop_columns(["window_start", "window_end"]) for r in vm_rows
    ]
    vm = [
        pl.from_arrow(t).with_columns(pl.lit(T0 + r["t"]).cast(pl.Datetime("us", "UTC")).alias("t"))  # type: ignore[union-attr]
        for t, r in zip(lifted, vm_rows, strict=True)
    ]
    on_panes = [fold_to_panes(pl.concat(vm, how="diagonal"), op)] if vm else []
    workers = [
        pl.from_arrow(partial_aggregate(op, _table(_part(rows, parts, i))))
        .drop("window_end")  # type: ignore[union-attr]
        .rename({"window_start": "t"})
        for i in (1, 2, 3)
    ]
    panes = pl.concat([f.select(workers[0].columns) for f in on_panes + workers], how="vertical_relaxed")
    panes = panes.with_columns(pl.col("t").dt.epoch("ms"))
    spec = SlidingTopK(SLIDING.size_s * 1000, SLIDING.slide_s * 1000, ("k",), (call,), k, "out", ())
    ends = {e for p in panes.get_column("t").to_list() for e in spec.window_ends(p)}
    ranked: dict[tuple, Any] = {}
    for end in ends:
        inside = panes.filter((pl.col("t") >= end - spec.size_ms) & (pl.col("t") < end)).drop("t")
        out = got(op, spec.rank(inside, end).to_arrow())
        ranked |= {g: v["out"] for g, v in out.items()}
    want: dict[tuple, Any] = {}
    per_window: dict[tuple, dict[int, Any]] = defaultdict(dict)
    for (start, end, key), v in expected(op, rows).items():
        per_window[(start, end)][key] = v["out"]
    for (start, end), values in per_window.items():
        order = sorted(values.values(), key=lambda x: (x is not None, x), reverse=True)
        kth = order[min(k, len(order)) - 1]
        want |= {
            (start, end, key): x
            for key, x in values.items()
            if kth is not None and x is not None and x >= kth
        }
    assert set(ranked) == set(want)
    for group, value in want.items():
        assert _same(ranked[group], value), (group, ranked[group], value)


# ---- window_join_count: the join's pairs counted from folded sides ------------------------------

JOIN = JoinCount(10_000, ("id",), ("name",), ("cat",), ("id", "name", "cat"), ("pairs",))
side_rows = st.lists(
    st.tuples(
        st.integers(0, 1),  # side
        st.one_of(st.none(), st.integers(1, 3)),  # join key
        st.sampled_from(["x", "y"]),  # the side's grouping column (name on the left, cat on the right)
        st.integers(0, 3),  # which part (epoch) brings the row
    ),
    max_size=40,
)


def _join_input(rows: list[tuple[int, int | None, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "sponge_side": [r[0] for r in rows],
            "sponge_window_us": [0] * len(rows),
            "id": [r[1] for r in rows],
            "name": [r[2] if r[0] == 0 else None for r in rows],
            "cat": [r[2] if r[0] == 1 else None for r in rows],
            "sponge_n": [1] * len(rows),
        },
        schema={
            "sponge_side": pl.Int32,
            "sponge_window_us": pl.Int64,
            "id": pl.Int64,
            "name": pl.Utf8,
            "cat": pl.Utf8,
            "sponge_n": pl.Int64,
        },
    )


@settings(max_examples=40, deadline=None)
@given(rows=side_rows)
def test_join_count_of_folded_parts_equals_the_brute_force_pair_count(
    rows: list[tuple[int, int | None, str, int]],
) -> None:
    """Each part is folded on arrival and refolded with what the window holds (as WindowBlobs.add
    does); the pairs are then counted from the folded counts, n_left * n_right per matched pair."""
    held: pl.DataFrame | None = None
    for part in range(4):
        new = JOIN.fold(_join_input([r for r in rows if r[3] == part]))
        held = new if held is None else JOIN.fold(pl.concat([held, new], how="vertical_relaxed"))
    assert held is not None
    out = JOIN.pairs(held, 0)
    counted = {(r["id"], r["name"], r["cat"]): r["pairs"] for r in out.to_dicts()}
    want: dict[tuple, int] = defaultdict(int)
    for side, key, name, _ in rows:
        for other_side, other_key, cat, _ in rows:
            if side == 0 and other_side == 1 and key is not None and key == other_key:
                want[(key, name, cat)] += 1
    assert counted == dict(want)


def _side_records(rows: list[tuple[int, int | None, str, int]], side: int) -> pl.DataFrame:
    """A side's records as a chain hands them to the join: its key, grouping column and event time."""
    mine = [r for r in rows if r[0] == side]
    key, column, on = ("id", "name", "date_time") if side == 0 else ("seller", "cat", "a_date_time")
    return pl.DataFrame(
        {
            key: [r[1] for r in mine],
            column: [r[2] for r in mine],
            on: [r[3] * 4_000_000 for r in mine],  # parts 0-2 in the first 10 s window, 3 in the next
        },
        schema={key: pl.Int64, column: pl.Utf8, on: pl.Datetime("us", "UTC")},
    )


@settings(max_examples=40, deadline=None)
@given(rows=side_rows, on_workers=st.lists(st.booleans(), min_size=4, max_size=4))
def test_join_count_of_workers_side_counts_and_vm_rows_equals_the_brute_force(
    rows: list[tuple[int, int | None, str, int]], on_workers: list[bool]
) -> None:
    """Parts counted by workers (JoinSide.counts, per chunk and side) and parts the VM sends as rows
    standing for one each: the operator's pairs per window are the brute-force pair counts."""
    join = WindowJoin(("id",), ("seller",), WindowSpec(10, 10), right_window_on="a_date_time")
    count = WindowAggregate(("window", "id", "name", "cat"), None, (AggCall("pairs", "count"),))
    sides = (
        JoinSide.of(join, count, 0, ("id", "name", "date_time")),
        JoinSide.of(join, count, 1, ("seller", "cat", "a_date_time")),
    )
    spec = JoinCount.of(*sides, count)
    inputs = []
    for part, by_worker in enumerate(on_workers):
        rows_of_part = [r for r in rows if r[3] == part]
        for side in sides:
            records = _side_records(rows_of_part, side.side)
            if by_worker:
                counted = side.counts(records)
                counted = counted.with_columns(
                    pl.col("window_start").dt.epoch("us").alias("sponge_window_us")
                )
            else:
                counted = records.select(
                    pl.lit(side.side, pl.Int32).alias("sponge_side"),
                    (pl.col(side.on).dt.epoch("us") // 10_000_000 * 10_000_000).alias("sponge_window_us"),
                    pl.col(side.keys[0]).alias("id"),
                    pl.col(side.columns[0]),
                    pl.lit(1, pl.Int64).alias("sponge_n"),
                )
            inputs.append(counted)
    both = pl.concat(inputs, how="diagonal_relaxed").select(spec.columns)
    counted_pairs = {}
    for (start_us,), window in both.partition_by("sponge_window_us", as_dict=True).items():
        for r in spec.pairs(spec.fold(window), start_us // 1000).to_dicts():
            counted_pairs[(r["window_start"].timestamp(), r["id"], r["name"], r["cat"])] = r["pairs"]
    want: dict[tuple, int] = defaultdict(int)
    for side, key, name, part in rows:
        for other_side, other_key, cat, other_part in rows:
            same_window = (part == 3) == (other_part == 3)
            if side == 0 and other_side == 1 and key is not None and key == other_key and same_window:
                want[(10.0 if part == 3 else 0.0, key, name, cat)] += 1
    assert counted_pairs == dict(want)
