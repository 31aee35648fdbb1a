"""The paper's baselines as plans: which operators' state moves by key group without merge operators."""

from __future__ import annotations

from core.ablations import moved_by_key, without_merge_operators
from core.keyed_stages import keyed_stages, plan_routed, stepped
from core.nexmark.params import QueryParams
from core.nexmark.queries import QUERIES, get_query
from core.offload_chains import KEYED, PARTIAL, offload_chains
from core.plan import WindowAggregate
from core.plan_codec import plan_from_json, plan_to_json


def test_only_aggregates_whose_panes_combine_and_that_nothing_fused_feeds_move_by_key() -> None:
    moved = {q: moved_by_key(get_query(q).plan(QueryParams())) for q in QUERIES}
    # Q5's sliding count moves; Q4's average is fed the winners' partials, Q7's max keeps records,
    # Q8's count is its join's.
    assert moved == {q: (["window_aggregate3"] if q == "q5" else []) for q in QUERIES}


def test_a_moved_aggregate_is_a_keyed_stage_whose_records_routers_send_by_key_group() -> None:
    plan = get_query("q5").plan(QueryParams())
    marked = without_merge_operators(plan)
    (agg,) = [n for n in marked.nodes if isinstance(n.op, WindowAggregate)]
    assert stepped(agg.op) and not stepped(plan.node(agg.id).op)
    assert [s.op_id for s in keyed_stages(marked)] == [agg.id] and plan_routed(marked) == []
    assert [c.kind for c in offload_chains(plan)] == [PARTIAL]
    (chain,) = offload_chains(marked)
    assert (chain.kind, chain.keyed_op, chain.keys) == (KEYED, agg.id, ("auction",))
    # The mark travels with the plan workers are sent as data (ADR 0035).
    assert plan_from_json(plan_to_json(marked)).node(agg.id).op == agg.op
    assert [n.op for n in marked.nodes if n.id != agg.id] == [n.op for n in plan.nodes if n.id != agg.id]
