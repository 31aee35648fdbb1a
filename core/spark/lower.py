"""Translate a rewritten DAG (or a plain logical DAG) into a Spark Structured Streaming DataFrame.

Only VM-placed nodes become Spark operators; transient operators run on Lambda workers.
While nothing is offloaded, routers and merges lower to the identity, so the compiled plan costs
what the plain plan costs (the paper's inactive proxies, section 4.2).

Why some lowerings look the way they do:
* Spark's `window` struct column stays internal through chained windowed operators because Spark
  tracks it as the event-time column; the sink flattens it into window_start/window_end.
* Sliding windows are aggregated per pane (a tumbling window of the slide) and the pane partials are
  then merged into the sliding windows, so no record is copied into every window it belongs to.
* A sliding aggregate whose only reader is a per-window top-k runs as one operator over its rows in
  partial form, which keeps the panes itself (merge/spark/sliding_top_k.py, ADR 0010 and 0014).
* Aggregates that keep records (max_with_ties, latest_n) run as one transformWithState operator
  that keeps only each window's partial row per group, the records at the maximum or the n greatest,
  the VM's records folded per task as a worker folds its share (merge/spark/window_fold.py, ADR 0021):
  Spark has no aggregate that keeps so little, and a list of every record of a window outgrew the
  state store.
* What each aggregate computes (over records, over partial rows, per pane, per window) is
  merge/algebra.py's rule in Spark's spelling (merge/spark/column_fold.py); this module lowers
  the arguments and places the aggregates in groupings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.errors import PlanError
from core.fusions import closed_aggregates, join_counts
from core.keyed_stages import plan_routed, stepped
from core.offload_chains import KEYED, PARTIAL, ROWS, SIDE_COUNTS, OffloadChain
from core.plan import (
    WINDOW,
    AggCall,
    Filter,
    FlatMap,
    KeyBy,
    LatestAggregate,
    LogicalPlan,
    Map,
    Operator,
    Sink,
    Source,
    TopK,
    WindowAggregate,
    WindowJoin,
    WindowSpec,
    WinnerAtClose,
)
from core.rewrite import Kind, Placement, RewrittenPlan
from core.spark.expr_spark import to_spark
from core.spark.session import HDFS_STATE_STORE, ROCKSDB_STATE_STORE
from merge.algebra import check_pane_mergeable
from merge.sliding_top_k import fused_top_ks
from merge.spark import column_fold, partial_form, window_fold, window_join_count
from merge.spark.keyed_join import keyed_join
from merge.spark.latest_aggregate import latest_aggregate
from merge.spark.pane_stage import panes_by_key
from merge.spark.sliding_top_k import fold_per_task, sliding_top_k
from merge.spark.winner_at_close import winner_at_close

SourceFactory = Callable[[Source], DataFrame]


def _secs(s: int) -> str:
    return f"{s} seconds"


def _window_col(spec: WindowSpec, size_s: int | None = None) -> Column:
    size = size_s if size_s is not None else spec.size_s
    if size == spec.slide_s:
        return F.window(F.col(spec.on), _secs(size))
    return F.window(F.col(spec.on), _secs(size), _secs(spec.slide_s))


# ---- aggregates --------------------------------------------------------------------------------


def _arg(call: AggCall) -> Column | None:
    return to_spark(call.arg) if call.arg is not None else None


def _args(op: WindowAggregate | LatestAggregate) -> dict[str, Column | None]:
    return {a.out: _arg(a) for a in op.aggs}


def _agg_columns(aggs: tuple[AggCall, ...], partial: bool) -> list[Column]:
    """The aggregates of `aggs` over records, or over partial rows (merge/spark/partial_form.py)."""
    return [column_fold.finished(a, None if partial else _arg(a), from_records=not partial) for a in aggs]


def _aggregate(df: DataFrame, op: WindowAggregate, partial: bool = False) -> DataFrame:
    if window_fold.keeps_records(op):  # its own operator; merge_aggregate hands it the workers' rows
        assert not partial
        return window_fold.window_fold(df, op, _args(op))
    keys = [F.col(k) for k in op.keys]
    if op.window is None:
        return df.groupBy(*keys).agg(*_agg_columns(op.aggs, partial))
    if op.window.tumbling:
        return df.groupBy(_window_col(op.window).alias(WINDOW), *keys).agg(*_agg_columns(op.aggs, partial))
    return _windows(_panes(df, op, partial), op)


def merge_aggregate(
    local: DataFrame, workers: DataFrame, op: WindowAggregate, partials_only: bool = False
) -> DataFrame:
    """`op` over the VM's records and the workers' partial rows of the same epochs (the merge operator);
    with `partials_only`, both kinds of rows in partial form, unaggregated (for sliding_top_k)."""
    if window_fold.keeps_records(op):
        return window_fold.window_fold(local, op, _args(op), workers)
    mine = _local_partials(local, op)
    if partials_only:
        mine = fold_per_task(mine, op)
    both = mine.unionByName(partial_form.worker_partials(workers, op, mine))
    return both if partials_only else _aggregate(both, op, partial=True)


def _by_key(
    df: DataFrame,
    op: WindowAggregate,
    fused: bool,
    service: Any,
    receipts: dict[str, DataFrame] | None = None,
) -> DataFrame:
    """`op` with its state moving by key group (core/ablations.py): the VM's records folded per task
    into panes, the panes per key kept by a keyed operator whose key groups may run on workers
    (`service`: those the plan gives them, or with `receipts` those the router sent them), then the
    windows over the closed panes, or the closed panes themselves for a fused top-k."""
    panes = panes_by_key(fold_per_task(_local_partials(df, op), op), op, service, receipts)
    return panes if fused else _aggregate(panes, op, partial=True)


def _local_partials(df: DataFrame, op: WindowAggregate) -> DataFrame:
    """The VM's records of `op` in partial form, the window's column their only event-time column: a
    call over the event-time column itself (a min or max of it) lifts a copy that keeps its watermark
    marker, and the fused operator (transformWithState) refuses a second event-time column."""
    partials = partial_form.local_partials(df, op, _args(op))
    assert op.window is not None  # local_partials refuses an aggregate without a window of its own
    return _strip_event_time(partials, op.window.on)


def _panes(df: DataFrame, op: WindowAggregate, partial: bool) -> DataFrame:
    """A sliding window's first step: its aggregates' partial columns per pane (a tumbling window of
    the slide)."""
    assert op.window is not None
    pane_aggs = []
    for a in op.aggs:
        check_pane_mergeable(a)
        pane_aggs += column_fold.partial_columns(a, None if partial else _arg(a), from_records=not partial)
    pane = F.window(F.col(op.window.on), _secs(op.window.slide_s)).alias("_pane")
    return df.groupBy(pane, *[F.col(k) for k in op.keys]).agg(*pane_aggs)


def _windows(panes: DataFrame, op: WindowAggregate) -> DataFrame:
    """A sliding window's second step: each pane's partials folded into every window that holds it."""
    assert op.window is not None
    window_aggs = [column_fold.finished(a, None, from_records=False) for a in op.aggs]
    window = F.window(F.window_time("_pane"), _secs(op.window.size_s), _secs(op.window.slide_s))
    return panes.groupBy(window.alias(WINDOW), *[F.col(k) for k in op.keys]).agg(*window_aggs)


# ---- other operators ---------------------------------------------------------------------------


_WATERMARK_KEY = "spark.watermarkDelayMs"


def _strip_event_time(df: DataFrame, keep: str) -> DataFrame:
    """Leave `keep` as the stream's only event-time column.

    Spark accepts one event-time column per stream in front of a stateful operator; once a window
    is assigned, the timestamp it came from becomes a plain value (re-derived, so it loses the
    watermark marker but keeps every microsecond).
    """
    marked = [f.name for f in df.schema.fields if f.name != keep and _WATERMARK_KEY in (f.metadata or {})]
    if not marked:
        return df
    return df.withColumns({c: F.timestamp_micros(F.unix_micros(F.col(c))) for c in marked})


def _join(left: DataFrame, right: DataFrame, op: WindowJoin) -> DataFrame:
    cond = None
    for lk, rk in zip(op.left_keys, op.right_keys, strict=True):
        c = F.col(lk) == F.col(rk)
        cond = c if cond is None else cond & c
    if op.window is not None:
        left = _strip_event_time(left.withColumn(WINDOW, _window_col(op.window)), WINDOW)
        right = right.withColumn("_rwindow", F.window(F.col(op.right_window_on), _secs(op.window.size_s)))
        right = _strip_event_time(right, "_rwindow")
        cond = cond & (F.col(WINDOW) == F.col("_rwindow"))
    if op.condition is not None:
        cond = cond & to_spark(op.condition)
    out = left.join(right, cond, "inner")
    return out.drop("_rwindow") if op.window is not None else out


def _top_k(df: DataFrame, op: TopK) -> DataFrame:
    others = [c for c in df.columns if c not in (WINDOW, *op.partition_by)]
    grouped = df.groupBy(F.col(WINDOW), *[F.col(k) for k in op.partition_by]).agg(
        F.collect_list(F.struct(*[F.col(c) for c in others])).alias("_rows")
    )
    ranked = F.sort_array(F.transform(F.col("_rows"), lambda x: x[op.by]), asc=False)
    grouped = grouped.withColumn("_kth", F.element_at(ranked, F.least(F.lit(op.k), F.size(ranked))))
    if op.with_ties:
        kept = F.filter(F.col("_rows"), lambda x: x[op.by] >= F.col("_kth"))
    else:
        kept = F.slice(F.sort_array(F.col("_rows"), asc=False), 1, op.k)
    return (
        grouped.select(F.col(WINDOW), *op.partition_by, F.explode(kept).alias("_r"))
        .select(WINDOW, *op.partition_by, *[F.col(f"_r.{c}").alias(c) for c in others])
        .select(*df.columns)
    )


def _flat_map(df: DataFrame, op: FlatMap) -> DataFrame:
    others = [c for c in df.columns if c != op.explode]
    return df.select(*others, F.explode(F.col(op.explode)).alias("_e")).select(*others, "_e.*")


def sink_frame(df: DataFrame) -> DataFrame:
    """Flatten the internal window struct into the output columns window_start/window_end."""
    if WINDOW not in df.columns:
        return df
    rest = [c for c in df.columns if c != WINDOW]
    return df.select(
        F.col(f"{WINDOW}.start").alias("window_start"), F.col(f"{WINDOW}.end").alias("window_end"), *rest
    )


def apply_operator(op: Operator, inputs: list[DataFrame], sources: SourceFactory) -> DataFrame:
    if isinstance(op, Source):
        return sources(op)
    df = inputs[0]
    if isinstance(op, Map):
        return df.select(*[to_spark(e).alias(name) for name, e in op.projections])
    if isinstance(op, Filter):
        return df.filter(to_spark(op.predicate))
    if isinstance(op, KeyBy):
        return df  # Spark shuffles inside the stateful operator that follows
    if isinstance(op, WindowAggregate):
        return _aggregate(df, op)
    if isinstance(op, WindowJoin):
        return keyed_join(df, inputs[1], op) if stepped(op) else _join(df, inputs[1], op)
    if isinstance(op, WinnerAtClose):
        return winner_at_close(df, inputs[1], op)
    if isinstance(op, LatestAggregate):
        return latest_aggregate(df, op, _args(op))
    if isinstance(op, TopK):
        return _top_k(df, op)
    if isinstance(op, FlatMap):
        return _flat_map(df, op)
    if isinstance(op, Sink):
        return sink_frame(df)
    raise PlanError(f"no Spark lowering for operator {op.kind!r}")


# ---- whole plans -------------------------------------------------------------------------------


def _fusions(plan: LogicalPlan) -> dict[str, str]:
    """Sliding aggregate -> the top-k it alone feeds through one key_by: pairs sliding_top_k runs."""
    return {agg_id: top_id for top_id, (agg_id, _, _) in fused_top_ks(plan).items()}


def needs_rocksdb(plan: LogicalPlan) -> bool:
    """Whether a query of `plan` runs an operator on transformWithState, which only the RocksDB store
    serves: the fused pairs, the record-keeping aggregates and the keyed operators (those that
    decide at a close, the unwindowed join, the running average over the latest n)."""
    return bool(_fusions(plan) or join_counts(plan)) or any(
        (isinstance(n.op, WindowAggregate) and window_fold.keeps_records(n.op)) or stepped(n.op)
        for n in plan.nodes
    )


def state_store_for(plan: LogicalPlan) -> str:
    """The least state store provider a query of `plan` can start with."""
    return ROCKSDB_STATE_STORE if needs_rocksdb(plan) else HDFS_STATE_STORE


class _Fusion:
    """Where lowering departs from one operator at a time: the pairs of `_fusions`, `join_counts` and
    `closed_aggregates`."""

    def __init__(self, plan: LogicalPlan) -> None:
        pairs = _fusions(plan)
        self.aggregates = set(pairs)
        self.tops = {top: plan.node(agg).op for agg, top in pairs.items()}
        joins = join_counts(plan)
        self.joins = {join: plan.node(agg).op for join, (_, agg) in joins.items()}
        self.counted = {agg for _, agg in joins.values()}  # the join's frame is already their output
        closed = closed_aggregates(plan)
        self.closed = {winner: plan.node(agg).op for winner, (_, agg) in closed.items()}
        self.folded = {agg for _, agg in closed.values()}  # fed the winners' partials

    def then(self, node_id: str) -> WindowAggregate | None:
        """The aggregate a winner operator emits the partials of, if it is fused with one."""
        agg = self.closed.get(node_id)
        assert agg is None or isinstance(agg, WindowAggregate)
        return agg

    def lower(
        self,
        node_id: str,
        op: Operator,
        ins: list[DataFrame],
        sources: SourceFactory,
        workers: Sequence[DataFrame] = (),
        rank_service: Callable[[str], Any] | None = None,
    ) -> DataFrame:
        """`op` over `ins`; a fused join also counts the `workers`' side counts, and with
        `rank_service` a fused top-k has workers rank its closed windows during a burst."""
        if node_id in self.joins:
            assert isinstance(op, WindowJoin)
            agg = self.joins[node_id]
            assert isinstance(agg, WindowAggregate)
            agg_like = _aggregate(_join(ins[0], ins[1], op), agg)
            return window_join_count.join_count(ins[0], ins[1], op, agg, agg_like, workers)
        if node_id in self.counted:
            return ins[0]
        if node_id in self.closed:
            assert isinstance(op, WinnerAtClose)
            return winner_at_close(ins[0], ins[1], op, then=self.then(node_id))
        if node_id in self.folded:
            assert isinstance(op, WindowAggregate)
            return _aggregate(ins[0], op, partial=True)
        if node_id in self.aggregates:
            assert isinstance(op, WindowAggregate)
            return fold_per_task(_local_partials(ins[0], op), op)
        if node_id in self.tops:
            assert isinstance(op, TopK)
            agg = self.tops[node_id]
            assert isinstance(agg, WindowAggregate)
            window_like = _windows(_panes(ins[0], agg, partial=True), agg)
            ranker = rank_service(node_id) if rank_service is not None else None
            return sliding_top_k(ins[0], agg, op, window_like=window_like, ranker=ranker)
        return apply_operator(op, ins, sources)


OffloadedFactory = Callable[[OffloadChain], DataFrame]


def lower_rewritten(
    plan: RewrittenPlan,
    sources: SourceFactory,
    chains: tuple[OffloadChain, ...] = (),
    offloaded: OffloadedFactory | None = None,
    seal_service: Callable[[str], Any] | None = None,
    rank_service: Callable[[str], Any] | None = None,
) -> dict[str, DataFrame]:
    """Lower the VM side of a rewritten plan; returns the DataFrame of every sink by sink name.

    With `chains`, each chain's sources are the VM share of a routed read, and `offloaded(chain)` is
    the stream of what the workers returned for the other share: the chain's last node merges the
    two (a union of rows, an aggregate over both in partial form, or a fused join count over the
    VM's rows and the workers' side counts). A keyed chain's stream is receipts of stashed records,
    which its operator's processor seals through `seal_service(op_id)` (ADR 0024); a stage fed
    through the VM seals the plan's key groups the same way (ADR 0028), and a fused top-k has
    workers rank its closed windows through `rank_service(op_id)` (ADR 0029). Without chains,
    routers and merges are inactive and lower to the identity.
    """
    frames: dict[str, DataFrame] = {}
    sinks: dict[str, DataFrame] = {}
    vm_nodes = {n.id: n for n in plan.nodes if n.placement == Placement.VM}
    order = [n.id for n in plan.logical.topological_order()]
    pending = [nid for nid in vm_nodes if nid not in order]
    ends: dict[str, list[OffloadChain]] = {}
    for c in chains:
        ends.setdefault(c.merges_at, []).append(c)
    fusion = _Fusion(plan.logical)
    routed = set(plan_routed(plan.logical))
    if chains and offloaded is None:
        raise PlanError("offload chains given without the stream of the workers' results")

    # Visit VM nodes so that every input is ready: originals in topological order, proxies on demand.
    def frame(node_id: str) -> DataFrame:
        if node_id in frames:
            return frames[node_id]
        node = vm_nodes[node_id]
        ins = [frame(e.src) for e in plan.in_edges(node_id) if e.src in vm_nodes]
        if node.kind == Kind.ORIGINAL:
            op = plan.logical.node(node_id).op
            ending = ends.get(node_id, [])
            results = {c: offloaded(c) for c in ending} if offloaded is not None else {}
            partials = [results[c] for c in ending if c.kind == PARTIAL]
            receipts = {c.entity: results[c] for c in ending if c.kind == KEYED}
            if receipts:
                assert seal_service is not None
                service = seal_service(node_id)
                if isinstance(op, WinnerAtClose):
                    df = winner_at_close(ins[0], ins[1], op, receipts, service, fusion.then(node_id))
                elif isinstance(op, WindowAggregate):
                    df = _by_key(ins[0], op, node_id in fusion.aggregates, service, receipts)
                else:
                    assert isinstance(op, WindowJoin)
                    df = keyed_join(ins[0], ins[1], op, receipts, service)
            elif partials:
                assert isinstance(op, WindowAggregate) and len(ending) == 1
                df = merge_aggregate(ins[0], partials[0], op, partials_only=node_id in fusion.aggregates)
            elif isinstance(op, WindowAggregate) and op.state_by_key:
                service = seal_service(node_id) if seal_service is not None else None
                df = _by_key(ins[0], op, node_id in fusion.aggregates, service)
            elif chains and node_id in routed:
                assert isinstance(op, LatestAggregate) and seal_service is not None
                df = latest_aggregate(ins[0], op, _args(op), seal_service(node_id))
            else:
                side_counts = [results[c] for c in ending if c.kind == SIDE_COUNTS]
                df = fusion.lower(node_id, op, ins, sources, side_counts, rank_service if chains else None)
            for chain in ending:
                if chain.kind == ROWS:
                    df = df.unionByName(partial_form.align(results[chain], df))
            if isinstance(op, Sink):
                sinks[op.name] = df
        else:  # a router or merge proxy: the routed read and the merges above do their work
            if len(ins) != 1:
                raise PlanError(f"{node.kind.value} {node_id} should have one VM input, has {len(ins)}")
            df = ins[0]
        frames[node_id] = df
        return df

    for nid in order + pending:
        frame(nid)
    return sinks


def lower_plain(plan: LogicalPlan, sources: SourceFactory) -> dict[str, DataFrame]:
    """Lower the logical plan directly, with no proxies at all (the bench's baseline (b))."""
    frames: dict[str, DataFrame] = {}
    sinks: dict[str, DataFrame] = {}
    fusion = _Fusion(plan)
    for node in plan.topological_order():
        ins = [frames[e.src] for e in plan.in_edges(node.id)]
        frames[node.id] = fusion.lower(node.id, node.op, ins, sources)
        if isinstance(node.op, Sink):
            sinks[node.op.name] = frames[node.id]
    return sinks
