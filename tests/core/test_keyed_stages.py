"""Which operators move by key group, and the source columns their keys trace back to."""

from __future__ import annotations

from core.expr import col
from core.keyed_stages import KeyedInput, KeyedStage, keyed_stages
from core.nexmark.params import QueryParams
from core.nexmark.queries import QUERIES, entity_columns, get_query
from core.query import QueryBuilder


def _stages(query: str) -> list[KeyedStage]:
    return keyed_stages(get_query(query).plan(QueryParams()))


def test_q3s_join_and_q4_q6s_close_decisions_are_keyed_by_their_sources_ids() -> None:
    assert _stages("q3") == [
        KeyedStage(
            "window_join8",
            (
                KeyedInput(0, "source0", "person", ("filter1", "map2", "key_by3"), ("id",)),
                KeyedInput(1, "source4", "auction", ("filter5", "map6", "key_by7"), ("seller",)),
            ),
        )
    ]
    for query in ("q4", "q6"):
        (stage,) = _stages(query)
        assert stage.op_id == "winner_at_close6"
        assert [(i.entity, i.keys) for i in stage.inputs] == [("auction", ("id",)), ("bid", ("auction",))]


def test_operators_that_leave_the_vm_another_way_or_not_first_are_not_keyed_stages() -> None:
    # q8's join is counted from sides, q5/q7's aggregates merge, q6's latest_aggregate reads winners.
    found = {
        name: [s.op_id for s in keyed_stages(info.plan(QueryParams()))] for name, info in QUERIES.items()
    }
    assert found == {
        "q0": [], "q1": [], "q2": [], "q3": ["window_join8"], "q4": ["winner_at_close6"], "q5": [],
        "q6": ["winner_at_close6"], "q7": [], "q8": [],
    }  # fmt: skip


def test_a_computed_key_is_not_traced() -> None:
    q = QueryBuilder("t")
    people = q.source("person", entity_columns("person")).map(id=col("id") + 1, name=col("name")).key_by("id")
    auctions = q.source("auction", entity_columns("auction")).map(seller=col("seller")).key_by("seller")
    people.join(auctions).sink()
    assert keyed_stages(q.build()) == []
