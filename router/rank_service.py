"""The fused top-k's handle on the agent: workers rank a closed window's keys, a part of key groups each.

Why (ADR 0029): Q5's top-k can only rank a window whole, once it closes, and the VM's operator is the
one place that holds every key's count of it. While the plan offloads, the operator cuts the window's
pane partials by key group into one part per worker and sends each part to the fleet through the
agent, as a chunk of the ranking program (lambda_worker/rank.py); it merges the candidates exactly
(merge/sliding_top_k.py). A chunk is keyed by the window's end and the part, so a replayed batch gets
the cached answer, or the same answer recomputed. Picklable: the processor is shipped to Spark's
Python workers and opens one client per process.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import polars as pl

from core.offload_plan import KEY_GROUPS
from lambda_worker.program import ProgramSpec
from merge.keyed_groups import groups_of
from router.client import shared_client
from router.routing_log import read_current_plan

MAX_PARTS = 8


@dataclass(frozen=True)
class AgentRankService:
    agent: str
    secret_file: str
    program: str  # the ranking's ProgramSpec JSON
    keys: tuple[str, ...]  # the aggregate's keys: a pane row's key group
    plans: str  # the run's offload directory, whose current plan says whether a burst is on
    timeout_s: float = 600.0

    @cached_property
    def _spec(self) -> ProgramSpec:
        return ProgramSpec.loads(self.program)

    def ranked(self, panes: pl.DataFrame, end_ms: int) -> pl.DataFrame | None:
        plan = read_current_plan(Path(self.plans))
        if not plan.offloads or panes.height == 0:
            return None
        n = max(1, min(plan.workers, MAX_PARTS))
        part = groups_of(panes, list(self.keys)) * n // KEY_GROUPS
        cut = panes.with_columns(part.alias("sponge_part")).partition_by("sponge_part", as_dict=True)
        client = shared_client(self.agent, self.secret_file, self.timeout_s)

        def rank(item: tuple[tuple[int, ...], pl.DataFrame]) -> pl.DataFrame:
            (index,), rows = item
            table = rows.drop("sponge_part").to_arrow()
            result = client.offload(end_ms, int(index), 0, self._spec, table, timeout_s=self.timeout_s)
            got = pl.from_arrow(result.table)
            assert isinstance(got, pl.DataFrame)
            return got

        with ThreadPoolExecutor(len(cut), thread_name_prefix="rank") as pool:
            parts = list(pool.map(rank, sorted(cut.items())))
        return pl.concat(parts, how="vertical_relaxed")
