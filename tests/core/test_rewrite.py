"""Operator insertion (Algorithm 1) checked rule by rule over hundreds of random DAGs."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from core.expr import DType, col, lit
from core.nexmark.queries import QUERIES
from core.plan import (
    AggCall,
    Comm,
    Edge,
    Filter,
    FlatMap,
    KeyBy,
    LogicalPlan,
    Map,
    Node,
    Sink,
    Source,
    TopK,
    WindowAggregate,
    WindowJoin,
    WindowSpec,
)
from core.rewrite import Kind, Placement, RewrittenPlan, merge_id, rewrite, transient_id

UNARY = [
    lambda: Map((("x", col("x") + 1),)),
    lambda: Filter(col("x") > lit(0)),
    lambda: FlatMap("xs"),
    lambda: KeyBy(("x",)),
    lambda: WindowAggregate(("x",), WindowSpec(10, 2), (AggCall("c", "count"),)),
    lambda: TopK(1, "c"),
    lambda: Sink("out"),
]


@st.composite
def dags(draw: st.DrawFn) -> LogicalPlan:
    n_sources = draw(st.integers(1, 3))
    nodes = [Node(f"s{i}", Source("bid", (("x", DType.INT64),))) for i in range(n_sources)]
    edges: list[Edge] = []
    comms = st.sampled_from(list(Comm))
    for i in range(draw(st.integers(1, 12))):
        candidates = [n for n in nodes if not isinstance(n.op, Sink)]
        if len(candidates) >= 2 and draw(st.booleans()) and draw(st.booleans()):
            left, right = draw(st.lists(st.sampled_from(candidates), min_size=2, max_size=2, unique=True))
            node = Node(f"j{i}", WindowJoin(("x",), ("x",), draw(st.none() | st.just(WindowSpec(10, 10)))))
            edges += [Edge(left.id, node.id, draw(comms), 0), Edge(right.id, node.id, draw(comms), 1)]
        else:
            src = draw(st.sampled_from(candidates))
            node = Node(f"o{i}", draw(st.sampled_from(UNARY))())
            edges.append(Edge(src.id, node.id, draw(comms)))
        nodes.append(node)
    # A query ends in sinks: close every open end with one.
    for n in list(nodes):
        if not isinstance(n.op, Sink) and not any(e.src == n.id for e in edges):
            nodes.append(Node(f"{n.id}_sink", Sink("out")))
            edges.append(Edge(n.id, f"{n.id}_sink", draw(comms)))
    return LogicalPlan("random", tuple(nodes), tuple(edges))


def _edges(r: RewrittenPlan) -> set[tuple[str, str, Comm, int]]:
    return {(e.src, e.dst, e.comm, e.port) for e in r.edges}


def check_rules(plan: LogicalPlan, r: RewrittenPlan) -> None:
    by_id = {n.id: n for n in r.nodes}
    assert len(by_id) == len(r.nodes), "node ids are unique"
    edges = _edges(r)

    for n in plan.nodes:
        orig = by_id[n.id]
        assert (orig.kind, orig.placement, orig.of) == (Kind.ORIGINAL, Placement.VM, None)
        tos = [x for x in r.nodes if x.kind == Kind.TRANSIENT and x.of == n.id]
        # Rule 1: a TO, on Lambda, for every operator that processes records (not sources or sinks).
        assert len(tos) == (1 if n.op.processes_records else 0)
        assert all(t.placement == Placement.SF and t.op == n.op.kind for t in tos)
        # Rule 3: an MO on the VM after every stateful operator, fed by it and by its TO.
        mos = [x for x in r.nodes if x.kind == Kind.MERGE and x.of == n.id]
        assert len(mos) == (1 if n.op.stateful else 0)
        if n.op.stateful:
            assert mos[0].placement == Placement.VM
            assert (n.id, mos[0].id, Comm.ONE_TO_ONE, 0) in edges
            if n.op.processes_records:
                assert any(e[0] == transient_id(n.id) and e[1] == mos[0].id for e in edges)

    for e in plan.edges:
        u, v = plan.node(e.src), plan.node(e.dst)
        up = merge_id(u.id) if u.op.stateful else u.id
        t_v = transient_id(v.id) if v.op.processes_records else None
        routers = [
            x
            for x in r.nodes
            if x.kind == Kind.ROUTER
            and (up, x.id, e.comm, 0) in edges
            and (x.id, v.id, Comm.ONE_TO_ONE, e.port) in edges
        ]
        if e.comm != Comm.ONE_TO_ONE:
            # Rule 2: every shuffle or broadcast edge passes through exactly one RO on the VM.
            assert len(routers) == 1, f"{e} has no router"
            ro = routers[0]
            assert ro.placement == Placement.VM and ro.of == v.id
            assert t_v is None or (ro.id, t_v, Comm.ONE_TO_ONE, e.port) in edges
            assert (up, v.id, e.comm, e.port) not in edges
        elif routers:
            # An RO on a one-to-one edge only where records leave a VM-only operator for an offloadable one.
            assert t_v is not None and (u.op.stateful or not u.op.processes_records)
        else:
            # Rule 4: one-to-one edges stay; TOs are chained one-to-one.
            assert (up, v.id, Comm.ONE_TO_ONE, e.port) in edges
            if u.op.processes_records and not u.op.stateful:
                assert (transient_id(u.id), t_v or v.id, Comm.ONE_TO_ONE, e.port) in edges

    # Lambda workers cannot reach each other: every SF->SF edge is one-to-one.
    for src, dst, comm, _ in edges:
        if by_id[src].placement == by_id[dst].placement == Placement.SF:
            assert comm == Comm.ONE_TO_ONE
    # Every TO receives records and its results find their way back to a VM operator.
    for t in (x for x in r.nodes if x.kind == Kind.TRANSIENT):
        assert any(e[1] == t.id for e in edges), f"{t.id} has no input"
        assert _reaches_vm(t.id, edges, by_id), f"{t.id} never returns to a VM"
    # Contracting the VM side (skip TOs, splice ROs and MOs) gives back exactly the logical DAG.
    assert _contract(r) == {(e.src, e.dst, e.port) for e in plan.edges}


def _reaches_vm(start: str, edges: set, by_id: dict) -> bool:
    frontier, seen = [start], {start}
    while frontier:
        cur = frontier.pop()
        for src, dst, _, _ in edges:
            if src == cur and dst not in seen:
                if by_id[dst].placement == Placement.VM:
                    return True
                seen.add(dst)
                frontier.append(dst)
    return False


def _contract(r: RewrittenPlan) -> set[tuple[str, str, int]]:
    vm = {n.id: n for n in r.nodes if n.placement == Placement.VM}
    vm_in = {nid: [e for e in r.in_edges(nid) if e.src in vm] for nid in vm}

    def origin(nid: str) -> str:
        while vm[nid].kind != Kind.ORIGINAL:
            (e,) = vm_in[nid]
            nid = e.src
        return nid

    return {(origin(e.src), e.dst, e.port) for nid in vm if vm[nid].kind == Kind.ORIGINAL for e in vm_in[nid]}


@settings(max_examples=600, deadline=None)
@given(dags())
def test_rules_hold_on_random_dags(plan: LogicalPlan) -> None:
    r = rewrite(plan)
    check_rules(plan, r)
    assert json.dumps(rewrite(plan).to_json()) == json.dumps(r.to_json()), "rewriting is deterministic"


def test_rules_hold_on_every_nexmark_query() -> None:
    for info in QUERIES.values():
        plan = info.plan()
        r = rewrite(plan)
        check_rules(plan, r)


def test_a_broken_rewrite_is_caught() -> None:
    """The checker is not vacuous: dropping a router from a shuffle edge fails it."""
    plan = QUERIES["q5"].plan()
    r = rewrite(plan)
    ro = next(n for n in r.nodes if n.kind == Kind.ROUTER and "key_by2" in n.id)
    broken = RewrittenPlan(
        plan,
        tuple(n for n in r.nodes if n.id != ro.id),
        (
            *tuple(e for e in r.edges if ro.id not in (e.src, e.dst)),
            Edge("key_by2", "window_aggregate3", Comm.SHUFFLE),
        ),
        r.rewrite_ms,
    )
    try:
        check_rules(plan, broken)
    except AssertionError:
        return
    raise AssertionError("the rule checker accepted a plan without a router on a shuffle edge")
