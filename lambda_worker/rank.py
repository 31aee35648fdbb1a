"""A fused top-k's ranking on a worker: a closed window's pane partials of some key groups in, the
candidates of those keys out.

Why a program of its own: Q5's top-k ranks every window once, when it closes, over every key's count
in that window, which no worker's share of the records can rank (ADR 0029). The VM's operator holds
the window's panes; during a burst it cuts them by key group and each part is ranked here, with the
same fold and rank as the VM's (merge/sliding_top_k.py), and the VM merges the candidates exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from core.errors import PlanError
from core.plan import LogicalPlan
from merge.partials import normalise_schema
from merge.sliding_top_k import SlidingTopK, fused_top_ks


@dataclass(frozen=True)
class RankProgram:
    """The ranking of one fused top-k of a plan, over a window's pane partials."""

    node_id: str
    spec: SlidingTopK

    @classmethod
    def from_plan(cls, plan: LogicalPlan, node_id: str) -> RankProgram:
        fused = fused_top_ks(plan).get(node_id)
        if fused is None:
            raise PlanError(
                f"{node_id!r} is not a top-k fused with its sliding aggregate", hint="Q5's top_k5 is"
            )
        _, agg, top = fused
        return cls(node_id, SlidingTopK.of(agg, top))

    def records_in(self, data: pa.Table) -> int:
        """Pane partials are no routed records: `operators_offloaded` counts them for the top-k."""
        return 0

    def run_table(self, data: pa.Table | pa.RecordBatch, counts: dict[str, int] | None = None) -> pa.Table:
        panes = pl.from_arrow(data)
        assert isinstance(panes, pl.DataFrame)
        if counts is not None:
            counts[self.node_id] = counts.get(self.node_id, 0) + panes.height
        table = self.spec.candidates(panes).to_arrow()
        return table.cast(normalise_schema(table.schema))
