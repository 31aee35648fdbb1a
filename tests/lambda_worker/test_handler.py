"""The handler stays thin: a light cold import, warm state kept, settings read once from the environment."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lambda_worker.handler import HandlerSettings
from tests.router.fakes import FakeContext

pytestmark = pytest.mark.timeout(120)

HEAVY = ("polars", "pyarrow", "grpc", "aws_xray_sdk", "boto3", "pyspark")


def test_importing_the_handler_imports_nothing_heavy() -> None:
    """What it imports; how long the import takes is tests/test_layers.py's budget."""
    code = (
        "import json, sys; import lambda_worker.handler;"
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    )
    env = {"POWERTOOLS_TRACE_DISABLED": "true", "PATH": ""}
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, timeout=60
    )
    assert json.loads(p.stdout) == []


def test_settings_come_from_the_environment_once() -> None:
    assert HandlerSettings.from_env({}) == HandlerSettings("sponge-worker", False)
    on_lambda = {"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_SERVICE_NAME": "w"}
    assert HandlerSettings.from_env(on_lambda) == HandlerSettings("w", True)
    assert not HandlerSettings.from_env({**on_lambda, "POWERTOOLS_TRACE_DISABLED": "true"}).tracing


def test_warmup_compiles_the_program_and_later_invocations_are_warm() -> None:
    from lambda_worker import handler as h

    program = {"query": "q7", "node_ids": ["key_by1", "window_aggregate2"]}
    first = h.handler({"warmup": True, "program": program}, FakeContext(10))
    second = h.handler({"warmup": True}, FakeContext(10))
    assert first["warm"] and second["warm"] and second["cold_start"] is False
    assert len(h.STATE.program_cache()) >= 1


def test_a_bad_descriptor_fails_the_invocation_with_its_reason() -> None:
    from lambda_worker import handler as h

    with pytest.raises(Exception, match="lacks"):
        h.handler({"session_id": "s"}, FakeContext(10))
