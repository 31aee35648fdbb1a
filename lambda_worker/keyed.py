"""A keyed stage's step on a worker: a key group's state and a batch's rows in, the new state out.

Why the worker runs the VM's own step: a key group held by workers during a burst must decide exactly
what the VM's operator would have (ADR 0024), so the worker runs the same pure function
(merge/winner.py) over the state and rows the agent packs into one table (merge/frames.py). The
operator's spec is rebuilt from the plan's checked schemas, as the transient chains are.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from core.errors import PlanError
from core.expr import DType
from core.plan import LogicalPlan, WinnerAtClose
from merge.frames import unpack
from merge.winner import NEW, WinnerSpec, run_seal


@dataclass(frozen=True)
class KeyedProgram:
    """The step of one keyed operator of a plan, over packed seal requests."""

    query: str
    node_id: str
    spec: WinnerSpec

    @classmethod
    def from_plan(cls, plan: LogicalPlan, node_id: str) -> KeyedProgram:
        op = plan.node(node_id).op
        if not isinstance(op, WinnerAtClose):
            raise PlanError(f"{op.kind} {node_id!r} has no keyed step yet", hint="winner_at_close has one")
        left, right = (plan.schemas.get(e.src) for e in plan.in_edges(node_id))
        if left is None or right is None:
            raise PlanError(f"plan {plan.name!r} carries no schemas", hint="build it with the query builder")
        stamps = {c for c, t in (*left.items(), *right.items()) if t == DType.TIMESTAMP}
        return cls(plan.name, node_id, WinnerSpec.of(op, list(left), list(right), stamps))

    def run_table(self, data: pa.Table, counts: dict[str, int] | None = None) -> pa.Table:
        """One seal: the packed request in, the packed answer out; the batch's rows count for the node."""
        if counts is not None:
            frames, _ = unpack(data)
            new = frames[NEW]
            counts[self.node_id] = counts.get(self.node_id, 0) + (new.height if new is not None else 0)
        return run_seal(self.spec, data)
