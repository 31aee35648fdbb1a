"""The record-keeping aggregates' operator (merge/spark/window_fold.py): its processor against the brute
force over epochs, driven through a fake state handle, the bound on what its state holds, and the
Spark runs of the plain and the merged lowering (streamed over several epochs, and regrouped)."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import math
import os
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from core.arrow_types import TIMESTAMP
from core.errors import PlanError
from core.expr import col
from core.plan import WINDOW, AggCall, WindowAggregate, WindowSpec
from core.query import QueryBuilder, agg
from core.spark.lower import apply_operator, lower_plain
from core.spark.streams import keep_alive
from merge.partials import final_schema, group_columns, partial_aggregate, partial_schema
from merge.spark.window_fold import _BUCKET, _END_US, _START_US, WindowFold, WindowFoldProcessor
from tests.core.spark.test_lowering_merge_properties import (
    COLUMNS,
    ENTITY,
    EOS,
    KINDS,
    _as_groups,
    lowered,
    records,
    run_stream,
    shape,
)
from tests.core.spark.test_lowering_merge_properties import assert_same as assert_same_shape
from tests.core.spark.test_lowering_merge_properties import expected as expected_of_shape
from tests.core.spark.test_lowering_merge_properties import table as records_table
from tests.merge.reference_semantics import brute_force
from tests.merge.spark.state_fakes import FakeHandle, Timers, run_epochs

S = 1_000_000  # µs
MS = 1000  # µs per ms
T0 = 1_767_225_600 * S  # a multiple of every window size used here
SIZE = 4 * S
SCHEMA = pa.schema(
    [("t", TIMESTAMP), ("k", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("f", pa.float64())]
)
TUMBLING = WindowSpec(4, 4, on="t")
TOP = AggCall("top", "max_with_ties", col("v"), fields=("s", "k", "t"))
LAST = AggCall("last", "latest_n", fields=("s", "f"), n=2, order_by=("v", "t"))
SCALARS = (
    AggCall("n", "count"),
    AggCall("mean", "avg", col("v")),
    AggCall("total", "sum", col("v")),
    AggCall("lo", "min", col("s")),
    AggCall("hi", "max", col("f")),
)
Q7_LIKE = WindowAggregate((), TUMBLING, (TOP,))
MIXED = WindowAggregate(("k",), TUMBLING, (TOP, LAST, *SCALARS))
Row = dict[str, Any]


def spec_of(op: WindowAggregate, batch: bool = False) -> WindowFold:
    """The spec window_fold builds, with merge/partials.py's row types standing in for Spark's."""
    partial = partial_schema(op, SCHEMA)
    columns = tuple(c for c in partial.names if c not in group_columns(op))
    return WindowFold(op, columns, final_schema(op, partial), batch)


def table(rows: list[Row]) -> pa.Table:
    return pa.table({f.name: pa.array([r[f.name] for r in rows], f.type) for f in SCHEMA})


def packed(spec: WindowFold, rows: list[Row], parts: list[int]) -> pd.DataFrame:
    """The processor's input for `rows`: parts 0 and 1 are two tasks of the VM's records, parts 2 and 3
    two workers' shares (folded into partial rows by the worker's program), each packed by its
    per-task step."""
    frames = []
    for i in range(4):
        mine = [r for r, p in zip(rows, parts, strict=True) if p == i]
        if not mine:
            continue
        if i < 2:
            records = table(mine).append_column(_BUCKET, pa.array([0] * len(mine), pa.int32()))
            frames.append(spec.pack_records(records).to_pandas())
            continue
        partials = pl.from_arrow(partial_aggregate(spec.op, table(mine))).select(  # type: ignore[union-attr]
            pl.lit(0, pl.Int32).alias(_BUCKET),
            pl.col("window_end").dt.epoch("us").alias(_END_US),
            pl.col("window_start").dt.epoch("us").alias(_START_US),
            *spec.keys,
            *spec.columns,
        )
        frames.append(spec.pack_partials(partials).to_pandas())
    return pd.concat(frames) if frames else pd.DataFrame({_END_US: [], "ipc": [], _BUCKET: []})


def plain(value: Any) -> Any:
    """Timestamps as µs since the epoch, through lists and structs."""
    if isinstance(value, dt.datetime):
        return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def results(op: WindowAggregate, out: list[pd.DataFrame]) -> dict[tuple, Row]:
    got: dict[tuple, Row] = {}
    for frame in out:
        for r in plain(pa.Table.from_pandas(frame, preserve_index=False).to_pylist()):
            group = (r["window_start"], r["window_end"], *[r[k] for k in op.keys])
            assert group not in got, f"{group} emitted twice"
            got[group] = {c.out: r[c.out] for c in op.aggs}
    return got


def expected(op: WindowAggregate, rows: list[Row]) -> dict[tuple, Row]:
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        start = r["t"] - r["t"] % SIZE
        groups[(start, start + SIZE, *[r[k] for k in op.keys])].append(r)
    return {g: {c.out: brute_force(c, members) for c in op.aggs} for g, members in groups.items()}


def same(fn: str, a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-9)
    if fn == "max_with_ties":  # the records at the maximum, in no particular order
        return sorted(map(repr, a)) == sorted(map(repr, b))
    return a == b  # latest_n's records in their order


def assert_same(op: WindowAggregate, got: dict[tuple, Row], want: dict[tuple, Row]) -> None:
    assert set(got) == set(want), (sorted(set(got) - set(want)), sorted(set(want) - set(got)))
    fns = {c.out: c.fn for c in op.aggs}
    for group, values in want.items():
        for out, value in values.items():
            assert same(fns[out], got[group][out], value), (group, out, got[group][out], value)


# ---- the processor, over epochs --------------------------------------------------------------------

record = st.fixed_dictionaries(
    {
        "t": st.integers(0, 6 * SIZE - 1).map(lambda t: T0 + t),
        "k": st.one_of(st.none(), st.integers(0, 2)),
        "v": st.one_of(st.none(), st.integers(-2, 2)),  # few values: ties at the maximum
        "s": st.one_of(st.none(), st.sampled_from(["a", "b", "cc"])),
        "f": st.one_of(st.none(), st.sampled_from([-1.5, 0.0, 0.25, 2.0])),
    }
)


def drive(op: WindowAggregate, rows: list[Row], lags: list[int], parts: list[int]) -> tuple[list, FakeHandle]:
    """One epoch per window: epoch e's watermark is window e's start, so window w closes in epoch w + 1.
    A record arrives `lag` epochs before its window's (never late): a window fills over several epochs."""
    arrivals: dict[int, list[tuple[Row, int]]] = defaultdict(list)
    for r, lag, part in zip(rows, lags, parts, strict=False):
        arrivals[max((r["t"] - T0) // SIZE - lag, 0)].append((r, part))
    spec = spec_of(op)
    handle = FakeHandle()
    processor = WindowFoldProcessor(spec)
    processor.init(handle)  # type: ignore[arg-type]
    epochs = []
    for e in range(8):
        came = arrivals[e]
        epochs.append(((T0 + e * SIZE) // MS, packed(spec, [r for r, _ in came], [p for _, p in came])))
    epochs.append((10**15, packed(spec, [], [])))  # the end of the stream closes every window
    return run_epochs(processor, handle, epochs), handle


@pytest.mark.parametrize("op", [Q7_LIKE, MIXED], ids=["q7-like", "mixed-keyed"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(record, min_size=1, max_size=40),
    lags=st.lists(st.integers(0, 2), min_size=40, max_size=40),
    parts=st.lists(st.integers(0, 3), min_size=40, max_size=40),
)
def test_each_window_is_emitted_once_as_the_brute_force_computes_it(
    op: WindowAggregate, rows: list[Row], lags: list[int], parts: list[int]
) -> None:
    """The VM's records and the workers' partial rows of a window, over the epochs they come in, ties
    and nulls included: each (window, group) once, when the watermark passes the window's end."""
    out, handle = drive(op, rows, lags, parts)
    assert_same(op, results(op, out), expected(op, rows))
    assert not handle.map.d, "a closed window's state outlives it"


def _blob(handle: FakeHandle) -> pl.DataFrame:
    ((blob,),) = handle.map.d.values()
    return pl.read_ipc(io.BytesIO(blob))


def test_a_windows_state_holds_its_kept_records_only_however_many_epochs_fill_it() -> None:
    """Q7's shape: one window, 40 epochs of 50 records each. After every epoch the state is one blob with
    one row per group, and its lists hold the ties at the maximum so far and the n greatest, not the
    2,000 records."""
    op = WindowAggregate(("k",), TUMBLING, (TOP, LAST))
    spec = spec_of(op)
    handle = FakeHandle()
    processor = WindowFoldProcessor(spec)
    processor.init(handle)  # type: ignore[arg-type]
    rnd = random.Random(5)
    seen: list[Row] = []
    out: list[pd.DataFrame] = []
    for _ in range(40):
        rows = [
            {
                "t": T0 + rnd.randrange(SIZE),
                "k": rnd.randint(0, 1),
                "v": rnd.choice([None, 0, 1, 2, 3, 3]),
                "s": rnd.choice(["a", "b"]),
                "f": rnd.random(),
            }
            for _ in range(50)
        ]
        seen += rows
        parts = [rnd.randint(0, 3) for _ in rows]
        out += run_epochs(processor, handle, [(T0 // MS, packed(spec, rows, parts))])
        state = _blob(handle)
        assert len(handle.map.d) == 1
        assert state.height == 2  # one row per key
        for r in state.to_dicts():
            members = [x for x in seen if x["k"] == r["k"]]
            best = max(x["v"] for x in members if x["v"] is not None)
            assert len(r["top"]) == sum(x["v"] == best for x in members)  # the ties, not the records
            assert len(r["last"]) == 2
    assert not out, "the window is open"
    out = run_epochs(processor, handle, [(10**15, packed(spec, [], []))])
    assert_same(op, results(op, out), expected(op, seen))
    assert not handle.map.d


def test_rows_of_an_emitted_window_are_late_and_dropped() -> None:
    spec = spec_of(Q7_LIKE)
    handle = FakeHandle()
    processor = WindowFoldProcessor(spec)
    processor.init(handle)  # type: ignore[arg-type]

    def rows(v: int) -> pd.DataFrame:
        r = {"t": T0 + 1, "k": 1, "v": v, "s": "x", "f": 0.0}
        return packed(spec, [r], [0])

    epochs = [
        (T0 // MS, rows(1)),
        ((T0 + SIZE) // MS, rows(1)),  # the watermark reaches the window's end: emitted with both ties
        ((T0 + SIZE) // MS, rows(9)),  # late: the window is out
        (10**15, rows(9)[:0]),
    ]
    out = results(Q7_LIKE, run_epochs(processor, handle, epochs))
    assert [len(v["top"]) for v in out.values()] == [2]
    assert not handle.map.d


def test_a_batch_emits_each_window_as_soon_as_it_is_folded() -> None:
    """A batch query has no watermark and no timers: the group's rows come in one call."""
    spec = spec_of(MIXED, batch=True)
    handle = FakeHandle()
    processor = WindowFoldProcessor(spec)
    processor.init(handle)  # type: ignore[arg-type]
    rnd = random.Random(2)
    rows = [
        {
            "t": T0 + rnd.randrange(3 * SIZE),
            "k": rnd.randint(0, 1),
            "v": rnd.randint(0, 2),
            "s": "a",
            "f": 1.0,
        }
        for _ in range(30)
    ]
    inputs = packed(spec, rows, [rnd.randint(0, 3) for _ in rows])
    out = list(processor.handleInputRows((0,), iter([inputs]), Timers(-1)))  # type: ignore[arg-type]
    assert_same(MIXED, results(MIXED, out), expected(MIXED, rows))
    assert not handle.map.d and not handle.timers


# ---- Spark: the plain and the merged lowering, streamed over several epochs ---------------------


CUTS = [-9, -4, 1, 6]  # s from T0: epochs that cut through windows of 4 s


class Epochs:
    """A table as a file stream read one file per epoch, cut at CUTS, then the end-of-stream
    punctuation, watermarked as a run's sources are."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark, self.root, self.count = spark, root, 0

    def __call__(self, data: pa.Table, time_column: str) -> DataFrame:
        self.count += 1
        folder = self.root / f"stream{self.count}"
        folder.mkdir()
        t = data.column(time_column).cast(pa.int64()).to_numpy(zero_copy_only=False)
        bounds = [-(2**62), *[T0 + c * S for c in CUTS], 2**62]
        parts = [data.filter(pa.array((t >= lo) & (t < hi))) for lo, hi in itertools.pairwise(bounds)]
        punctuation = {f.name: pa.nulls(1, f.type) for f in data.schema}
        punctuation[time_column] = pa.array([EOS], pa.int64()).cast(data.schema.field(time_column).type)
        for i, part in enumerate([*parts, pa.table(punctuation, data.schema)]):
            path = folder / f"epoch{i}.parquet"
            pq.write_table(part, path)
            os.utime(path, (1_000_000 + i, 1_000_000 + i))  # the file source reads by modification time
        reader = self.spark.readStream.schema(from_arrow_schema(data.schema)).option("maxFilesPerTrigger", 1)
        return keep_alive(reader.parquet(str(folder)), time_column, heartbeats=False)


STREAMED = [
    pytest.param(("max_with_ties",), (), False, id="q7-like-global"),
    pytest.param(tuple(KINDS), ("key",), True, id="every-kind-keyed-prefix"),
]


@pytest.mark.spark
@pytest.mark.parametrize(("kinds", "keys", "prefix"), STREAMED)
@pytest.mark.parametrize("share", [None, 0.5], ids=["plain", "merged-0.5"])
def test_streamed_over_epochs_equals_the_direct_computation(
    spark: SparkSession,
    tmp_path: Path,
    kinds: tuple[str, ...],
    keys: tuple[str, ...],
    prefix: bool,
    share: Any,
) -> None:
    """Windows whose records (and workers' partials) come in two or three epochs, through the plain
    lowering and through the merge operator; each window's rows once, after its end."""
    sh = shape(kinds, "tumbling", keys, prefix)
    plan, _ = sh.plan()
    rows = records(80, seed=3)
    stream = Epochs(spark, tmp_path)
    if share is None:
        (df,) = lower_plain(plan, lambda _: stream(records_table(rows), "date_time")).values()
    else:
        (df,) = lowered(spark, plan, rows, share, chunk_rows=9, stream=stream)[0].values()
    name = f"fold_{'plain' if share is None else 'merged'}_{len(kinds)}_{len(keys)}"
    assert_same_shape(
        sh,
        _as_groups(sh, run_stream(spark, plan, df, tmp_path, name, epochs=len(CUTS) + 2)),
        expected_of_shape(sh, rows),
    )


@pytest.mark.spark
def test_a_regrouping_aggregate_keeps_records_and_feeds_a_stateful_operator(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Regrouped by the upstream window (its struct a key, closed at its end), and the window it emits
    keeps the watermark marker: a second regrouping after a flat_map sees its windows close."""
    q = QueryBuilder("regroup")
    counts = q.source(ENTITY, COLUMNS).key_by("k")
    per_key = counts.window_aggregate(WindowSpec(4, 4), n=agg("count"))
    tops = per_key.key_by("window").window_aggregate(
        None, top=agg("max_with_ties", col("n"), fields=("k", "n"))
    )
    tops.flat_map("top").key_by("window").window_aggregate(
        None, ties=agg("count"), total=agg("sum", col("n"))
    ).sink()
    plan = q.build()
    rows = records(80, seed=4)
    stream = Epochs(spark, tmp_path)
    (df,) = lower_plain(plan, lambda _: stream(records_table(rows), "date_time")).values()
    got = {
        (r["window_start"] - T0, r["window_end"] - T0): (r["ties"], r["total"])
        for r in run_stream(spark, plan, df, tmp_path, "regroup", epochs=len(CUTS) + 2)
    }
    per_window: dict[tuple, dict] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        start = r["date_time"] - r["date_time"] % SIZE
        per_window[(start - T0, start + SIZE - T0)][r["k"]] += 1
    want = {}
    for w, counted in per_window.items():
        best = max(counted.values())
        ties = sum(n == best for n in counted.values())
        want[w] = (ties, ties * best)
    assert got == want


@pytest.mark.spark
def test_a_record_keeping_aggregate_without_a_window_to_close_is_refused(spark: SparkSession) -> None:
    df = spark.createDataFrame(records_table(records(5, seed=1)))
    top = AggCall("top", "max_with_ties", col("v"), fields=("k",))
    with pytest.raises(PlanError, match="needs a window to close"):
        apply_operator(WindowAggregate(("k",), None, (top,)), [df], None)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="sliding windows"):
        apply_operator(WindowAggregate(("k",), WindowSpec(4, 2), (top,)), [df], None)  # type: ignore[arg-type]


@pytest.mark.spark
def test_the_output_has_the_native_lowerings_columns_and_types(spark: SparkSession) -> None:
    """Window struct, keys, and per call the type Spark's aggregate gives it (a sum of ints a bigint,
    an avg a double) or, for a record list, its records cut to the call's fields."""
    df = spark.createDataFrame(records_table(records(5, seed=1))).withColumn("t", F.col("date_time"))
    calls = (
        AggCall("top", "max_with_ties", col("v"), fields=("s", "date_time")),
        AggCall("n", "count"),
        AggCall("mean", "avg", col("v")),
        AggCall("lo", "min", col("s")),
    )
    out = apply_operator(WindowAggregate(("k",), WindowSpec(4, 4), calls), [df], None)  # type: ignore[arg-type]
    assert out.schema.simpleString() == (
        "struct<window:struct<start:timestamp,end:timestamp>,k:bigint,"
        "top:array<struct<s:string,date_time:timestamp>>,n:bigint,mean:double,lo:string>"
    )
    assert WINDOW in out.columns
