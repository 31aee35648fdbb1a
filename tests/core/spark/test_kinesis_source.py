"""Runs over a Kinesis stream on LocalStack: `sponge produce`'s events through q1 equal the DuckDB
reference over the same events, and a run stopped after an epoch and resumed on its checkpoint loses
and repeats nothing (the offsets fix each batch's end sequence numbers, ADR 0038). Offloaded, by a
fixed share or by the policy, records go to Lambda workers (each shard routed by a log of its own,
ADR 0050), and the output is still the reference's, across a driver killed mid-stream too."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.kinesis import KinesisEndpoint
from core.nexmark.generator import GeneratorConfig
from core.nexmark.params import QueryParams
from core.nexmark.reference import reference_for
from core.nexmark.schedule import RateSchedule
from core.produce import ProduceConfig, produce
from core.results import diff_results, read_results
from core.run_output import Existing
from core.spark.live_policy import LivePolicy, backlog_for
from core.spark.offload_session import OffloadConfig
from core.spark.runner import RunConfig, run_query
from tests.infra.localstack_env import running_localstack

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPONGE = [sys.executable, "-c", "from core.cli.main import main; main()"]
GEN = GeneratorConfig(seed=3, events=2_000, schedule=RateSchedule.constant(2_000))
PARAMS = QueryParams(window_size_s=2, window_slide_s=1)


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KinesisEndpoint]:
    """GEN's events in a two-shard stream of a LocalStack of the module's own, end markers included."""
    with running_localstack(tmp_path_factory.mktemp("localstack")) as (_, handle):
        endpoint = KinesisEndpoint("nexmark", handle.endpoint)
        summary = produce(ProduceConfig(GEN, endpoint, shards=2, pace=False))
        assert summary["shards"] == 2 and summary["events"] == GEN.events
        yield endpoint


def config(out: Path, endpoint: KinesisEndpoint, query: str = "q1", **kw: object) -> RunConfig:
    return RunConfig(query=query, generator=GEN, output=out, params=PARAMS, kinesis=endpoint, **kw)  # type: ignore[arg-type]


def test_a_stopped_run_resumes_without_losing_or_repeating(tmp_path: Path, stream: KinesisEndpoint) -> None:
    """The stream is written in two parts: the run reads the first over several epochs and is stopped
    (the producer has not finished, so it could not end by itself); resumed on its checkpoint once
    the rest is in, it ends with exactly the reference's rows."""
    endpoint = KinesisEndpoint("nexmark-in-parts", stream.endpoint_url)
    half = GEN.events // 2
    produce(ProduceConfig(GeneratorConfig(GEN.seed, half, GEN.schedule), endpoint, pace=False, end=False))
    out = tmp_path / "out"
    stop = threading.Event()

    def after_two_epochs(progress: dict) -> None:
        if progress["batchId"] >= 1:
            stop.set()  # the run stops once no epoch is in flight

    first = run_query(config(out, endpoint, max_events_per_batch=300), progress=after_two_epochs, stop=stop)
    assert first["stopped"] and first["epochs"] >= 2
    expected = reference_for("q1", GEN, PARAMS)
    assert 0 < read_results(out).num_rows < expected.num_rows  # stopped mid-stream
    produce(ProduceConfig(GEN, endpoint, pace=False, start=half))
    second = run_query(config(out, endpoint, max_events_per_batch=300, existing=Existing.RESUME))
    assert second["resumed"] and not second["stopped"]
    assert diff_results(read_results(out), expected) is None
    assert first["records_in"] + second["records_in"] == expected.num_rows  # q1 maps every bid
    assert second["dead_letter"]["count"] == 0


def test_an_offloaded_run_killed_mid_stream_resumes_without_losing_or_repeating(
    tmp_path: Path, stream: KinesisEndpoint
) -> None:
    """q1 at a fixed share 0.5 through the CLI: its workers write their rows into the sink themselves,
    which counts them by each shard's committed end. The driver dies outright once an epoch has
    committed; resumed, with source tasks failing their first attempts on top, the run ends with
    exactly the reference's rows."""
    out = tmp_path / "out"
    run = ["run", "q1", "--source", "kinesis", "--stream", stream.stream, "--output", str(out)]
    run += ["--endpoint-url", str(stream.endpoint_url), "--offload-share", "0.5", "--workers", "2"]
    run += ["--batch-events", "300"]
    killed = subprocess.run(
        [*SPONGE, *run, "--inject", "driver-kill:after-epoch=1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (out / "summary.json").exists() and read_results(out).num_rows > 0  # stopped mid-stream
    resumed = subprocess.run(
        [*SPONGE, *run, "--inject", "task-failure:share=0.3", "--resume"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert diff_results(read_results(out), reference_for("q1", GEN, PARAMS)) is None
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed"] and summary["injected_faults"]["task-failure"] >= 1
    # The counts cover the whole run (both processes); the workers' count, the resumed process's alone.
    routed = summary["records_routed_to_workers"]
    assert 0 < routed < summary["records_in"] == GEN.events * 46 // 50  # q1 reads the bids, 46 in 50
    assert summary["records_local"] + routed == summary["records_in"]
    assert 0 < summary["records_offloaded"] + summary["records_run_locally_by_agent"] < routed


def test_the_policy_offloads_a_backlog_of_the_stream_and_q5_still_equals_the_reference(
    tmp_path: Path, stream: KinesisEndpoint
) -> None:
    """The whole stream is there at the start: a backlog far above what the policy believes one VM
    core carries (a per-core rate far below this machine's), so it offloads; the workers send q5's
    partial counts back to be merged on the VM."""
    run = config(tmp_path / "out", stream, "q5", max_events_per_batch=300, offload=OffloadConfig(share=0.0))
    backlog = backlog_for(None, ["bid"], False, GEN.schedule, GEN.events, stream)
    live = LivePolicy("sponge", run.output, backlog, per_core_rate=50.0, rho=5.0, max_workers=2)
    summary = run_query(run, progress=live.progress, hooks=live)
    assert diff_results(read_results(tmp_path / "out"), reference_for("q5", GEN, PARAMS)) is None
    assert summary["policy"]["max_share"] > 0 and summary["records_routed_to_workers"] > 0
    # Every record of the stream (markers included) was released, and committed by the end.
    assert backlog.released() == backlog.committed() == GEN.events + 2
