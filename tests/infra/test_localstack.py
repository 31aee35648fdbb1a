"""LocalStack in host mode with the project's runtime executor: real LocalStack, real Lambda API calls,
real host processes.

What must hold for `--target localstack` to mean anything: the launcher starts a healthy LocalStack
(and says clearly why when it cannot), functions run as host processes with Lambda's observable
behaviour (cold then warm, function errors as FunctionError "Unhandled", timeouts, a crashed runtime
reported as Runtime.ExitError and replaced), their logs land in CloudWatch Logs, and stopping
LocalStack leaves no runtime process behind.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from core.errors import MissingDependencyError
from infra.localstack.launcher import SERVICES, LocalStackConfig, LocalStackError, health, running, start
from router.agent_process import free_port
from tests.infra.localstack_env import kill, running_localstack, runtime_pids, zip_handler

HANDLER = """
import json, os, time

def handler(event, context):
    print("hello", json.dumps(event))
    if event.get("fail"):
        raise ValueError("asked to fail")
    if event.get("started"):  # a file the test waits for: the invocation is running
        open(event["started"], "w").close()
    time.sleep(event.get("sleep", 0))
    return {"pid": os.getpid(), "remaining_ms": context.get_remaining_time_in_millis(), "echo": event}
"""


def test_start_without_venv_says_how_to_fix(tmp_path: Path) -> None:
    config = LocalStackConfig(venv=tmp_path / "no-venv", state_dir=tmp_path / "state", port=free_port())
    with pytest.raises(MissingDependencyError) as e:
        start(config)
    assert "run make localstack-setup" in e.value.one_line()


def test_start_on_a_busy_port_says_so(tmp_path: Path) -> None:
    # A stand-in for LocalStack's virtualenv: the port is checked before anything is started from it, so
    # this test needs neither the real one nor LocalStack (the fast lane has neither).
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        config = LocalStackConfig(venv=venv, state_dir=tmp_path / "state", port=port)
        with pytest.raises(LocalStackError, match=f"port {port} .* busy") as e:
            start(config)
        assert "LOCALSTACK_PORT" in e.value.one_line()


@pytest.fixture(scope="module")
def localstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStackConfig, Any]]:
    with running_localstack(tmp_path_factory.mktemp("localstack")) as running_instance:
        yield running_instance


def _client(endpoint: str, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="t",
        aws_secret_access_key="t",
    )


@pytest.mark.slow
def test_launcher_starts_a_healthy_localstack(localstack) -> None:
    config, handle = localstack
    services = health(handle.endpoint)
    assert services is not None and all(services[s] in ("available", "running") for s in SERVICES), services
    assert running(config) == handle
    assert start(config) == handle  # idempotent while it runs


def _create(endpoint: str, name: str, tmp_path: Path, timeout: int = 3) -> Any:
    lam, iam = _client(endpoint, "lambda"), _client(endpoint, "iam")
    role = iam.create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    lam.create_function(
        FunctionName=name,
        Runtime="python3.13",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": zip_handler(tmp_path / f"{name}.zip", HANDLER)},
        Timeout=timeout,
    )
    lam.get_waiter("function_active_v2").wait(FunctionName=name)
    return lam


def _invoke(lam: Any, name: str, event: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    r = lam.invoke(FunctionName=name, Payload=json.dumps(event))
    assert r["StatusCode"] == 200
    return json.loads(r["Payload"].read()), r.get("FunctionError")


@pytest.mark.slow
def test_functions_run_as_host_processes_like_lambda(localstack, tmp_path: Path) -> None:
    _, handle = localstack
    lam = _create(handle.endpoint, "probe", tmp_path)

    body, error = _invoke(lam, "probe", {"n": 0})
    assert error is None and body["echo"] == {"n": 0} and 0 < body["remaining_ms"] <= 3000
    warm = [_invoke(lam, "probe", {"n": i}) for i in range(1, 6)]
    assert {b["pid"] for b, _ in warm} == {body["pid"]}, "warm invokes must reuse the environment"

    body, error = _invoke(lam, "probe", {"fail": True})
    assert (
        error == "Unhandled" and body["errorType"] == "ValueError" and body["errorMessage"] == "asked to fail"
    )

    body, error = _invoke(lam, "probe", {"sleep": 10})
    assert error == "Unhandled" and body["errorType"] == "Sandbox.Timedout", body
    body, error = _invoke(lam, "probe", {"after": "timeout"})
    assert error is None and body["echo"] == {"after": "timeout"}, "a fresh runtime replaces a timed-out one"

    # A runtime that dies mid-invocation: Lambda's Runtime.ExitError, not a caller left waiting.
    started = tmp_path / "started"
    outcome: list[Any] = []
    event = {"started": str(started), "sleep": 2}
    caller = threading.Thread(target=lambda: outcome.append(_invoke(lam, "probe", event)))
    caller.start()
    deadline = time.monotonic() + 30  # bounded waits here end with their event; a deadline stops a hang
    while not started.exists():  # the runtime is inside the invocation, asleep for 2 s
        assert time.monotonic() < deadline and caller.is_alive(), "the invocation never started"
        time.sleep(0.02)
    assert kill(runtime_pids(handle.pid)) >= 1
    caller.join(30)
    body, error = outcome[0]
    assert error == "Unhandled" and body["errorType"] == "Runtime.ExitError", body
    body, error = _invoke(lam, "probe", {"after": "crash"})
    assert error is None and body["echo"] == {"after": "crash"}

    logs = _client(handle.endpoint, "logs")
    deadline = time.time() + 30
    messages: list[str] = []
    while time.time() < deadline:
        messages = [e["message"] for e in logs.filter_log_events(logGroupName="/aws/lambda/probe")["events"]]
        if sum("REPORT RequestId" in m for m in messages) >= 10:
            break
        time.sleep(0.5)
    assert any(m.startswith("START RequestId") for m in messages)
    assert any('hello {"n": 3}' in m for m in messages)
    assert any("Init Duration" in m for m in messages), "the cold start's REPORT carries its init duration"
    assert any("Task timed out after 3.00 seconds" in m for m in messages)


@pytest.mark.slow
def test_stop_leaves_no_runtime_behind(tmp_path: Path) -> None:
    with running_localstack(tmp_path / "ls") as (config, handle):
        lam = _create(handle.endpoint, "leftover", tmp_path)
        assert _invoke(lam, "leftover", {})[1] is None
        pids = runtime_pids(handle.pid)
        assert pids, "the invocation ran in a host process"
    assert running(config) is None and not config.state_file.exists()
    deadline = time.time() + 30  # a bounded wait: it ends as soon as the processes are gone
    while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if Path(f"/proc/{p}").exists()], "runtime processes outlived LocalStack"
