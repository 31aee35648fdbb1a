"""Draw a logical or rewritten DAG readably in the terminal: one line per node with its out-edges."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from core.plan import LogicalPlan
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
