"""Which part of a query a source's offloaded records run through on Lambda workers.

Why per source and up to the first stateful operator: the router sits in the source read (ADR
0005), so the records it diverts enter a transient chain right there. A chain follows the source's
stateless operators and stops

* after the first window aggregate whose partial state the VM can merge (count, sum, min, max, avg,
  max_with_ties and latest_n on tumbling windows; count..avg on sliding ones): workers return
  partial states, and the VM's aggregate folds them in with its own records (kind "partial");
* at a tumbling-window join whose only reader counts its pairs (Q8; core/fusions.py): workers count
  their records of the join's side per window and key, and the VM's fused operator adds those counts
  to its own before it multiplies the sides (kind "side_counts", merge/join_count.py);
* into a keyed stage whose step a worker can run (Q4/Q6's close decisions, Q3's join;
  core/keyed_stages.py):
  the source's records of the key groups the plan owns are stashed at the agent, and the operator's
  VM processor runs each group's batch on a worker (kind "keyed", ADR 0024); a window aggregate over
  the decisions' close times (Q4's) is fused in, and the worker returns its partials;
* before any other operator (a join, a top-k, a sink, a non-mergeable aggregate) or a fan-out:
  workers return the chain's output rows, which join the VM's rows of the same chain (kind "rows").
  A rows chain that feeds the sink alone (`to_sink`) needs nothing more from the VM: its rows go
  straight into the output (core/direct_sink.py).

Q6's running average (latest_aggregate) keeps its state on the VMs. The chain's node ids name the
transient program (lambda_worker/program.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.aggregate_signatures import signature
from core.expr import Col
from core.fusions import closed_aggregates, join_counts
from core.keyed_stages import keyed_stages, stepped
from core.plan import WINDOW, Filter, FlatMap, KeyBy, LogicalPlan, Map, Sink, Source, WindowAggregate

ROWS = "rows"
PARTIAL = "partial"
SIDE_COUNTS = "side_counts"
KEYED = "keyed"
_STATELESS = (Map, Filter, KeyBy, FlatMap)
EVENT_TIME = "date_time"


@dataclass(frozen=True)
class OffloadChain:
    """The transient chain fed by one source: `node_ids` in order, ending at `node_ids[-1]`.

    `event_time` is the chain output column that carries the source's event time unchanged (the
    column the VM's watermark follows downstream), or None when the chain drops it. `fused` names the
    nodes whose work the last node does with its own (a counted join's key_by and count), or a keyed
    stage's operator (the key_by and aggregate whose partials it emits: core/fusions.py).
    """

    source_id: str
    entity: str
    node_ids: tuple[str, ...]
    kind: str
    event_time: str | None
    to_sink: bool = False
    fused: tuple[str, ...] = ()
    keyed_op: str = ""  # kind "keyed": the operator whose key groups the chain's records feed
    keys: tuple[str, ...] = ()  # kind "keyed": the source columns that are the operator's key

    @property
    def last(self) -> str:
        return self.node_ids[-1]

    @property
    def merges_at(self) -> str:
        """The VM node where the workers' output joins the VM's: a keyed stage's operator, or the last."""
        return self.keyed_op or self.last

    @property
    def partial_states(self) -> bool:
        """Whether workers return partial states keyed by window start (not the chain's rows)."""
        return self.kind in (PARTIAL, SIDE_COUNTS)


def mergeable_aggregate(op: WindowAggregate) -> bool:
    """True when workers can pre-aggregate `op` and the VM merge their partials into its state."""
    if op.window is None or op.state_by_key:  # a regrouping or global aggregate; one whose state moves
        return False
    # Every aggregate has a partial form (merge/algebra.py); a sliding window is assembled from pane
    # partials, which a list of kept records is not.
    return op.window.tumbling or not any(signature(a.fn).keeps_records for a in op.aggs)


def _renamed(op: Map, column: str | None) -> str | None:
    """The output name that passes `column` through unchanged, if any."""
    if column is None:
        return None
    for name, e in op.projections:
        if isinstance(e, Col) and e.name == column and name != WINDOW:
            return name
    return None


def chain_for(plan: LogicalPlan, source_id: str) -> OffloadChain | None:
    """The offload chain of one source, or None when nothing after it can run on a worker."""
    src = plan.node(source_id).op
    assert isinstance(src, Source)
    closed = closed_aggregates(plan)
    for stage in keyed_stages(plan):
        if stepped(plan.node(stage.op_id).op):
            for inp in stage.inputs:
                if inp.source_id == source_id:
                    return OffloadChain(
                        source_id,
                        src.entity,
                        inp.node_ids,
                        KEYED,
                        None,
                        fused=closed.get(stage.op_id, ()),
                        keyed_op=stage.op_id,
                        keys=inp.keys,
                    )
    ids: list[str] = []
    kind = ROWS
    event_time: str | None = EVENT_TIME
    fused: tuple[str, ...] = ()
    current = source_id
    counted_joins = join_counts(plan)
    while True:
        outs = plan.out_edges(current)
        if len(outs) != 1:  # a fan-out: the chain ends here and both branches see the merged rows
            break
        nxt = outs[0].dst
        if nxt in counted_joins:
            ids.append(nxt)
            kind, event_time, fused = SIDE_COUNTS, None, counted_joins[nxt]
            break
        if len(plan.in_edges(nxt)) != 1:
            break
        op = plan.node(nxt).op
        if isinstance(op, WindowAggregate):
            if mergeable_aggregate(op):
                ids.append(nxt)
                kind = PARTIAL
                assert op.window is not None
                event_time = op.window.on
            break
        if not isinstance(op, _STATELESS):
            break
        ids.append(nxt)
        if isinstance(op, Map):
            event_time = _renamed(op, event_time)
        elif isinstance(op, FlatMap):
            event_time = None if event_time == op.explode else event_time
        current = nxt
    if not ids:
        return None
    outs = plan.out_edges(ids[-1])
    to_sink = (
        kind == ROWS
        and len(outs) == 1
        and isinstance(plan.node(outs[0].dst).op, Sink)
        and len(plan.in_edges(outs[0].dst)) == 1
    )
    return OffloadChain(source_id, src.entity, tuple(ids), kind, event_time, to_sink, fused)


def offload_chains(plan: LogicalPlan) -> list[OffloadChain]:
    """Every source's chain (sources with nothing offloadable after them are left out)."""
    chains = [chain_for(plan, n.id) for n in plan.nodes if isinstance(n.op, Source)]
    return [c for c in chains if c is not None]
