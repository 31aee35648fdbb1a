"""Transient programs against independent references: each operator, each aggregate, Q5 and Q7 chains."""

from __future__ import annotations

from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from core.errors import PlanError
from core.expr import DType, col
from core.nexmark.generator import GeneratorConfig, generate
from core.nexmark.params import QueryParams
from core.nexmark.queries import get_query
from core.offload_chains import offload_chains
from core.plan import WindowSpec
from core.query import QueryBuilder, agg
from core.results import diff_results
from lambda_worker.transient import TransientProgram
from merge.partials import TIMESTAMP, finalize, merge_partials

pytestmark = pytest.mark.timeout(120)

S = 1_000_000
COLUMNS = {"a": DType.INT64, "b": DType.FLOAT64, "s": DType.STRING, "t": DType.TIMESTAMP}


def _rows() -> pa.Table:
    n = 200
    return pa.table(
        {
            "a": pa.array([(i * 37) % 101 - 50 if i % 17 else None for i in range(n)], pa.int64()),
            "b": pa.array([i * 0.25 - 10 for i in range(n)], pa.float64()),
            "s": pa.array([["x", "y", "zz", None][i % 4] for i in range(n)], pa.string()),
            "t": pa.array([1_767_225_600_000_000 + i * 123_457 for i in range(n)], pa.int64()).cast(
                TIMESTAMP
            ),
        }
    )


def _program(build) -> tuple[TransientProgram, list[str]]:  # type: ignore[no-untyped-def]
    q = QueryBuilder("t")
    build(q.source("x", COLUMNS)).sink()
    plan = q.build()
    ids = [n.id for n in plan.topological_order() if n.op.kind not in ("source", "sink")]
    return TransientProgram.from_plan(plan, ids), ids


def test_map_matches_python_arithmetic_including_java_remainder_and_division() -> None:
    prog, _ = _program(lambda s: s.map(m=col("a") % 7, d=col("a") / 4, p=col("b") * 2 + 1, s=col("s")))
    out = prog.run(_rows()).to_pydict()
    src = _rows().to_pydict()
    for i, a in enumerate(src["a"]):
        if a is None:
            assert out["m"][i] is None and out["d"][i] is None
        else:
            assert out["m"][i] == int(abs(a) % 7 * (1 if a >= 0 else -1))  # the dividend's sign, like Spark
            assert out["d"][i] == a / 4
        assert out["p"][i] == src["b"][i] * 2 + 1
    assert out["s"] == src["s"]
    assert prog.run(_rows()).schema.field("s").type == pa.string()  # polars' large strings normalised


def test_filter_drops_rows_whose_predicate_is_false_or_null() -> None:
    prog, _ = _program(lambda s: s.filter(((col("a") > 0) & col("s").isin("x", "zz")) | (col("b") < -9)))
    out = prog.run(_rows()).to_pylist()
    want = [
        r
        for r in _rows().to_pylist()
        if (r["a"] is not None and r["a"] > 0 and r["s"] in ("x", "zz")) or r["b"] < -9
    ]
    assert out == want


def test_key_by_is_a_no_op_on_the_worker() -> None:
    prog, _ = _program(lambda s: s.key_by("a").map(a=col("a")))
    assert prog.run(_rows()).column("a").to_pylist() == _rows().column("a").to_pylist()


def test_flat_map_explodes_records_and_drops_empty_and_null_lists() -> None:
    q = QueryBuilder("t")
    top = (
        q.source("x", COLUMNS)
        .key_by("s")
        .window_aggregate(WindowSpec(10, 10, on="t"), top=agg("max_with_ties", col("a"), fields=("a", "b")))
    )
    top.flat_map("top").sink()
    plan = q.build()
    flat = next(n.id for n in plan.nodes if n.op.kind == "flat_map")
    prog = TransientProgram.from_plan(plan, [flat])
    item = pa.struct([("a", pa.int64()), ("b", pa.float64())])
    batch = pa.table(
        {
            "s": ["p", "q", "r", "u"],
            "top": pa.array(
                [[{"a": 1, "b": 0.5}, {"a": 1, "b": 2.0}], [], None, [{"a": 7, "b": 1.0}]], pa.list_(item)
            ),
        }
    )
    out = prog.run(batch).to_pylist()
    assert out == [{"s": "p", "a": 1, "b": 0.5}, {"s": "p", "a": 1, "b": 2.0}, {"s": "u", "a": 7, "b": 1.0}]


@pytest.mark.parametrize("fn", ["count", "sum", "min", "max", "avg", "max_with_ties", "latest_n"])
def test_each_aggregate_as_the_end_of_a_chain(fn: str) -> None:
    """A chain ending in an aggregate emits partials; finalized they equal a direct groupby."""
    call = {
        "count": agg("count"),
        "sum": agg("sum", col("a")),
        "min": agg("min", col("b")),
        "max": agg("max", col("a")),
        "avg": agg("avg", col("b")),
        "max_with_ties": agg("max_with_ties", col("a"), fields=("s", "b")),
        "latest_n": agg("latest_n", fields=("a",), n=3, order_by=("t",)),
    }[fn]
    prog, _ = _program(
        lambda s: s.filter(col("b") > -5).key_by("s").window_aggregate(WindowSpec(10, 10, on="t"), out=call)
    )
    rows = _rows()
    partial = merge_partials(prog.aggregate, [prog.run(rows.slice(0, 70)), prog.run(rows.slice(70))])  # type: ignore[arg-type]
    got = {(r["window_start"], r["s"]): r["out"] for r in finalize(prog.aggregate, partial).to_pylist()}  # type: ignore[arg-type]
    groups: dict = defaultdict(list)
    for r in rows.to_pylist():
        if r["b"] > -5:
            start = r["t"].timestamp() // 10 * 10
            groups[(start, r["s"])].append(r)
    assert {(k[0].timestamp(), k[1]) for k in got} == set(groups)
    for (start, s), members in groups.items():
        value = next(v for k, v in got.items() if k[0].timestamp() == start and k[1] == s)
        a = [m["a"] for m in members if m["a"] is not None]
        if fn == "count":
            assert value == len(members)
        elif fn == "sum":
            assert value == (sum(a) if a else None)
        elif fn == "min":
            assert value == min(m["b"] for m in members)
        elif fn == "max":
            assert value == (max(a) if a else None)
        elif fn == "avg":
            assert value == pytest.approx(sum(m["b"] for m in members) / len(members), rel=1e-12)
        elif fn == "max_with_ties":
            best = max(a) if a else None
            want = [{"s": m["s"], "b": m["b"]} for m in members if m["a"] is not None and m["a"] == best]
            assert sorted(value, key=repr) == sorted(want, key=repr)
        else:
            want = sorted(members, key=lambda m: (m["t"], m["a"] is not None, m["a"] or 0), reverse=True)[:3]
            assert value == [{"a": m["a"]} for m in want]


def _bids(events: int = 60_000) -> pa.Table:
    return pa.Table.from_batches([generate(GeneratorConfig(seed=7, events=events), "bid", 0, events)])


def test_q5_chain_equals_a_direct_sliding_count() -> None:
    plan = get_query("q5").plan(QueryParams(10, 2))
    prog = TransientProgram.from_plan(plan, ["map1~to", "key_by2~to", "window_aggregate3~to"])
    bids = _bids()
    chunks = [prog.run(bids.slice(i, 7_000)) for i in range(0, bids.num_rows, 7_000)]
    result = finalize(prog.aggregate, merge_partials(prog.aggregate, [pa.table(c) for c in chunks]))  # type: ignore[arg-type]
    got = Counter({(r["window_start"].timestamp(), r["auction"]): r["num_bids"] for r in result.to_pylist()})
    want: Counter = Counter()
    for t, a in zip(
        pc.cast(bids["date_time"], pa.int64()).to_pylist(), bids["auction"].to_pylist(), strict=True
    ):
        pane = t - t % (2 * S)
        for start in range(pane - 8 * S, pane + 1, 2 * S):
            want[(start / S, a)] += 1
    assert got == want


def test_q7_chain_equals_the_direct_max_with_ties() -> None:
    plan = get_query("q7").plan(QueryParams(10, 2))
    prog = TransientProgram.from_plan(plan, ["key_by1", "window_aggregate2"])
    bids = _bids()
    parts = [pa.table(prog.run(bids.slice(i, 9_000))) for i in range(0, bids.num_rows, 9_000)]
    result = finalize(prog.aggregate, merge_partials(prog.aggregate, parts)).to_pylist()  # type: ignore[arg-type]
    by_window: dict = defaultdict(list)
    for r in bids.to_pylist():
        by_window[r["date_time"].timestamp() // 10].append(r)
    assert len(result) == len(by_window)
    for row in result:
        members = by_window[row["window_start"].timestamp() // 10]
        best = max(m["price"] for m in members)
        fields = ("auction", "bidder", "price", "date_time", "extra")
        want = [{f: m[f] for f in fields} for m in members if m["price"] == best]
        assert sorted(row["top"], key=repr) == sorted(want, key=repr)


def test_the_records_into_each_node_are_counted_under_its_logical_id() -> None:
    prog, ids = _program(lambda s: s.filter(col("a") > 0).map(a=col("a"), b=col("b")))
    data, counts = _rows(), {"filter1": 5}
    out = prog.run_table(data, counts)
    passed = sum(1 for a in data["a"].to_pylist() if a is not None and a > 0)
    assert ids == ["filter1", "map2"] and out.num_rows == passed
    assert counts == {"filter1": 5 + data.num_rows, "map2": passed}  # added to what was there
    plan = get_query("q5").plan(QueryParams(10, 2))
    q5, q5_counts = TransientProgram.from_plan(plan, ["map1~to", "key_by2~to", "window_aggregate3~to"]), {}
    q5.run_table(_bids(1_000), q5_counts)
    assert set(q5_counts) == {"map1", "key_by2", "window_aggregate3"}  # the ids `sponge compile` prints


def test_q8_sides_are_counted_per_window_and_key_for_the_join_and_its_count() -> None:
    """Each side's records counted per (window start, join key under the left name, own group column)."""
    plan = get_query("q8").plan(QueryParams(window_size_s=10, window_slide_s=10))
    records = {
        e: generate(GeneratorConfig(seed=3, events=20_000), e, 0, 20_000) for e in ("person", "auction")
    }
    for chain, key, columns in zip(offload_chains(plan), ("id", "seller"), (("name",), ()), strict=True):
        counts: dict[str, int] = {}
        data = records[chain.entity]
        out = TransientProgram.from_plan(plan, chain.node_ids).run_table(data, counts)
        side = 0 if chain.entity == "person" else 1
        want: Counter[tuple] = Counter(
            (r["date_time"] // (10 * S) * (10 * S), r[key], *(r[c] for c in columns))
            for r in data.select(["date_time", key, *columns])
            .cast(
                pa.schema(
                    [pa.field("date_time", pa.int64()), *(data.schema.field(n) for n in (key, *columns))]
                )
            )
            .to_pylist()
        )
        got = {
            (r["window_start"], r["id"], *(r[c] for c in columns)): r["sponge_n"]
            for r in out.cast(out.schema.set(1, pa.field("window_start", pa.int64()))).to_pylist()
        }
        assert set(out["sponge_side"].to_pylist()) == {side}
        assert got == dict(want), chain.entity
        assert counts == {n: data.num_rows for n in (*chain.node_ids, *chain.fused)}


def test_chain_validation_names_the_problem() -> None:
    plan = get_query("q5").plan()
    with pytest.raises(PlanError, match="not in plan"):
        TransientProgram.from_plan(plan, ["map9"])
    with pytest.raises(PlanError, match="does not follow"):
        TransientProgram.from_plan(plan, ["map1", "window_aggregate3"])
    with pytest.raises(PlanError, match="must end"):
        TransientProgram.from_plan(plan, ["window_aggregate3", "key_by4"])
    with pytest.raises(PlanError, match="no transient form"):
        TransientProgram.from_plan(plan, ["top_k5"])
    with pytest.raises(PlanError, match="non-empty"):
        TransientProgram.from_plan(plan, [])
    q8 = get_query("q8").plan()
    with pytest.raises(PlanError, match="must end"):
        TransientProgram.from_plan(q8, ["key_by2", "window_join6", "key_by7"])
    with pytest.raises(PlanError, match="no transient form here"):
        TransientProgram.from_plan(q8, ["window_join6"])  # which side?
    q3 = get_query("q3").plan()
    with pytest.raises(PlanError, match="no transient form here"):
        TransientProgram.from_plan(q3, ["key_by3", "window_join8"])  # a join whose pairs are its output
    with pytest.raises(PlanError, match="sliding"):
        q = QueryBuilder("t")
        q.source("x", COLUMNS).key_by().window_aggregate(
            WindowSpec(10, 2, on="t"), top=agg("max_with_ties", col("a"), fields=("a",))
        ).sink()
        p = q.build()
        TransientProgram.from_plan(p, ["key_by1", "window_aggregate2"])


def test_output_schema_is_known_before_any_data() -> None:
    prog = TransientProgram.from_plan(get_query("q5").plan(), ["map1", "key_by2", "window_aggregate3"])
    bids = _bids(5_000)
    schema = prog.output_schema(bids.schema)
    assert schema == prog.run(bids).schema
    assert schema.names == ["window_start", "window_end", "auction", "num_bids"]
    assert prog.run(bids.slice(0, 0)).num_rows == 0


@pytest.mark.parametrize("query", ["q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8"])
def test_a_chain_given_only_the_columns_it_reads_computes_the_same(query: str) -> None:
    """The router sends workers only `input_columns()`: that must not change any result."""
    plan = get_query(query).plan(QueryParams(window_size_s=4, window_slide_s=2))
    for chain in offload_chains(plan):
        program = TransientProgram.from_plan(plan, chain.node_ids)
        records = generate(GeneratorConfig(seed=5, events=20_000), chain.entity, 0, 20_000)
        reads = program.input_columns()
        pruned = records if reads is None else records.select([n for n in records.schema.names if n in reads])
        diff = diff_results(program.run_table(pruned), program.run_table(records))
        assert diff is None, (query, chain.entity, reads, diff)


def test_input_columns_of_q5_are_the_two_it_reads() -> None:
    plan = get_query("q5").plan(QueryParams())
    (chain,) = offload_chains(plan)
    assert TransientProgram.from_plan(plan, chain.node_ids).input_columns() == {"auction", "date_time"}


def test_a_chain_without_a_map_or_aggregate_needs_every_column() -> None:
    program, _ = _program(lambda q: q.filter(col("a") > 1))
    assert program.input_columns() is None
