"""A worker's keyed step: compiled from the plan alone, it decides NEXMark's winning bids group by group
from the sources' own records, as the batch reference does."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest

from core.errors import PlanError
from core.nexmark.generator import GeneratorConfig, generate
from core.nexmark.params import QueryParams
from core.nexmark.queries import get_query
from core.nexmark.reference import compute_reference, winning_bids
from core.offload_plan import key_groups_of
from lambda_worker.keyed import KeyedProgram
from lambda_worker.program import ProgramSpec
from merge.keyed_groups import GROUP, read_answer, seal_request
from merge.winner import state_frames, state_of

EVENTS = 30_000
END_MS = 10**15


def test_q4s_winner_step_is_compiled_from_the_plans_schemas() -> None:
    program = ProgramSpec("q4", ("winner_at_close6",)).compile()
    assert isinstance(program, KeyedProgram)
    s = program.spec
    assert (s.left, s.right) == (
        ("a_id", "seller", "category", "reserve", "a_date_time", "expires"),
        ("b_auction", "price", "b_date_time"),
    )
    assert [i.entity for i in program.inputs] == ["auction", "bid"]


@pytest.mark.parametrize("query", ["q6", "q4"])
def test_seals_of_every_group_over_the_sources_records_decide_the_winning_bids(query: str) -> None:
    """Each batch of generated events, split by key group into one seal per group (the group's state
    carried from seal to seal), decides per auction what the DuckDB reference decides. Q6 emits the
    winners; Q4 emits its average's partials of them, per category and pane of close time."""
    program = KeyedProgram.from_plan(get_query(query).plan(QueryParams()), "winner_at_close6")
    config = GeneratorConfig(seed=7, events=EVENTS)
    keys = {"auction": "id", "bid": "auction"}
    states: dict[int, dict] = {}
    counts: dict[str, int] = {}
    won = []
    watermark_ms = 0
    for start in range(0, EVENTS, 5_000):
        batch = {}
        for entity, key in keys.items():
            records = generate(config, entity, start, start + 5_000)
            batch[entity] = pl.from_arrow(records.append_column(GROUP, pa.array(key_groups_of(records[key]))))
        groups = sorted({g for f in batch.values() for g in f[GROUP].to_list()})
        for g in groups:
            parts = {e: f.filter(pl.col(GROUP) == g) for e, f in batch.items()}
            request = seal_request(states.get(g, state_frames(state_of({}))), parts, None, watermark_ms)
            state, out, _ = read_answer(program.run_table(request, counts))
            states[g] = state
            won.append(out)
        times = [f["date_time"].max() for f in batch.values() if f.height]
        watermark_ms = max(watermark_ms, int(max(times).timestamp() * 1000))
    for state in states.values():
        _, out, _ = read_answer(program.run_table(seal_request(state, {}, None, END_MS), counts))
        won.append(out)
    tables = {e: generate(config, e, 0, EVENTS) for e in keys}
    winners = pl.from_arrow(winning_bids(tables))
    assert isinstance(winners, pl.DataFrame) and winners.height > 50
    assert counts["winner_at_close6"] > 0 and counts["map1"] > 0 and counts["key_by5"] > 0
    out = pl.concat([f for f in won if f is not None])
    if query == "q6":
        assert set(out.select("a_id", "price").iter_rows()) == set(winners.select("id", "price").iter_rows())
        assert "key_by7" not in counts
        return
    categories = pl.from_arrow(tables["auction"].select(["id", "category"]))
    assert isinstance(categories, pl.DataFrame)
    want = winners.join(categories, on="id").group_by("category").agg(pl.len(), pl.col("price").sum())
    got = out.group_by("category").agg(
        pl.col("avg_price__count").sum().alias("len"),
        pl.col("avg_price__sum").sum().cast(pl.Int64).alias("price"),
    )
    assert got.sort("category").equals(want.select(got.columns).cast(got.schema).sort("category"))
    assert out.height < winners.height  # folded per category and pane on the worker
    assert counts["key_by7"] == counts["window_aggregate8"] == winners.height


def test_seals_of_q3s_join_emit_each_pair_once_as_the_reference_does() -> None:
    """Q3's join, group by group over the sources' own records (the prefixes filter and project on
    the worker), batch after batch with each group's state carried along: its pairs, projected as
    the query's last map does, are the DuckDB reference's rows."""
    program = KeyedProgram.from_plan(get_query("q3").plan(QueryParams()), "window_join8")
    config = GeneratorConfig(seed=3, events=EVENTS)
    keys = {"person": "id", "auction": "seller"}
    states: dict[int, dict] = {}
    counts: dict[str, int] = {}
    pairs = []
    for start in range(0, EVENTS, 5_000):
        batch = {}
        for entity, key in keys.items():
            records = generate(config, entity, start, start + 5_000)
            batch[entity] = pl.from_arrow(records.append_column(GROUP, pa.array(key_groups_of(records[key]))))
        for g in sorted({g for f in batch.values() for g in f[GROUP].to_list()}):
            parts = {e: f.filter(pl.col(GROUP) == g) for e, f in batch.items()}
            request = seal_request(states.get(g, {}), parts, None, 0)
            states[g], out, _ = read_answer(program.run_table(request, counts))
            pairs.append(out)
    got = pl.concat([f for f in pairs if f is not None]).select("name", "city", "state", "id")
    tables = {e: generate(config, e, 0, EVENTS) for e in keys}
    want = pl.from_arrow(compute_reference("q3", tables))
    assert isinstance(want, pl.DataFrame) and want.height > 5
    assert sorted(got.iter_rows()) == sorted(want.select(got.columns).iter_rows())
    assert counts["window_join8"] == counts["key_by3"] + counts["key_by7"]  # the rows the prefixes kept
    assert counts["filter1"] > counts["map2"] > 0


def test_a_windowed_join_has_no_keyed_step() -> None:
    with pytest.raises(PlanError, match="no keyed step"):
        KeyedProgram.from_plan(get_query("q8").plan(QueryParams()), "window_join6")


KEYED_PROGRAMS = [
    ("q3", "window_join8"),
    ("q4", "winner_at_close6"),
    ("q6", "winner_at_close6"),
    ("q6", "latest_aggregate8"),
]


@pytest.mark.parametrize(("query", "node"), KEYED_PROGRAMS)
def test_every_keyed_program_warms_over_a_made_up_batch_of_its_own_layout(query: str, node: str) -> None:
    """The warm-up's batch is typed as the step's input and each input's source, holds WARM_KEYS keys
    in its state, and goes through a whole seal."""
    from lambda_worker.keyed import WARM_KEYS

    program = ProgramSpec(query, (node,)).compile()
    assert isinstance(program, KeyedProgram)
    state, parts, rows, _ = program.warm_batch()
    assert rows.columns == program.spec.columns and rows.height >= WARM_KEYS
    assert dict(rows.schema) == {c: program.types[c] for c in program.spec.columns}
    assert program.key_count(state) == WARM_KEYS
    assert {e: set(f.columns) for e, f in parts.items()} == {i.entity: set(i.source) for i in program.inputs}
    program.warm()
