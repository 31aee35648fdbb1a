"""Every merge path of the Spark lowering, for every aggregate kind, against a direct computation.

Why through the lowering and not the fold functions: a merge is more than its fold rules. The
lowering picks the path (a partial chain's aggregate over the VM's records in partial form and the
workers' rows, a rows chain's union, the fused sliding top-k), aligns the workers' columns with the
VM's, renames their pane start to the event-time column and places the window steps; a mistake in
any of those passes every test of the rules alone. So each plan here is built with the query
builder, rewritten, split into offload chains and lowered by `lower_rewritten` exactly as a run does.
Only the two streams a run reads are replaced:

* the VM's share of a source is a DataFrame of the records the real router's mask keeps
  (core/offload_plan.py `offloaded_mask` over the record ids, at the test's share);
* the workers' stream is what the real transient program (lambda_worker/transient.py) returns for
  the other records, cut into chunks as the router cuts them, each chunk run on the columns the chain
  reads, with window_end dropped as the offload session drops it.

Most plans run as batch DataFrames: the lowering of an aggregate is the same, and one Spark session
runs each in a fraction of a second. The fused sliding top-k ranks a window when the watermark
passes its end, which a batch query never does, so it runs as a stream over files, in two epochs
(partials of one window arrive in both) closed by an end-of-stream punctuation row as a run's are;
so do a tumbling and a sliding aggregate, whose merges then go through Spark's state across epochs.

The expected output is computed row by row in plain Python from all the records (the filter and the
projection included), without merge/: windows aligned to the Unix epoch, nulls skipped by every
aggregate but count, a window or group with no record after the filter absent from the output.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from core.arrow_types import TIMESTAMP
from core.expr import DType, col
from core.offload_chains import PARTIAL, ROWS, OffloadChain, offload_chains
from core.offload_plan import OffloadPlan, offloaded_mask
from core.plan import AggCall, LogicalPlan, Source, WindowAggregate
from core.plan import WindowSpec as Window
from core.query import QueryBuilder, Stream, agg
from core.rewrite import rewrite
from core.spark.lower import _fusions, _local_partials, lower_plain, lower_rewritten, state_store_for
from core.spark.streams import EOS_TIME, keep_alive
from lambda_worker.transient import TransientProgram
from merge.algebra import KINDS
from tests.merge.reference_semantics import brute_force

S = 1_000_000  # µs
T0 = 1_767_225_600 * S  # 2026-01-01, a multiple of every window size used here
EOS = 4_102_444_800 * S
assert dt.datetime.fromtimestamp(EOS // S, dt.UTC).date().isoformat() == EOS_TIME
ENTITY = "rec"
COLUMNS = {
    "date_time": DType.TIMESTAMP,
    "k": DType.INT64,
    "v": DType.INT64,
    "s": DType.STRING,
    "f": DType.FLOAT64,
}
SCHEMA = pa.schema(
    [("date_time", TIMESTAMP), ("k", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("f", pa.float64())]
)
PANE_KINDS = tuple(k for k in KINDS if KINDS[k].pane_mergeable)
Row = dict[str, Any]
ArgFn = Callable[[Row], Any]

# ---- plans -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Names:
    """The columns the aggregate reads: the source's own, or those the filter and projection make."""

    time: str
    key: str
    int: str
    str: str
    float: str


PLAIN = Names("date_time", "k", "v", "s", "f")
PROJECTED = Names("ts", "g", "x", "s", "y")


def _prefixed(stream: Stream) -> Stream:
    """The filter and projection before the aggregate: k 3 (and a null k) dropped, the event time
    renamed, new values."""
    return stream.filter(col("k").ne(3)).map(
        ts=col("date_time"), g=col("k"), x=col("v") * 2, s=col("s"), y=col("f") + 0.5
    )


def _prefixed_rows(rows: list[Row]) -> list[Row]:
    """`_prefixed` in plain Python: a null predicate drops the row, a null stays null in arithmetic."""
    return [
        {
            "ts": r["date_time"],
            "g": r["k"],
            "x": None if r["v"] is None else r["v"] * 2,
            "s": r["s"],
            "y": None if r["f"] is None else r["f"] + 0.5,
        }
        for r in rows
        if r["k"] is not None and r["k"] != 3
    ]


def _both(*values: Any) -> bool:
    return all(v is not None for v in values)


def calls_of(kind: str, n: Names) -> dict[str, tuple[AggCall, ArgFn | None]]:
    """A kind's calls over each argument type it takes (timestamps and expressions included), each
    with its argument in plain Python; record lists copy fields of several types."""
    i, s, f, t = n.int, n.str, n.float, n.time
    match kind:
        case "count":
            return {"n": (agg("count"), None)}
        case "sum":
            return {
                "sum_i": (agg(kind, col(i)), lambda r: r[i]),
                "sum_f": (agg(kind, col(f)), lambda r: r[f]),
                "sum_e": (agg(kind, col(f) * col(i)), lambda r: r[f] * r[i] if _both(r[f], r[i]) else None),
            }
        case "min" | "max":
            return {
                f"{kind}_i": (agg(kind, col(i)), lambda r: r[i]),
                f"{kind}_s": (agg(kind, col(s)), lambda r: r[s]),
                f"{kind}_f": (agg(kind, col(f)), lambda r: r[f]),
                f"{kind}_t": (agg(kind, col(t)), lambda r: r[t]),
                # Spark's remainder takes the dividend's sign
                f"{kind}_e": (
                    agg(kind, col(i) % 3),
                    lambda r: None if r[i] is None else int(math.fmod(r[i], 3)),
                ),
            }
        case "avg":
            return {
                "avg_i": (agg(kind, col(i)), lambda r: r[i]),
                "avg_f": (agg(kind, col(f)), lambda r: r[f]),
                "avg_e": (agg(kind, col(i) / 4), lambda r: None if r[i] is None else r[i] / 4),
            }
        case "max_with_ties":
            return {
                "top_i": (agg(kind, col(i), fields=(s, n.key)), lambda r: r[i]),
                "top_f": (agg(kind, col(f), fields=(i, t)), lambda r: r[f]),
            }
        case "latest_n":
            return {
                "last_i": (agg(kind, fields=(s, n.key), n=2, order_by=(i,)), None),
                "last_f": (agg(kind, fields=(i,), n=3, order_by=(f, s)), None),
                "last_t": (agg(kind, fields=(t, f), n=1, order_by=(t,)), None),
            }
    raise AssertionError(kind)


@dataclass(frozen=True)
class Shape:
    """One plan: a window aggregate of `kinds` grouped by `keys` (of "key", "str"), after a filter and
    projection or straight on the source, optionally ranked by its count per window."""

    kinds: tuple[str, ...]
    size_s: int
    slide_s: int
    keys_of: tuple[str, ...]
    prefix: bool
    top_k: int = 0  # a per-window top-k by the count after the aggregate (the fused operator), or none

    @property
    def names(self) -> Names:
        return PROJECTED if self.prefix else PLAIN

    @property
    def window(self) -> Window:
        return Window(self.size_s, self.slide_s, on=self.names.time)

    @property
    def calls(self) -> dict[str, tuple[AggCall, ArgFn | None]]:
        return {out: c for kind in self.kinds for out, c in calls_of(kind, self.names).items()}

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(getattr(self.names, k) for k in self.keys_of)

    def plan(self) -> tuple[LogicalPlan, dict[str, DType]]:
        """The plan, and the schema the query builder gives the aggregate's output."""
        q = QueryBuilder("merge_" + "_".join(self.kinds))
        stream = q.source(ENTITY, COLUMNS)
        stream = _prefixed(stream) if self.prefix else stream
        calls = {out: call for out, (call, _) in self.calls.items()}
        out = stream.key_by(*self.keys).window_aggregate(self.window, **calls)
        (out.key_by().top_k(self.top_k, "n") if self.top_k else out).sink()
        return q.build(), out.schema

    def id(self) -> str:
        window = "tumbling" if self.size_s == self.slide_s else "sliding"
        kinds = "every-kind" if len(self.kinds) > 1 else self.kinds[0]
        keys = "+".join(self.keys_of) or "global"
        return f"{kinds}-{window}-{keys}-{'prefix' if self.prefix else 'bare'}"


def shape(kinds: Sequence[str], window: str, keys: tuple[str, ...], prefix: bool, top_k: int = 0) -> Shape:
    size, slide = {"tumbling": (4, 4), "sliding": (6, 2)}[window]
    return Shape(tuple(kinds), size, slide, keys, prefix, top_k)


# ---- the direct computation --------------------------------------------------------------------


def _windows(size_s: int, slide_s: int, t: int) -> list[tuple[int, int]]:
    """Every [start, start + size) with start a multiple of the slide that holds `t` (µs)."""
    size, slide = size_s * S, slide_s * S
    return [(i * slide, i * slide + size) for i in range((t - size) // slide + 1, t // slide + 1)]


def expected(shape: Shape, records: list[Row]) -> dict[tuple, dict[str, Any]]:
    """(window start - T0, window end - T0, key...) -> each call's result, over all the records."""
    rows = _prefixed_rows(records) if shape.prefix else records
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        for start, end in _windows(shape.size_s, shape.slide_s, r[shape.names.time]):
            groups[(start - T0, end - T0, *[r[k] for k in shape.keys])].append(r)
    out = {
        g: {o: brute_force(c, members, a) for o, (c, a) in shape.calls.items()}
        for g, members in groups.items()
    }
    return _ranked(out, shape.top_k) if shape.top_k else out


def _ranked(groups: dict[tuple, dict[str, Any]], k: int) -> dict[tuple, dict[str, Any]]:
    """Per window, the groups whose count is at least the k-th largest (ties at the k-th kept)."""
    by_window: dict[tuple, list[tuple]] = defaultdict(list)
    for g in groups:
        by_window[g[:2]].append(g)
    kept = {}
    for members in by_window.values():
        counts = sorted((groups[g]["n"] for g in members), reverse=True)
        kth = counts[min(k, len(counts)) - 1]
        kept |= {g: groups[g] for g in members if groups[g]["n"] >= kth}
    return kept


def _same(kind: str, a: Any, b: Any) -> bool:
    """Equal values of equal types (a sum of integers stays an integer); floats summed in another
    order are close; the records kept at a maximum are kept in no particular order."""
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
        )
    if kind == "max_with_ties" and isinstance(a, list) and isinstance(b, list):
        return sorted(map(repr, a)) == sorted(map(repr, b))
    return type(a) is type(b) and a == b


def assert_same(
    shape: Shape, actual: dict[tuple, dict[str, Any]], wanted: dict[tuple, dict[str, Any]]
) -> None:
    extra, missing = set(actual) - set(wanted), set(wanted) - set(actual)
    assert not extra and not missing, (sorted(extra, key=repr), sorted(missing, key=repr))
    for group, values in wanted.items():
        for out, value in values.items():
            kind = shape.calls[out][0].fn
            assert _same(kind, actual[group][out], value), (group, out, actual[group][out], value)


# ---- records and the two streams ---------------------------------------------------------------


def records(n: int, seed: int) -> list[Row]:
    """Random records within ±13 s of T0 (nulls in every aggregated column and in the key, few values
    so maxima tie), then groups the random ones never reach: an all-null group alone in its windows
    (sum, min, max and avg null there, count not, max_with_ties empty), and a window of k 3 only,
    which the filter empties."""
    rnd = random.Random(seed)

    def maybe(value: Any, p: float = 0.2) -> Any:
        return None if rnd.random() < p else value

    rows = [
        {
            "date_time": T0 + rnd.randint(-13 * S, 13 * S),
            "k": maybe(rnd.randint(0, 3), 0.05),
            "v": maybe(rnd.randint(-5, 5)),
            "s": maybe(rnd.choice(["a", "b", "cc"])),
            "f": maybe(round(rnd.uniform(-3, 3), 1)),
        }
        for _ in range(n)
    ]
    rows += [{"date_time": T0 + 20 * S + i, "k": 4, "v": None, "s": None, "f": None} for i in range(6)]
    rows += [{"date_time": T0 + 31 * S + i * S, "k": 3, "v": i, "s": "z", "f": 1.0} for i in range(3)]
    return rows


def table(rows: list[Row]) -> pa.Table:
    columns = {f.name: [r[f.name] for r in rows] for f in SCHEMA}
    columns["date_time"] = pa.array(columns["date_time"], pa.int64()).cast(TIMESTAMP)
    return pa.table(columns, SCHEMA)


def split(rows: list[Row], share: float) -> np.ndarray:
    """The real router's choice for records whose ids are their positions: True goes to the workers."""
    plan = OffloadPlan(1, share=share, workers=2)
    return offloaded_mask(plan, None, np.arange(len(rows), dtype=np.int64))


def worker_output(plan: LogicalPlan, chain: OffloadChain, records: pa.Table, chunk_rows: int) -> pa.Table:
    """What the workers return for `records`: the chain's transient program over each chunk of the
    columns it reads, the chunks' outputs one after another as the offload stream yields them."""
    program = TransientProgram.from_plan(plan, chain.node_ids)
    reads = program.input_columns()
    sent = records.select([c for c in records.column_names if reads is None or c in reads])
    out = [program.run_table(sent.slice(i, chunk_rows)) for i in range(0, sent.num_rows, chunk_rows)]
    # One chunk: pyspark's createDataFrame drops every row of a table whose first batch is empty.
    return pa.concat_tables(out).combine_chunks() if out else program.output_schema(sent.schema).empty_table()


StreamOf = Callable[[pa.Table, str], DataFrame]  # a table as a stream, watermarked on a time column


def lowered(
    spark: SparkSession,
    plan: LogicalPlan,
    rows: list[Row],
    share: float,
    chunk_rows: int,
    stream: StreamOf | None = None,
) -> tuple[dict[str, DataFrame], tuple[OffloadChain, ...]]:
    """`plan`'s sinks as `lower_rewritten` builds them with its chains offloaded at `share`: the VM's
    records and the workers' output as batch frames, or as streams made by `stream`."""
    as_frame: StreamOf = stream or (lambda data, _: spark.createDataFrame(data))
    chains = tuple(offload_chains(plan))
    assert chains, "nothing of the plan is offloaded"
    all_records = table(rows)
    off = split(rows, share)
    local, workers = all_records.filter(pa.array(~off)), all_records.filter(pa.array(off))

    def sources(src: Source) -> DataFrame:
        return as_frame(local, "date_time")

    def offloaded(chain: OffloadChain) -> DataFrame:
        out = worker_output(plan, chain, workers, chunk_rows)
        if chain.kind == ROWS:
            return as_frame(out, chain.event_time or "date_time")
        return as_frame(out, "window_start").drop("window_end")  # as core/spark/offload_session.py does

    return lower_rewritten(rewrite(plan), sources, chains, offloaded), chains


def _micros(df: DataFrame) -> DataFrame:
    """The sink's window bounds as µs since the epoch: no time zone between Spark and the comparison."""
    return df.withColumns({c: F.unix_micros(F.col(c)) for c in ("window_start", "window_end")})


def _plain(value: Any) -> Any:
    """A collected value with its timestamps as µs since the epoch (Spark hands them out as naive
    local datetimes: whole seconds through the local zone, then the microseconds)."""
    if isinstance(value, dt.datetime):
        return int(time.mktime(value.timetuple())) * S + value.microsecond
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _as_groups(shape: Shape, rows: Sequence[Any]) -> dict[tuple, dict[str, Any]]:
    out: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        d = r.asDict(recursive=True)
        group = (d["window_start"] - T0, d["window_end"] - T0, *[d[k] for k in shape.keys])
        assert group not in out, f"two rows for group {group}"
        out[group] = {o: _plain(d[o]) for o in shape.calls}
    return out


def collect(shape: Shape, df: DataFrame) -> dict[tuple, dict[str, Any]]:
    return _as_groups(shape, _micros(df).collect())


_SPARK_TYPES = {
    DType.INT64: "bigint",
    DType.FLOAT64: "double",
    DType.STRING: "string",
    DType.TIMESTAMP: "timestamp",
}


def assert_types(
    shape: Shape, merged: DataFrame, plan: LogicalPlan, spark: SparkSession, declared: dict
) -> None:
    """The merged sink writes the columns and types the plain lowering writes, and the scalar types
    the query builder declared."""
    (plain,) = lower_plain(plan, lambda src: spark.createDataFrame(table([]))).values()
    # Names and types; nullability differs (a count of records is never null, a sum of counts may be).
    assert merged.schema.simpleString() == plain.schema.simpleString()
    for out in shape.calls:
        if declared[out] in _SPARK_TYPES:
            assert merged.schema[out].dataType.simpleString() == _SPARK_TYPES[declared[out]], out


# ---- batch: every kind x window shape x grouping x prefix ---------------------------------------

RECORDS = records(60, seed=11)
GROUPINGS = [(("key",), False), ((), True), (("key",), True), ((), False)]


def _case(kinds: Sequence[str], window: str, keys: tuple[str, ...], prefix: bool, share: float) -> Any:
    sh = shape(kinds, window, keys, prefix)
    return pytest.param(sh, share, id=f"{sh.id()}-{share}")


# Every kind of a window shape in one operator, grouped and global, with and without the filter and
# projection, at share 0.5 and at share 1.0 (where the VM's side of the merge is empty); then each
# kind alone, so that a broken kind names itself.
CASES = [
    _case(kinds, window, keys, prefix, share)
    for kinds, window in ((tuple(KINDS), "tumbling"), (PANE_KINDS, "sliding"))
    for keys, prefix in GROUPINGS
    for share in (0.5, 1.0)
] + [
    _case((kind,), window, ("key",), True, 0.5)
    for kind in KINDS
    for window in ("tumbling", "sliding")
    if window == "tumbling" or kind in PANE_KINDS
]


def test_the_split_puts_the_edge_groups_on_both_sides() -> None:
    """At share 0.5 the all-null group has records on the VM and in a worker's chunk (the avg merge of
    a worker's 0.0 / 0 with the VM's null), and both sides hold a fair share of the records."""
    off = split(RECORDS, 0.5)
    null_group = [o for r, o in zip(RECORDS, off, strict=True) if r["k"] == 4]
    assert any(null_group) and not all(null_group)
    assert 0.3 < off.mean() < 0.7
    assert split(RECORDS, 1.0).all() and not split(RECORDS, 0.0).any()


@pytest.mark.parametrize(("shape", "share"), CASES)
def test_partial_merge_equals_the_direct_computation(spark: SparkSession, shape: Shape, share: float) -> None:
    plan, declared = shape.plan()
    sinks, chains = lowered(spark, plan, RECORDS, share, chunk_rows=7)
    assert [c.kind for c in chains] == [PARTIAL], "the aggregate ends the chain: its partials are merged"
    (df,) = sinks.values()
    wanted = expected(shape, RECORDS)
    assert wanted
    assert_same(shape, collect(shape, df), wanted)
    if share == 0.5:  # the types come from the plan, whatever the share
        assert_types(shape, df, plan, spark, declared)


def test_a_rows_chain_feeds_every_kind_after_a_fan_out(spark: SparkSession) -> None:
    """A fan-out ends the chain before the aggregates: the workers return the filtered records, the VM
    unions them with its own, and both aggregates (every kind tumbling, the pane kinds sliding) run
    over the union."""
    q = QueryBuilder("fan_out")
    kept = q.source(ENTITY, COLUMNS).filter(col("k").ne(3))
    tumbling = shape(tuple(KINDS), "tumbling", ("key",), prefix=False)
    sliding = shape(PANE_KINDS, "sliding", (), prefix=False)
    for name, sh in (("tumbling", tumbling), ("sliding", sliding)):
        calls = {out: call for out, (call, _) in sh.calls.items()}
        kept.key_by(*sh.keys).window_aggregate(sh.window, **calls).sink(name)
    plan = q.build()
    filtered = [r for r in RECORDS if r["k"] is not None and r["k"] != 3]
    sinks, chains = lowered(spark, plan, RECORDS, 0.5, chunk_rows=9)
    assert [c.kind for c in chains] == [ROWS]
    for name, sh in (("tumbling", tumbling), ("sliding", sliding)):
        assert_same(sh, collect(sh, sinks[name]), expected(sh, filtered))


# ---- batch: drawn plans, records, shares and chunk sizes ----------------------------------------

row_strategy = st.fixed_dictionaries(
    {
        "date_time": st.integers(-9 * S, 9 * S).map(lambda t: T0 + t),
        "k": st.one_of(st.none(), st.integers(0, 3)),
        "v": st.one_of(st.none(), st.integers(-3, 3)),
        "s": st.one_of(st.none(), st.sampled_from(["a", "b", "cc"])),
        "f": st.one_of(st.none(), st.sampled_from([-1.5, 0.0, 0.25, 2.0])),
    }
)


@st.composite
def drawn_shapes(draw: st.DrawFn) -> Shape:
    size, slide = draw(st.sampled_from([(2, 2), (4, 4), (6, 2), (6, 3), (8, 4)]))
    allowed = list(KINDS) if size == slide else list(PANE_KINDS)
    kinds = draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=3, unique=True))
    keys = draw(st.sampled_from([(), ("key",), ("str",), ("key", "str")]))
    return Shape(tuple(kinds), size, slide, keys, draw(st.booleans()))


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    shape=drawn_shapes(),
    rows=st.lists(row_strategy, min_size=1, max_size=40),
    share=st.sampled_from([0.0, 0.3, 0.5, 0.8, 1.0]),
    chunk_rows=st.integers(1, 12),
)
def test_drawn_plans_merge_to_the_direct_computation(
    spark: SparkSession, shape: Shape, rows: list[Row], share: float, chunk_rows: int
) -> None:
    """Null and string keys, several kinds in one operator, other window sizes; a plan whose filter
    drops every record has no window and no row."""
    plan, _ = shape.plan()
    (df,) = lowered(spark, plan, rows, share, chunk_rows)[0].values()
    assert_same(shape, collect(shape, df), expected(shape, rows))


# ---- streaming: the fused sliding top-k, and the merges in Spark's state across epochs ---------


class Streams:
    """Static tables as file streams read one file per epoch and watermarked by `keep_alive` as a
    run's are: each table cut at T0 into two epochs, and a third with the end-of-stream punctuation."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark = spark
        self.root = root
        self.count = 0

    def __call__(self, data: pa.Table, time_column: str) -> DataFrame:
        self.count += 1
        folder = self.root / f"stream{self.count}"
        folder.mkdir()
        t = data.column(time_column).cast(pa.int64()).to_numpy(zero_copy_only=False)
        punctuation = {f.name: pa.nulls(1, f.type) for f in data.schema}
        punctuation[time_column] = pa.array([EOS], pa.int64()).cast(data.schema.field(time_column).type)
        epochs = [
            data.filter(pa.array(t < T0)),
            data.filter(pa.array(t >= T0)),
            pa.table(punctuation, data.schema),
        ]
        for i, part in enumerate(epochs):
            path = folder / f"epoch{i}.parquet"
            pq.write_table(part, path)
            os.utime(path, (1_000_000 + i, 1_000_000 + i))  # the file source reads by modification time
        reader = self.spark.readStream.schema(from_arrow_schema(data.schema)).option("maxFilesPerTrigger", 1)
        return keep_alive(reader.parquet(str(folder)), time_column, heartbeats=False)


@contextmanager
def state_store_of(spark: SparkSession, plan: LogicalPlan) -> Iterator[None]:
    """Start queries of `plan` on the state store it needs (as runner.stream_to_end does), then restore."""
    key = "spark.sql.streaming.stateStore.providerClass"
    before = spark.conf.get(key)
    spark.conf.set(key, state_store_for(plan))
    try:
        yield
    finally:
        spark.conf.set(key, before)


def run_stream(
    spark: SparkSession, plan: LogicalPlan, df: DataFrame, root: Path, name: str = "", epochs: int = 3
) -> list[Any]:
    """Run `df` to its end in append mode into a memory table; `epochs`: the epochs that read data."""
    name = name or f"merge_{root.name}".replace("-", "_")
    with state_store_of(spark, plan):
        try:
            query = (
                _micros(df)
                .writeStream.format("memory")
                .queryName(name)
                .outputMode("append")
                .option("checkpointLocation", str(root / f"checkpoint_{name}"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(180)
            assert not query.isActive, "the stream did not end"
            assert query.exception() is None
            assert len([p for p in query.recentProgress if p["numInputRows"]]) == epochs, "one epoch per file"
            return spark.table(name).collect()
        finally:
            spark.catalog.dropTempView(name)


STREAMED = [
    pytest.param(shape(PANE_KINDS, "sliding", ("key",), True, top_k=2), 0.5, id="fused-top2-key-prefix-0.5"),
    pytest.param(shape(PANE_KINDS, "sliding", (), False, top_k=1), 1.0, id="fused-top1-global-bare-1.0"),
    pytest.param(shape(KINDS, "tumbling", ("key",), True), 0.5, id="every-kind-tumbling-key-prefix-0.5"),
    pytest.param(shape(PANE_KINDS, "sliding", ("key",), False), 0.5, id="every-kind-sliding-key-bare-0.5"),
]


@pytest.mark.parametrize(("shape", "share"), STREAMED)
def test_streamed_merge_equals_the_direct_computation(
    spark: SparkSession, tmp_path: Path, shape: Shape, share: float
) -> None:
    plan, _ = shape.plan()
    assert bool(_fusions(plan)) == bool(shape.top_k), "a sliding aggregate feeding a top-k runs fused"
    sinks, _ = lowered(spark, plan, RECORDS, share, chunk_rows=7, stream=Streams(spark, tmp_path))
    (df,) = sinks.values()
    assert_same(shape, _as_groups(shape, run_stream(spark, plan, df, tmp_path)), expected(shape, RECORDS))


def test_the_partial_form_keeps_one_event_time_column(spark: SparkSession, tmp_path: Path) -> None:
    """A min or max of the event-time column lifts a copy of it into the partial form; a copy that kept
    the watermark marker made the fused operator fail its first epoch (MULTIPLE_EVENT_TIME_COLUMNS),
    offloaded or not: the plain lowering of the fused pair puts the VM's records in partial form too.
    Only the stream's plan is analysed here; the streamed cases above run it."""
    plan, _ = shape(("count", "min", "max"), "sliding", ("key",), False, top_k=1).plan()
    (op,) = [n.op for n in plan.nodes if isinstance(n.op, WindowAggregate)]
    local = Streams(spark, tmp_path)(table(RECORDS), "date_time")
    fields = _local_partials(local, op).schema.fields
    assert [f.name for f in fields if "spark.watermarkDelayMs" in f.metadata] == ["date_time"]
