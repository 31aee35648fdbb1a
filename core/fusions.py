"""Where two operators of a plan run as one: the shapes the lowering fuses and the workers follow.

Why in the kernel: the Spark lowering runs a fused pair as one operator, and the offload chains must
know the same pairs, because a chain that reaches a fused pair does the pair's work on the workers
(core/offload_chains.py). A shape is a plan property, so it is decided here once, from operators
alone.
"""

from __future__ import annotations

from collections.abc import Iterator

from core.aggregate_signatures import signature
from core.plan import WINDOW, KeyBy, LogicalPlan, Operator, WindowAggregate, WindowJoin, WinnerAtClose


def keyed_pairs(plan: LogicalPlan) -> Iterator[tuple[str, Operator, KeyBy, str, Operator]]:
    """(producer id, producer, key_by, consumer id, consumer) for each producer whose only reader is
    a key_by whose only reader is the consumer: the shape every fusion looks for."""
    for node in plan.nodes:
        outs = plan.out_edges(node.id)
        if len(outs) != 1:
            continue
        key = plan.node(outs[0].dst)
        nxt = plan.out_edges(key.id)
        if isinstance(key.op, KeyBy) and len(nxt) == 1:
            yield node.id, node.op, key.op, nxt[0].dst, plan.node(nxt[0].dst).op


def join_count_fusable(join: WindowJoin, agg: WindowAggregate) -> bool:
    """Whether `join -> key_by(agg.keys) -> agg` can run as one operator: a tumbling-window equi-join
    without a residual condition, counted per group that includes the window."""
    return (
        join.window is not None
        and join.window.tumbling
        and join.condition is None
        and agg.window is None
        and WINDOW in agg.keys
        and all(a.fn == "count" and a.arg is None for a in agg.aggs)
    )


def join_counts(plan: LogicalPlan) -> dict[str, tuple[str, str]]:
    """Windowed join id -> (key_by id, count id) of the count it alone feeds: the pairs that run as
    merge/spark/window_join_count.py, and whose sides workers count (merge/join_count.py)."""
    found: dict[str, tuple[str, str]] = {}
    for join_id, join, key, agg_id, agg in keyed_pairs(plan):
        if (
            isinstance(join, WindowJoin)
            and isinstance(agg, WindowAggregate)
            and key.keys == agg.keys
            and join_count_fusable(join, agg)
        ):
            found[join_id] = (plan.out_edges(join_id)[0].dst, agg_id)
    return found


def closed_aggregates(plan: LogicalPlan) -> dict[str, tuple[str, str]]:
    """Winner id -> (key_by id, aggregate id) of the window aggregate over close times it alone
    feeds, whose aggregates fold as scalars (no kept records): the operator that decides the winners
    emits them already in the aggregate's partial form, so a worker holding key groups of the winners
    also pre-aggregates what it decided (merge/winner.py `emitted`)."""
    found: dict[str, tuple[str, str]] = {}
    for op_id, op, key, agg_id, agg in keyed_pairs(plan):
        if (
            isinstance(op, WinnerAtClose)
            and isinstance(agg, WindowAggregate)
            and key.keys == agg.keys
            and agg.window is not None
            and agg.window.on == op.closes
            and not any(signature(a.fn).keeps_records for a in agg.aggs)
        ):
            found[op_id] = (plan.out_edges(op_id)[0].dst, agg_id)
    return found
