"""Which operators each source's offloaded records run through on workers."""

from __future__ import annotations

from core.expr import col
from core.nexmark.params import QueryParams
from core.nexmark.queries import entity_columns, get_query
from core.offload_chains import KEYED, PARTIAL, ROWS, SIDE_COUNTS, chain_for, offload_chains
from core.plan import WindowSpec
from core.query import QueryBuilder, agg


def _chains(query: str) -> list[tuple[str, tuple[str, ...], str, str | None]]:
    plan = get_query(query).plan(QueryParams())
    return [(c.entity, c.node_ids, c.kind, c.event_time) for c in offload_chains(plan)]


def test_stateless_queries_offload_their_whole_chain() -> None:
    assert _chains("q1") == [("bid", ("map1",), ROWS, "date_time")]
    assert _chains("q2") == [("bid", ("filter1", "map2"), ROWS, None)]  # q2's map drops date_time


def test_only_rows_chains_that_feed_the_sink_alone_write_to_it() -> None:
    def to_sink(query: str) -> list[bool]:
        return [c.to_sink for c in offload_chains(get_query(query).plan(QueryParams()))]

    assert to_sink("q1") == [True] and to_sink("q2") == [True]
    assert to_sink("q5") == [False]  # partial states: the VM merges them
    assert to_sink("q8") == [False, False]  # side counts: the VM multiplies them


def test_mergeable_aggregates_end_a_partial_chain() -> None:
    assert _chains("q5") == [("bid", ("map1", "key_by2", "window_aggregate3"), PARTIAL, "date_time")]
    assert _chains("q7") == [("bid", ("key_by1", "window_aggregate2"), PARTIAL, "date_time")]


def test_a_join_that_only_a_count_reads_ends_both_sides_chains_in_side_counts() -> None:
    assert _chains("q8") == [
        ("person", ("map1", "key_by2", "window_join6"), SIDE_COUNTS, None),
        ("auction", ("map4", "key_by5", "window_join6"), SIDE_COUNTS, None),
    ]
    (chain, _) = offload_chains(get_query("q8").plan(QueryParams()))
    assert chain.fused == ("key_by7", "window_aggregate8") and chain.partial_states


def test_q3s_unwindowed_join_takes_its_inputs_whole_key_groups() -> None:
    chains = offload_chains(get_query("q3").plan(QueryParams()))
    assert [(c.entity, c.node_ids, c.kind, c.keyed_op, c.keys) for c in chains] == [
        ("person", ("filter1", "map2", "key_by3"), KEYED, "window_join8", ("id",)),
        ("auction", ("filter5", "map6", "key_by7"), KEYED, "window_join8", ("seller",)),
    ]


def test_a_keyed_stage_with_a_workers_step_takes_its_inputs_whole_key_groups() -> None:
    for query, fused in (("q4", ("key_by7", "window_aggregate8")), ("q6", ())):
        chains = offload_chains(get_query(query).plan(QueryParams()))
        assert [(c.entity, c.node_ids, c.kind, c.keyed_op, c.keys) for c in chains] == [
            ("auction", ("map1", "key_by2"), KEYED, "winner_at_close6", ("id",)),
            ("bid", ("map4", "key_by5"), KEYED, "winner_at_close6", ("auction",)),
        ]
        assert all(c.merges_at == "winner_at_close6" and c.fused == fused for c in chains)


def test_a_join_with_a_condition_is_not_counted_from_sides() -> None:
    q = QueryBuilder("t")
    people = (
        q.source("person", entity_columns("person"))
        .map(id=col("id"), date_time=col("date_time"))
        .key_by("id")
    )
    sellers = (
        q.source("auction", entity_columns("auction"))
        .map(seller=col("seller"), a_date_time=col("date_time"), reserve=col("reserve"))
        .key_by("seller")
    )
    joined = people.join(
        sellers, window=WindowSpec(10, 10), right_on="a_date_time", condition=col("reserve") > 0
    )
    joined.key_by("window", "id").window_aggregate(None, n=agg("count")).sink()
    assert [c.node_ids[-1] for c in offload_chains(q.build())] == ["key_by2", "key_by5"]


def test_a_sliding_window_of_records_is_not_merged_from_partials() -> None:
    q = QueryBuilder("t")
    bids = q.source("bid", entity_columns("bid"))
    bids.key_by().window_aggregate(
        WindowSpec(4, 2), top=agg("max_with_ties", col("price"), fields=("auction",))
    ).sink()
    plan = q.build()
    chain = chain_for(plan, plan.nodes[0].id)
    assert chain is not None and chain.kind == ROWS and chain.node_ids == (plan.nodes[1].id,)


def test_a_source_that_fans_out_has_no_chain() -> None:
    q = QueryBuilder("t")
    bids = q.source("bid", entity_columns("bid"))
    bids.map(auction=col("auction")).sink("a")
    bids.map(price=col("price")).sink("b")
    assert offload_chains(q.build()) == []
