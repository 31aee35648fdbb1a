"""The VM processor's handle on the agent for a keyed stage: seal a group's batch, take a group back.

Why a small picklable object: the processor (merge/spark/keyed_processor.py) is shipped to Spark's
Python workers, and merge/ may not import the router (ADR 0018), so it is handed this object, which
only names the agent and the operator, and opens one client per process on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import polars as pl
import pyarrow as pa

from lambda_worker.program import ProgramSpec
from merge.frames import pack, unpack
from merge.keyed_batch import ROUND_KEYS, Fetch, Part
from merge.keyed_groups import Frames, read_groups_answer
from router.client import AgentClient, shared_client
from router.routing_log import read_current_plan


@dataclass(frozen=True)
class AgentSealService:
    agent: str
    secret_file: str
    program: str  # the keyed operator's ProgramSpec JSON
    fetch: Fetch = Fetch.LAZY
    plans: str = ""  # the run's offload directory, whose current plan names the workers' key groups
    timeout_s: float = 600.0
    subscales: int = 1  # seals a batch of one task runs at once (merge/keyed_batch.py)
    round_keys: int = ROUND_KEYS  # keys a progressive round moves besides those records name

    @cached_property
    def _spec(self) -> ProgramSpec:
        """Parsed once per process: a batch asks many seals of the same operator."""
        return ProgramSpec.loads(self.program)

    def _client(self) -> AgentClient:
        return shared_client(self.agent, self.secret_file, self.timeout_s)

    def touched(self, groups: list[int], parts: list[Part]) -> pl.DataFrame:
        keys = pl.from_arrow(self._client().touched(self._spec, groups, parts))
        assert isinstance(keys, pl.DataFrame)
        return keys

    def seal(
        self,
        groups: list[tuple[int, int, bool]],
        parts: list[Part],
        moved: Frames | None,
        forwarded: pl.DataFrame | None,
        watermark_ms: int,
    ) -> tuple[pl.DataFrame | None, dict[int, int | None]]:
        """Run a batch of key groups on a worker: (the outputs, when each group is next due)."""
        answer, _, _ = self._client().seal(
            self._spec,
            groups,
            parts,
            pack(moved, {}) if moved is not None else None,
            forwarded.to_arrow() if forwarded is not None else None,
            watermark_ms,
        )
        return read_groups_answer(answer)

    def owned(self) -> frozenset[int]:
        """The key groups the current plan gives the workers: read at each batch, as the router reads
        it for the sources' offsets (ADR 0028)."""
        return read_current_plan(Path(self.plans)).key_groups if self.plans else frozenset()

    def warm(self) -> int:
        """Warm the operator's program at the agent and its idle workers before any switch (ADR 0045);
        how many workers warmed."""
        return self._client().warm(self._spec)

    def hand_back(self, group: int, version: int) -> dict[str, pl.DataFrame | None]:
        table: pa.Table = self._client().hand_back(self._spec, group, version)
        return unpack(table)[0]
