"""The paper's baselines end to end on Spark: Q5's count with its state moving by key group, exact.

Its panes per key live in a keyed operator; the key groups workers hold are sealed there with their
panes (real agent and worker processes). Without routers (sfbase) the plan says which groups those
are; with routers (sponge-ro, sponge-to) the router sends those groups' records to the agent. Without
transient operators a new plan restarts the query, as a task migration does. Every run's output must
equal the DuckDB batch reference over the same events.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.nexmark.generator import GeneratorConfig
from core.nexmark.params import QueryParams
from core.nexmark.reference import reference_for
from core.nexmark.schedule import RateSchedule
from core.results import diff_results, read_results
from core.spark.offload_session import OffloadConfig
from core.spark.runner import RunConfig, RunHooks, run_query

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARAMS = QueryParams(window_size_s=4, window_slide_s=2)


class _MigrateOnce(RunHooks):
    """Publishes `share` once `after` epochs have committed, and asks for the restart a new plan costs
    a baseline without transient operators."""

    def __init__(self, share: float, after: int) -> None:
        self.share, self.after = share, after
        self.session = None
        self.epochs = 0
        self.restarts = 0
        self._due = False

    def started(self, spark, session, origin) -> None:  # type: ignore[no-untyped-def]
        self.session = session

    def epoch(self, progress: dict) -> None:
        self.epochs += 1
        if self.epochs == self.after and self.session is not None:
            self.session.publish(self.share, 2)
            self._due = True

    def restart_due(self) -> bool:
        due, self._due = self._due, False
        self.restarts += due
        return due


def _config(tmp_path: Path, seed: int, share: float, baseline: str) -> RunConfig:
    return RunConfig(
        query="q5",
        generator=GeneratorConfig(seed=seed, events=14_000, schedule=RateSchedule.constant(1_000)),
        output=tmp_path / "out",
        params=PARAMS,
        max_events_per_batch=2_000,
        offload=OffloadConfig(share=share, workers=2),
        ablation=baseline,
    )


def _assert_exact(config: RunConfig) -> None:
    expected = reference_for("q5", config.generator, PARAMS)
    assert expected.num_rows > 5, "the reference is too small to prove anything"
    assert diff_results(read_results(config.output), expected) is None


@pytest.mark.parametrize(
    ("baseline", "start", "then"), [("sfbase", 0.0, 0.6), ("sfbase", 1.0, 0.0), ("sponge-ro", 0.0, 0.6)]
)
def test_a_baselines_output_equals_reference_across_a_migration(
    spark, tmp_path: Path, baseline: str, start: float, then: float
) -> None:
    config = _config(tmp_path, 3, start, baseline)
    hooks = _MigrateOnce(then, after=4)  # of seven epochs
    summary = run_query(config, progress=hooks.epoch, hooks=hooks)
    assert hooks.restarts == 1
    _assert_exact(config)
    # The workers stepped the count's key groups, its panes travelling with them. Without routers every
    # record was read and prepared on the VM; with them the workers' groups' records went there.
    routed = summary["records_routed_to_workers"]
    assert (routed > 0) == (baseline != "sfbase") and summary["records_offloaded"] == routed
    assert summary["operators_offloaded"].get("window_aggregate3", 0) > 0


def test_sponge_to_routes_key_groups_to_workers_without_restarting(spark, tmp_path: Path) -> None:
    config = _config(tmp_path, 4, 0.5, "sponge-to")
    summary = run_query(config)
    _assert_exact(config)
    assert summary["records_offloaded"] > 0 and summary["operators_offloaded"].get("window_aggregate3", 0) > 0
