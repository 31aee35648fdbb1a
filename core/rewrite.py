"""Compile-time operator insertion (Sponge, Algorithm 1): TOs, ROs and MOs around the logical DAG.

Our reading of the algorithm, including where the paper's pseudo-code slips, is recorded in
docs/adr/0001-operator-insertion.md. In short, for every edge u -> v of the logical DAG:

* every operator that processes records gets a transient operator (TO) placed on Lambda ("sf");
* a stateful u gets a merge operator (MO) on the VM: u -> MO, TO(u) -> MO (shuffle: partial states
  return to the VM task that owns their key), and the MO takes u's place as the edge's source;
* a router operator (RO) on the VM is put on every shuffle or broadcast edge, and on a one-to-one
  edge where records leave a VM-only operator (a source, an MO) toward an operator that has a TO;
  the RO feeds both v and TO(v) one-to-one, and receives from TO(u) when u has one;
* otherwise the edge stays one-to-one and the TOs are chained one-to-one (a TO whose consumer has no
  TO, e.g. a sink, sends its output straight to it).

Lambda workers cannot reach each other (paper challenge C2), so every edge between two TOs is
one-to-one: anything that needs a shuffle passes through an RO on a VM.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum

from core.plan import Comm, Edge, LogicalPlan, Node


class Kind(StrEnum):
    ORIGINAL = "original"
    ROUTER = "router"
    TRANSIENT = "transient"
    MERGE = "merge"


class Placement(StrEnum):
    VM = "vm"
    SF = "sf"


@dataclass(frozen=True)
class RNode:
    id: str
    op: str
    kind: Kind
    of: str | None
    placement: Placement


@dataclass(frozen=True)
class RewrittenPlan:
    logical: LogicalPlan
    nodes: tuple[RNode, ...]
    edges: tuple[Edge, ...]
    rewrite_ms: float

    def node(self, node_id: str) -> RNode:
        return next(n for n in self.nodes if n.id == node_id)

    def in_edges(self, node_id: str) -> list[Edge]:
        return sorted((e for e in self.edges if e.dst == node_id), key=lambda e: e.port)

    def proxies(self, kind: Kind) -> list[RNode]:
        return [n for n in self.nodes if n.kind == kind]

    def to_json(self) -> dict:
        return {
            "nodes": [
                {"id": n.id, "op": n.op, "kind": n.kind.value, "of": n.of, "placement": n.placement.value}
                for n in self.nodes
            ],
            "edges": [{"src": e.src, "dst": e.dst, "comm": e.comm.value} for e in self.edges],
        }


def transient_id(node_id: str) -> str:
    return f"{node_id}~to"


def merge_id(node_id: str) -> str:
    return f"{node_id}~mo"


def router_id(src: str, dst: str, port: int) -> str:
    return f"{src}~ro~{dst}" + (f"~{port}" if port else "")


def rewrite(plan: LogicalPlan) -> RewrittenPlan:
    """Apply operator insertion to `plan`; pure, so a replayed compile yields the same DAG."""
    started = time.perf_counter()
    nodes: dict[str, RNode] = {}
    edges: list[Edge] = []

    def add(node: RNode) -> str:
        nodes.setdefault(node.id, node)
        return node.id

    def has_to(n: Node) -> bool:
        return n.op.processes_records

    order = plan.topological_order()
    for n in order:
        add(RNode(n.id, n.op.kind, Kind.ORIGINAL, None, Placement.VM))
        if has_to(n):
            add(RNode(transient_id(n.id), n.op.kind, Kind.TRANSIENT, n.id, Placement.SF))
        if n.op.stateful:
            m = add(RNode(merge_id(n.id), "merge", Kind.MERGE, n.id, Placement.VM))
            edges.append(Edge(n.id, m, Comm.ONE_TO_ONE))
            if has_to(n):
                edges.append(Edge(transient_id(n.id), m, Comm.SHUFFLE))

    for n in order:
        for e in plan.in_edges(n.id):
            u = plan.node(e.src)
            if u.op.stateful:
                up_vm, up_sf = merge_id(u.id), None
            else:
                up_vm, up_sf = u.id, (transient_id(u.id) if has_to(u) else None)
            t_v = transient_id(n.id) if has_to(n) else None
            needs_router = e.comm != Comm.ONE_TO_ONE or (up_sf is None and t_v is not None)
            if needs_router:
                r = add(RNode(router_id(u.id, n.id, e.port), "router", Kind.ROUTER, n.id, Placement.VM))
                edges.append(Edge(up_vm, r, e.comm))
                if up_sf is not None:
                    edges.append(Edge(up_sf, r, e.comm))
                edges.append(Edge(r, n.id, Comm.ONE_TO_ONE, e.port))
                if t_v is not None:
                    edges.append(Edge(r, t_v, Comm.ONE_TO_ONE, e.port))
            else:
                edges.append(Edge(up_vm, n.id, Comm.ONE_TO_ONE, e.port))
                if up_sf is not None:
                    edges.append(Edge(up_sf, t_v or n.id, Comm.ONE_TO_ONE, e.port))

    elapsed_ms = (time.perf_counter() - started) * 1000.0
    return RewrittenPlan(plan, tuple(nodes.values()), tuple(edges), elapsed_ms)
