"""Draw a logical or rewritten DAG readably in the terminal: one line per node with its out-edges."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from core.keyed_stages import KeyedStage, plan_routed
from core.offload_chains import OffloadChain
from core.plan import LatestAggregate, LogicalPlan
from core.rewrite import Kind, RewrittenPlan

_ARROW = {"one_to_one": "──▶", "shuffle": "═╬▶", "broadcast": "═*▶"}
_STYLE = {Kind.ORIGINAL: "bold", Kind.ROUTER: "cyan", Kind.TRANSIENT: "magenta", Kind.MERGE: "green"}
LEGEND = "──▶ one-to-one   ═╬▶ shuffle   ═*▶ broadcast"


def _feeds(edges: list[tuple[str, str]]) -> str:
    return "   ".join(f"{_ARROW[c]} {dst}" for dst, c in edges) or "(end)"


def render_logical(plan: LogicalPlan) -> Group:
    lines = [Text(f"{plan.name}: logical DAG", style="bold underline")]
    width = max(len(n.id) for n in plan.nodes)
    for n in plan.topological_order():
        label = n.op.kind + ("*" if n.op.stateful else "")
        feeds = _feeds([(e.dst, e.comm.value) for e in plan.out_edges(n.id)])
        lines.append(Text(f"  {n.id:<{width}}  {label:<18} {feeds}"))
    lines.append(Text(f"  * stateful   {LEGEND}", style="dim"))
    return Group(*lines)


def render_rewritten(plan: RewrittenPlan) -> Group:
    lines = [
        Text(
            f"{plan.logical.name}: after operator insertion ({plan.rewrite_ms:.2f} ms)",
            style="bold underline",
        )
    ]
    width = max(len(n.id) for n in plan.nodes)
    for n in plan.nodes:
        feeds = _feeds([(e.dst, e.comm.value) for e in plan.edges if e.src == n.id])
        line = Text(f"  [{n.placement.value.upper()}] ")
        line.append(f"{n.id:<{width}}", style=_STYLE[n.kind])
        line.append(f"  {n.kind.value:<9} {feeds}")
        lines.append(line)
    lines.append(
        Text(
            "  VM: originals, routers (RO), merges (MO); SF: transient operators (TO) on Lambda.  " + LEGEND,
            style="dim",
        )
    )
    return Group(*lines)


_CHAIN_KIND = {
    "rows": "workers return the rows",
    "partial": "workers return partial states the VM merges",
    "side_counts": "workers count the join's side; the VM multiplies the sides",
    "keyed": "workers run whole key groups of it, by",
}


def render_chains(
    plan: LogicalPlan, chains: list[OffloadChain], stages: list[KeyedStage], ranked: list[str]
) -> Group:
    """Which operators a burst moves to workers (each source's chain, core/offload_chains.py; the
    keyed stages fed through the VM; the fused top-ks whose windows workers rank, `ranked`), and
    the stateful ones that stay on the VM, with the source keys their state is partitioned by."""
    lines = [Text(f"{plan.name}: what runs on workers during a burst", style="bold underline")]
    for c in chains:
        nodes = " ─ ".join((*c.node_ids, *([c.keyed_op] if c.keyed_op else [])))
        nodes += f" (with {', '.join(c.fused)})" if c.fused else ""
        how = _CHAIN_KIND[c.kind] + (f" {c.entity}.{'+'.join(c.keys)}" if c.keys else "")
        lines.append(Text(f"  {c.entity:<8} {nodes}: {how}"))
    routed = plan_routed(plan)
    for op_id in routed:
        op = plan.node(op_id).op
        keys = "+".join(op.keys) if isinstance(op, LatestAggregate) else "key"
        lines.append(Text(f"  {'':<8} {op_id}: workers run the plan's key groups of it, by its {keys}"))
    for op_id in ranked:
        lines.append(Text(f"  {'':<8} {op_id}: workers rank each closed window's key groups; the VM merges"))
    keyed = {s.op_id: s for s in stages}
    moved = {n for c in chains for n in (*c.node_ids, *c.fused, c.keyed_op)} | set(routed) | set(ranked)
    on_vm = []
    for n in plan.nodes:
        if n.op.stateful and n.id not in moved:
            stage = keyed.get(n.id)
            keys = [f"{i.entity}.{'+'.join(i.keys)}" for i in stage.inputs] if stage else []
            on_vm.append(n.id + (f" (keyed by {', '.join(keys)})" if keys else ""))
    lines.append(Text(f"  stays on the VM: {', '.join(on_vm) or 'no stateful operator'}", style="dim"))
    return Group(*lines)
