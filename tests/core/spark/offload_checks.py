"""What every end-to-end offloaded run must show: its output equals the DuckDB batch reference over
the same events, its secret is nowhere in what it leaves behind, and its summary has the offload
fields. Shared by the offloaded-run tests (share, switches) and the fault-schedule tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from core.nexmark.generator import GeneratorConfig
from core.nexmark.params import QueryParams
from core.nexmark.reference import reference_for
from core.nexmark.schedule import RateSchedule
from core.offload_plan import OffloadPlan
from core.results import diff_results, read_results
from core.spark.offload_session import OffloadConfig
from core.spark.runner import RunConfig, RunHooks, run_query, source_offset
from router.routing_log import RoutingLog, write_current_plan

PARAMS = QueryParams(window_size_s=4, window_slide_s=2)
OFFLOAD_FIELDS = {
    "records_offloaded",
    "operators_offloaded",
    "handoffs",
    "worker_cpu_s",
    "workers_started",
    "cold_starts",
    "chunks_dispatched",
    "chunks_redispatched",
    "chunks_run_locally",
    "throttles",
    "injected_faults",
}


class SecretSeen(RunHooks):
    """Run hooks that note the run's secret while it runs."""

    def started(self, spark, session, origin) -> None:  # type: ignore[no-untyped-def]
        self.file = session.secret_file
        self.secret = self.file.read_bytes().strip()


def checked_run(
    tmp_path: Path,
    query: str,
    seed: int,
    offload: OffloadConfig,
    events: int,
    pace: bool,
    epoch_events: int = 3_000,
) -> dict:
    gen = GeneratorConfig(seed=seed, events=events, schedule=RateSchedule.constant(2_000))
    out = tmp_path / "out"
    config = RunConfig(
        query=query,
        generator=gen,
        output=out,
        params=PARAMS,
        max_events_per_batch=epoch_events,
        pace=pace,
        offload=offload,
    )
    secrets = SecretSeen()
    summary = run_query(config, hooks=secrets)
    # The run's secret was in force, and is nowhere in what the run leaves behind.
    assert secrets.secret and not secrets.file.exists()
    assert not any(secrets.secret in f.read_bytes() for f in out.rglob("*") if f.is_file())
    expected = reference_for(query, gen, PARAMS)
    assert expected.num_rows > 0, "the reference is empty: the test would prove nothing"
    diff = diff_results(read_results(out), expected)
    assert diff is None, f"{query} seed {seed} share {offload.share} {offload.faults}: {diff}"
    assert set(summary) >= OFFLOAD_FIELDS
    assert summary["results_rejected"] == 0  # every worker's result is one the program could have made
    assert json.loads((out / "summary.json").read_text()) == summary
    return summary


@dataclass(frozen=True)
class Switches:
    """Offload shares published in turn while a run streams: the first once epoch `after_epoch` has
    committed, each next once the one before has routed records of a committed epoch.

    Why not after fixed epochs: the progress of an epoch reaches the driver's Python while Spark
    already plans the next ones, and on a loaded machine several epochs late, so shares published by
    epoch number bunch up and one never routes a record. Waiting on the routing log gives every share
    its own records however late the progress comes."""

    after_epoch: int
    shares: tuple[float, ...]

    def publisher(self, offload_dir: Path) -> SwitchPublisher:
        return SwitchPublisher(self, offload_dir)


class SwitchPublisher:
    """The progress callback of a switched run; `published` counts the shares that routed records."""

    FIRST_VERSION = 3  # the run's own plans before the first switch are versions 1 and 2

    def __init__(self, switches: Switches, offload_dir: Path) -> None:
        self.switches = switches
        self.dir = offload_dir
        self.written = 0  # shares written to the plan file
        self.published = 0  # of those, the ones that routed records of a committed epoch

    def __call__(self, epoch: dict) -> None:
        if self.published < self.written and self._routed(self.written, epoch):
            self.published += 1
        started = self.written > 0 or epoch["batchId"] >= self.switches.after_epoch
        waiting = self.published < self.written
        if started and not waiting and self.written < len(self.switches.shares):
            share = self.switches.shares[self.written]
            write_current_plan(self.dir, OffloadPlan.of_share(self.FIRST_VERSION + self.written, share, 2))
            self.written += 1

    def _routed(self, nth: int, epoch: dict) -> bool:
        """The nth share's plan routes offsets below the end of every source in `epoch` (committed)."""
        version = self.FIRST_VERSION + nth - 1
        committed = min(source_offset(s.get("endOffset")).get("event", 0) for s in epoch["sources"])
        return any(s.plan.version == version and s.start < committed for s in RoutingLog(self.dir).segments())
