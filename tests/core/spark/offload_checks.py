"""What every end-to-end offloaded run must show: its output equals the DuckDB batch reference over
the same events, its secret is nowhere in what it leaves behind, and its summary has the offload
fields. Shared by the offloaded-run tests (share, switches) and the fault-schedule tests."""

from __future__ import annotations

import json
from pathlib import Path

from core.nexmark.generator import GeneratorConfig
from core.nexmark.params import QueryParams
from core.nexmark.reference import reference_for
from core.nexmark.schedule import RateSchedule
from core.results import diff_results, read_results
from core.spark.offload_session import OffloadConfig
from core.spark.runner import RunConfig, RunHooks, run_query

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
