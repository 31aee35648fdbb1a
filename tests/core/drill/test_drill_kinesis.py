"""A drill over Kinesis on LocalStack: the sponge run reads a stream of its own that a producer process
fills at the trace's pace, and its output matches the batch reference over the same events. (Sponge
alone: the routed reads are the ones at stake, and CI's 30 minutes are short.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.cli.main import app
from tests.infra.localstack_env import running_localstack

pytestmark = [pytest.mark.solo, pytest.mark.spark, pytest.mark.slow]


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="a drill pins the VMs and the workers to separate cores"
)
def test_a_drill_over_kinesis_reads_what_its_producer_puts_and_matches_the_reference(tmp_path: Path) -> None:
    report = tmp_path / "drill"
    with running_localstack(tmp_path / "localstack") as (_, handle):
        args = ["drill", "--query", "q1", "--policy", "sponge", "--source", "kinesis"]
        args += ["--endpoint-url", handle.endpoint, "--rate", "300", "--pattern", "sudden:2x:4s"]
        args += ["--duration", "14", "--lead", "5", "--report", str(report)]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    drill = json.loads((report / "report.json").read_text())
    assert drill["source"] == "kinesis"
    (run,) = drill["runs"]
    assert run["policy"] == "sponge" and run["results_match_reference"]
    assert run["stream_shards"] == 2 and 0 < run["stream_usd"] < run["cost_usd"]  # the stream is billed too
    result = json.loads((report / "sponge" / "result.json").read_text())
    assert result["stream"].startswith("sponge-drill-sponge-")  # the run's own stream
    events = result["summary"]["events"]
    assert (
        events > 0
        and result["summary"]["records_local"] + result["summary"]["records_routed_to_workers"] == events
    )
