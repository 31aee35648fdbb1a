"""The paper's serverless baselines without Sponge's inserted operators, as plans and runs (§6.1, §6.3).

Why they are plans of the same query: the baselines differ from Sponge only in which of its three
inserted operators they lack, so each is the query's own plan run with those mechanisms off:

* merge operators (MO) let workers return partial states the VM folds into its own. Without them a
  stateful operator's state must live where its keys are processed: it moves to the workers with the
  key groups they take (the keyed handoff, ADR 0024) and back when they return them.
* transient operators (TO) redirect records to workers at an offset, without stopping the query.
  Without them a change of where keys run is a task migration: the query stops and restarts.
* router operators (RO) let workers receive records straight from the source read. Without them the
  VM reads and prepares every record (the map before the shuffle stays on the VMs), and only the
  stateful operator's work moves.

SFBase lacks all three; SpongeRO keeps the routers; SpongeTO the routers and the transient operators
(ADR 0052).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.aggregate_signatures import signature
from core.fusions import closed_aggregates, join_counts
from core.plan import LogicalPlan, Node, WindowAggregate

SFBASE, SPONGE_RO, SPONGE_TO = "sfbase", "sponge-ro", "sponge-to"


@dataclass(frozen=True)
class Baseline:
    """Which of Sponge's inserted operators a baseline keeps (none keeps the merge operators)."""

    name: str
    routers: bool
    transients: bool

    @property
    def lacks(self) -> str:
        """The operators it runs without, for a reader: "router, transient and merge operators"."""
        kept = {"router": self.routers, "transient": self.transients, "merge": False}
        names = [name for name, has in kept.items() if not has]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        return f"{listed} operators"


BASELINES = {
    b.name: b
    for b in (
        Baseline(SFBASE, routers=False, transients=False),
        Baseline(SPONGE_RO, routers=True, transients=False),
        Baseline(SPONGE_TO, routers=True, transients=True),
    )
}
ABLATIONS = tuple(BASELINES)


def moves_by_key(op: WindowAggregate) -> bool:
    """Whether `op`'s state can move by key group (merge/pane_step.py): a window of its own, and
    partials that combine across panes (no kept records)."""
    return op.window is not None and not any(signature(a.fn).keeps_records for a in op.aggs)


def without_merge_operators(plan: LogicalPlan) -> LogicalPlan:
    """`plan` with every aggregate whose partials Sponge merges marked to move its state by key group.

    An aggregate that a winner operator or a join feeds with its own partials (core/fusions.py) is
    left as it is: it folds only what that operator emits, on the VM."""
    fed = {agg for _, agg in (*closed_aggregates(plan).values(), *join_counts(plan).values())}
    nodes = tuple(
        Node(n.id, replace(n.op, state_by_key=True))
        if isinstance(n.op, WindowAggregate) and moves_by_key(n.op) and n.id not in fed
        else n
        for n in plan.nodes
    )
    return LogicalPlan(plan.name, nodes, plan.edges, schemas=plan.schemas)


def moved_by_key(plan: LogicalPlan) -> list[str]:
    """The operators whose state moves by key group when `plan` runs without merge operators."""
    marked = without_merge_operators(plan)
    return [n.id for n in marked.nodes if isinstance(n.op, WindowAggregate) and n.op.state_by_key]
