"""Which stateful operators can only move to workers whole key groups at a time, and by which keys.

Why: an operator whose state does not merge (Q3's unwindowed join, Q4/Q6's decision at an auction's
close, an aggregate run without merge operators: core/ablations.py) gives the right answer on a
worker only if that worker sees every record of the keys it holds, from every input (ADR 0023). The
router decides in the source read, before the operator's shuffle, so each input's key must be
computable there, from the source's own columns: it is traced back through the input's stateless
prefix, and a key that a projection computes (rather than renames) is not traced, since computing it
in the router would cost the VM the work it is trying to shed.

Only first-stage operators are found here: every input a source's chain of stateless operators ending
at the key_by. Operators that already leave the VM another way (a mergeable aggregate's partials,
a counted join's side counts: core/offload_chains.py) are not keyed stages.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.expr import Col
from core.fusions import join_counts
from core.plan import (
    WINDOW,
    Filter,
    KeyBy,
    LatestAggregate,
    LogicalPlan,
    Map,
    Operator,
    Source,
    WindowAggregate,
    WindowJoin,
    WinnerAtClose,
)

_KEYED = (WindowJoin, WinnerAtClose, LatestAggregate)


def stepped(op: Operator) -> bool:
    """Whether a worker can run `op`'s step (merge/winner.py, merge/join_step.py,
    merge/latest_step.py, merge/pane_step.py): the keyed operators that leave the VM. A windowed join
    leaves by its sides' counts instead (core/fusions.py), a window aggregate by its partials unless
    its state is to move by key."""
    return (
        isinstance(op, WinnerAtClose | LatestAggregate)
        or (isinstance(op, WindowJoin) and op.window is None)
        or (isinstance(op, WindowAggregate) and op.state_by_key)
    )


@dataclass(frozen=True)
class KeyedInput:
    """One input of a keyed stage: the source, its stateless prefix up to the key_by (source
    excluded), and the source columns the operator's key is, in key order."""

    port: int
    source_id: str
    entity: str
    node_ids: tuple[str, ...]
    keys: tuple[str, ...]


@dataclass(frozen=True)
class KeyedStage:
    op_id: str
    inputs: tuple[KeyedInput, ...]


def _traced(plan: LogicalPlan, key_by_id: str, port: int) -> KeyedInput | None:
    """Follow the input from its key_by back to a source, renaming the keys on the way."""
    key_by = plan.node(key_by_id).op
    assert isinstance(key_by, KeyBy)
    keys: list[str] = list(key_by.keys)
    ids = [key_by_id]
    current = key_by_id
    while True:
        ins = plan.in_edges(current)
        if len(ins) != 1 or len(plan.out_edges(ins[0].src)) != 1:
            return None
        current = ins[0].src
        op = plan.node(current).op
        if isinstance(op, Source):
            if not set(keys) <= {name for name, _ in op.columns}:
                return None
            return KeyedInput(port, current, op.entity, tuple(reversed(ids)), tuple(keys))
        if isinstance(op, Map):
            renamed = dict(op.projections)
            sources = [renamed.get(k) for k in keys]
            if not all(isinstance(e, Col) and e.name != WINDOW for e in sources):
                return None  # a computed key: the router would have to compute it
            keys = [e.name for e in sources]  # type: ignore[union-attr]
        elif not isinstance(op, Filter | KeyBy):
            return None
        ids.append(current)


def keyed_stages(plan: LogicalPlan) -> list[KeyedStage]:
    """Every first-stage operator of `plan` whose state moves by key group, with its inputs' keys."""
    counted = join_counts(plan)
    stages = []
    for node in plan.nodes:
        keyed = isinstance(node.op, _KEYED) or (isinstance(node.op, WindowAggregate) and node.op.state_by_key)
        if not keyed or node.id in counted:
            continue
        inputs = []
        for edge in sorted(plan.in_edges(node.id), key=lambda e: e.port):
            if not isinstance(plan.node(edge.src).op, KeyBy):
                break
            traced = _traced(plan, edge.src, edge.port)
            if traced is None:
                break
            inputs.append(traced)
        else:
            stages.append(KeyedStage(node.id, tuple(inputs)))
    return stages


def plan_routed(plan: LogicalPlan) -> list[str]:
    """The keyed operators a worker can step whose inputs are not sources' keyed chains (Q6's running
    average, fed by the winners): their rows reach them through the VM, and the current plan's key
    groups say which groups run on workers (ADR 0028)."""
    traced = {s.op_id for s in keyed_stages(plan)}
    return [
        n.id for n in plan.nodes if stepped(n.op) and n.id not in traced and len(plan.in_edges(n.id)) == 1
    ]
