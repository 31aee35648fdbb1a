"""`sponge deploy` and `--target localstack`: template.yaml deployed through LocalStack's real
CloudFormation, Q1 and Q5 offloaded to the deployed function through the real Lambda Invoke API, the
outputs equal to the batch reference, the invocations visible through the Lambda, CloudWatch metrics
and CloudWatch Logs APIs (with the workers' EMF documents), LocalStack's own throttles (reserved
concurrency reached), the agent's injected throttles and a function error survived with nothing lost,
and the stack torn down.

The fast tests at the top check the pieces that need no LocalStack.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import psutil
import pytest

from core.deployment import Deployment, load_deployment, stack_file
from core.errors import ConfigError
from core.fault_spec import parse_all
from core.nexmark.generator import GeneratorConfig
from core.nexmark.params import QueryParams
from core.nexmark.reference import reference_for
from core.nexmark.schedule import RateSchedule
from core.results import diff_results, read_results
from core.spark.offload_session import OffloadConfig, OffloadSession
from core.spark.runner import RunConfig, run_query
from infra.deploy.clients import client_for
from infra.deploy.code_package import package_code, rewrite_code_uri
from infra.deploy.stack import DeployConfig, deploy, destroy, parse_parameters
from infra.deploy.status import status
from router.agent_process import AgentProcessConfig, LambdaFunction
from tests.infra.localstack_env import kill, running_localstack, runtime_pids

# Solo: CloudWatch's metrics of an invocation arrive when its worker idles out, within the tests' waits
# only on a machine that is not also running two other tests.
pytestmark = pytest.mark.solo

# ---- fast: no LocalStack --------------------------------------------------------------------------


def test_code_uri_is_pointed_at_the_upload_and_nothing_else_changes() -> None:
    template = (
        "A:\n  Properties:\n    CodeUri: build/lambda  # local\n    Handler: x.y\n  Other: !Sub '${X}'\n"
    )
    out = rewrite_code_uri(template, "s3://b/k.zip")
    assert out == "A:\n  Properties:\n    CodeUri: s3://b/k.zip\n    Handler: x.y\n  Other: !Sub '${X}'\n"
    assert rewrite_code_uri(out, "s3://other/k.zip") == out  # already an s3:// URI


def test_the_package_holds_the_sources_and_is_deterministic() -> None:
    first, digest = package_code()
    again, digest_again = package_code()
    assert first == again and digest == digest_again
    names = set(zipfile.ZipFile(BytesIO(first)).namelist())
    assert {"lambda_worker/handler.py", "core/wire/_generated/agent_pb2.py", "core/errors.py"} <= names
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)


def test_parameters_and_targets_fail_in_one_line_with_a_fix(tmp_path: Path) -> None:
    assert parse_parameters(["WorkerTimeout=120", "SubnetIds=a,b"]) == (
        ("WorkerTimeout", "120"),
        ("SubnetIds", "a,b"),
    )
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_parameters(["WorkerTimeout"])
    with pytest.raises(ConfigError) as e:
        load_deployment("localstack", tmp_path)
    assert e.value.one_line().endswith("(run sponge deploy --target localstack)")
    with pytest.raises(ConfigError) as e:
        OffloadConfig(share=0.5, target="localstack", stack_dir=tmp_path)
    assert "no deployed stack for localstack" in e.value.one_line()
    with pytest.raises(ConfigError, match="unknown target"):
        OffloadConfig(share=0.5, target="lokalstack")
    with pytest.raises(ConfigError, match="bad stack name"):
        DeployConfig(target="aws", stack_name="1-bad_name")
    with pytest.raises(ConfigError, match="no LocalStack endpoint"):
        DeployConfig(target="localstack")


def test_a_deployment_reaches_the_agent_as_boto3_arguments(tmp_path: Path) -> None:
    outputs = {
        "FunctionName": "s-worker",
        "Region": "us-east-1",
        "LogGroupName": "/aws/lambda/s-worker",
        "FunctionAlias": "live",
        "FunctionTimeout": "120",
    }
    d = Deployment.from_outputs("localstack", "s", "us-east-1", "http://127.0.0.1:1", outputs)
    path = stack_file("localstack", tmp_path)
    path.write_text(json.dumps(d.to_json()))
    loaded = load_deployment("localstack", tmp_path)
    assert loaded == d and loaded.qualifier == "live" and loaded.function_timeout_s == 120.0
    config = OffloadConfig(share=0.5, target="localstack", stack_dir=tmp_path)
    assert config.deployment == d
    fn = LambdaFunction(d.function_name, d.region, d.qualifier, d.endpoint_url, tuple(d.agent_env().items()))
    argv = AgentProcessConfig(secret_file=tmp_path / "s", max_workers=2, function=fn).argv()
    joined = " ".join(argv)
    assert "--invoker boto3" in joined and "--function-name s-worker" in joined
    assert "--qualifier live" in joined and "--endpoint-url http://127.0.0.1:1" in joined
    assert "--invocation-type Event" in joined
    assert "test" not in argv, "credentials travel in the environment, never on the command line"

    # RequestResponse reaches the agent from the run's config; its read timeout covers the function's.
    sync = OffloadConfig(
        share=0.5, target="localstack", stack_dir=tmp_path, invocation_type="RequestResponse"
    )
    session = OffloadSession(sync, tmp_path / "out", "q5", PARAMS)
    assert "--invocation-type RequestResponse" in " ".join(session._function().argv())
    assert session._function_timeout_s() == 120.0
    with pytest.raises(ConfigError) as e:
        OffloadConfig(share=0.5, target="localstack", stack_dir=tmp_path, invocation_type="Sync")
    assert e.value.one_line() == "unknown Lambda invocation type 'Sync' (use Event or RequestResponse)"
    with pytest.raises(ConfigError, match="applies to a deployed function only"):
        OffloadConfig(share=0.5, invocation_type="RequestResponse")
    with pytest.raises(ConfigError, match="unknown Lambda invocation type"):
        LambdaFunction("f", "us-east-1", invocation_type="DryRun")


def test_cli_commands_teach_and_fail_in_one_line(tmp_path: Path) -> None:
    sponge = [sys.executable, "-c", "from core.cli.main import main; main()"]
    helped = subprocess.run([*sponge, "deploy", "--help"], capture_output=True, text=True, timeout=60)
    text = " ".join(helped.stdout.split())  # the help is wrapped to the terminal's width
    assert helped.returncode == 0 and "--parameter" in text and "make localstack" in text
    assert "--artifact-bucket" in text
    for command in ("status", "destroy"):
        p = subprocess.run(
            [*sponge, command, "--target", "localstack", "--stack-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 2, p
        assert p.stderr.strip().splitlines() == [
            f"error: no deployed stack for localstack (no {tmp_path}/stack-localstack.json) "
            "(run sponge deploy --target localstack)"
        ]


# ---- slow: LocalStack, CloudFormation, Spark ------------------------------------------------------

PARAMS = QueryParams(window_size_s=4, window_slide_s=2)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Path, Any]]:
    """LocalStack of its own, template.yaml deployed, torn down (and checked gone) afterwards."""
    root = tmp_path_factory.mktemp("deploy")
    with running_localstack(root / "localstack") as (_, handle):
        stack_dir = root / "sponge"
        t0 = time.monotonic()
        deployment = deploy(
            DeployConfig.for_target(
                "localstack", endpoint_url=handle.endpoint, stack_name="it", stack_dir=stack_dir
            )
        )
        print(f"\ndeployed template.yaml on LocalStack in {time.monotonic() - t0:.1f} s")
        yield deployment, stack_dir, handle
        destroy(deployment, stack_dir)
        assert not stack_file("localstack", stack_dir).exists()
        assert status(deployment)["stack_status"] == "DOES_NOT_EXIST"
        lam = client_for(deployment, "lambda")
        with pytest.raises(lam.exceptions.ResourceNotFoundException):
            lam.get_function(FunctionName=deployment.function_name)


def _run(
    tmp_path: Path,
    stack_dir: Path,
    query: str,
    events: int,
    *,
    faults: tuple = (),
    pace: bool = False,
    workers: int = 2,
    invocation_type: str = "Event",
) -> dict[str, Any]:
    gen = GeneratorConfig(seed=5, events=events, schedule=RateSchedule.constant(4_000))
    out = tmp_path / query
    offload = OffloadConfig(
        share=0.5,
        workers=workers,
        target="localstack",
        stack_dir=stack_dir,
        faults=faults,
        chunk_rows=2_000,
        chunk_timeout_s=5.0,
        invocation_type=invocation_type,
    )
    summary = run_query(
        RunConfig(
            query=query,
            generator=gen,
            output=out,
            params=PARAMS,
            max_events_per_batch=5_000,
            pace=pace,
            offload=offload,
        )
    )
    expected = reference_for(query, gen, PARAMS)
    assert expected.num_rows > 0
    diff = diff_results(read_results(out), expected)
    assert diff is None, f"{query} on localstack: {diff}"
    assert summary["target"] == "localstack"
    # Workers dialled the agent on this machine's routable address, over TLS (the deployed default).
    assert summary["transport"] == "tls" and not summary["agent_address"].startswith("127."), summary
    return summary


@pytest.mark.slow
@pytest.mark.spark
def test_q1_and_q5_offloaded_to_the_deployed_function_equal_the_reference(
    spark, deployed, tmp_path: Path
) -> None:
    deployment, stack_dir, _ = deployed
    assert deployment.outputs.keys() >= {
        "FunctionName",
        "FunctionArn",
        "StagingBucket",
        "SparkClusterPolicyArn",
        "Region",
        "LogGroupName",
    }
    for query in ("q1", "q5"):
        summary = _run(tmp_path, stack_dir, query, 30_000)
        assert summary["records_offloaded"] > 0 and summary["workers_started"] >= 1, summary

    # The invocations, seen through Lambda's and CloudWatch's own APIs.
    lam = client_for(deployment, "lambda")
    fn = lam.get_function(FunctionName=deployment.function_name)
    assert fn["Configuration"]["State"] == "Active"
    invoke_config = lam.get_function_event_invoke_config(
        FunctionName=deployment.function_name, Qualifier=deployment.qualifier
    )
    assert invoke_config["MaximumRetryAttempts"] == 0, "no asynchronous retries of a failed worker"
    deadline = time.time() + 30
    report: dict[str, Any] = {}
    while time.time() < deadline:
        report = status(deployment)
        if report["emf_metrics"]["Chunks"] > 0 and (report["metrics"]["Invocations"] or 0) > 0:
            break
        time.sleep(1.0)  # a worker's logs arrive when its invocation ends (its idle timeout)
    assert report["stack_status"] == "CREATE_COMPLETE"
    assert report["metrics"]["Invocations"] >= 2, report["metrics"]
    assert report["invocations_in_window"] >= 2 and report["recent_invocations"], report
    emf = report["emf_metrics"]
    assert emf["Chunks"] >= 2 and emf["RowsIn"] > 0 and emf["ColdStarts"] >= 1, emf
    events = client_for(deployment, "logs").filter_log_events(logGroupName=deployment.log_group)["events"]
    assert any('"Namespace":"Sponge"' in e["message"] for e in events), "EMF documents land in the log group"


@pytest.mark.slow
@pytest.mark.spark
def test_localstack_throttles_at_reserved_concurrency_and_nothing_is_lost(
    spark, deployed, tmp_path: Path
) -> None:
    """LocalStack's own concurrency limit, no fault injected: reserved concurrency 1, set through the
    Lambda API (LocalStack's CloudFormation ignores ReservedConcurrentExecutions), and synchronous
    RequestResponse invokes, so that LocalStack answers an invoke beyond the limit with 429
    TooManyRequestsException (an "Event" invoke would be accepted and queued). Three workers are
    wanted, one may run: the refused invokes are counted as throttles, the fleet backs off, the one
    worker and the agent's local fallback carry the offloaded share, and the output is exact."""
    deployment, stack_dir, _ = deployed
    lam = client_for(deployment, "lambda")
    lam.put_function_concurrency(FunctionName=deployment.function_name, ReservedConcurrentExecutions=1)
    try:
        concurrency = lam.get_function_concurrency(FunctionName=deployment.function_name)
        assert concurrency["ReservedConcurrentExecutions"] == 1
        t0 = time.monotonic()
        summary = _run(tmp_path, stack_dir, "q5", 30_000, workers=3, invocation_type="RequestResponse")
        print(
            f"\nq5 at reserved concurrency 1 in {time.monotonic() - t0:.1f} s: "
            f"throttles {summary['throttles']}, workers started {summary['workers_started']}, "
            f"records offloaded {summary['records_offloaded']}, "
            f"run locally by the agent {summary['records_run_locally_by_agent']}"
        )
    finally:
        lam.delete_function_concurrency(FunctionName=deployment.function_name)
    assert "ReservedConcurrentExecutions" not in lam.get_function_concurrency(
        FunctionName=deployment.function_name
    )
    assert summary["injected_faults"] == {}, summary
    assert summary["throttles"] >= 1, summary  # LocalStack's 429s, nothing of the agent's own
    assert summary["records_offloaded"] > 0 and summary["workers_started"] >= 1, summary


def _agent_ports() -> set[int]:
    """The ports the run's agent (`python -m router.agent`, started by this process) listens on."""
    ports: set[int] = set()
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "router.agent" in proc.cmdline():
                ports |= {c.laddr.port for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    return ports


def _dialled_the_agent(pid: int) -> bool:
    """True once runtime `pid` (or a process it started) holds a connection to the run's agent."""
    ports = _agent_ports()
    with contextlib.suppress(psutil.Error):
        runtime = psutil.Process(pid)
        for proc in [runtime, *runtime.children(recursive=True)]:
            for c in proc.net_connections("tcp"):
                if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port in ports:
                    return True
    return False


@pytest.mark.slow
@pytest.mark.spark
def test_injected_throttles_and_a_killed_runtime_lose_nothing(spark, deployed, tmp_path: Path) -> None:
    """The agent's own throttle path with "Event" invokes: `--inject throttle` refuses a share of the
    invokes above the boto3 invoker, exactly as Lambda's 429 would (LocalStack's real limit is the test
    above). The function error is real: a worker's runtime is killed mid-invocation."""
    deployment, stack_dir, handle = deployed
    cw_before = status(deployment)["metrics"]["Errors"] or 0
    killed: list[int] = []

    def kill_one_busy_runtime() -> None:
        # Runtimes of earlier tests may still be warm and idle: kill only one that appears after this start,
        # once it has dialled the agent (a worker is sent chunks as soon as it says hello).
        before = set(runtime_pids(handle.pid))
        deadline = time.time() + 60  # a bounded wait: it ends when such a runtime is found
        while time.time() < deadline and not killed:
            connected = [p for p in runtime_pids(handle.pid) if p not in before and _dialled_the_agent(p)]
            if connected:
                killed.append(kill(connected[:1]))
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_one_busy_runtime, daemon=True)
    # Both warm environments of the earlier runs are busy sessions or gone by now: make room for a fresh one.
    kill(runtime_pids(handle.pid))
    killer.start()
    summary = _run(tmp_path, stack_dir, "q5", 30_000, faults=parse_all(["throttle:share=0.5"]), pace=True)
    killer.join(5)
    assert killed == [1], "no worker runtime was started to kill"
    assert summary["injected_faults"].get("throttle", 0) >= 1 and summary["throttles"] >= 1, summary
    assert summary["workers_started"] >= 2, summary  # the killed worker was replaced
    deadline = time.time() + 20
    errors = cw_before
    while time.time() < deadline and errors <= cw_before:
        errors = status(deployment)["metrics"]["Errors"] or 0
        time.sleep(1.0)
    assert errors > cw_before, "the killed invocation is a function error in CloudWatch's Errors metric"
