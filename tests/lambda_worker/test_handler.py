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
    assert not HandlerSettings.from_env(on_lambda).provisioned
    provisioned = {**on_lambda, "AWS_LAMBDA_INITIALIZATION_TYPE": "provisioned-concurrency"}
    assert HandlerSettings.from_env(provisioned).provisioned
    assert not HandlerSettings.from_env(
        {**on_lambda, "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand"}
    ).provisioned


def test_an_environment_that_provisioned_concurrency_initialised_starts_warm() -> None:
    """Lambda runs a provisioned environment's init ahead of any invoke: its first session is not a cold
    start (as Powertools' own ColdStart metric says), so the agent does not count one."""
    code = (
        "import json; from lambda_worker.handler import handler; from tests.router.fakes import FakeContext;"
        "print(json.dumps(handler({'warmup': True}, FakeContext(10))['cold_start']))"
    )
    base = {"POWERTOOLS_TRACE_DISABLED": "true", "PATH": ""}
    for init_type, cold in (("provisioned-concurrency", False), ("on-demand", True)):
        env = {**base, "AWS_LAMBDA_INITIALIZATION_TYPE": init_type}
        p = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, timeout=60
        )
        assert json.loads(p.stdout.strip().splitlines()[-1]) is cold, init_type


def test_warmup_compiles_the_program_and_later_invocations_are_warm() -> None:
    from lambda_worker import handler as h

    program = {"query": "q7", "node_ids": ["key_by1", "window_aggregate2"]}
    first = h.handler({"warmup": True, "programs": [program]}, FakeContext(10))
    second = h.handler({"warmup": True}, FakeContext(10))
    assert first["warm"] and second["warm"] and second["cold_start"] is False
    assert len(h.STATE.program_cache()) >= 1
    assert second["log_stream"] == "test"  # names the environment: a warm round counts distinct ones


def test_a_warmup_holds_its_environment_as_asked_and_briefly() -> None:
    """A round of warm-ups overlaps only if each holds its environment; a bad or huge hold is bounded."""
    import time

    from lambda_worker import handler as h

    h.handler({"warmup": True}, FakeContext(10))  # imports paid before the timing
    for asked, least, most in ((0.3, 0.3, 1.0), (None, 0.0, 0.2), (-3, 0.0, 0.2)):
        t0 = time.monotonic()
        assert h.handler({"warmup": True, "hold_s": asked}, FakeContext(10))["warm"]
        assert least <= time.monotonic() - t0 < most, asked
    assert h.MAX_WARMUP_HOLD_S <= 5.0
    t0 = time.monotonic()
    h.handler({"warmup": True, "hold_s": 3.0}, FakeContext(1.2))  # 1.2 s left: hold at most 0.2 s
    assert time.monotonic() - t0 < 0.6


def test_a_bad_descriptor_fails_the_invocation_with_its_reason() -> None:
    from lambda_worker import handler as h

    with pytest.raises(Exception, match="lacks"):
        h.handler({"session_id": "s"}, FakeContext(10))


def test_a_warm_up_naming_a_keyed_program_runs_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from lambda_worker import handler as h
    from lambda_worker.keyed import KeyedProgram

    ran: list[str] = []
    warm = KeyedProgram.warm
    monkeypatch.setattr(KeyedProgram, "warm", lambda self: (ran.append(self.node_id), warm(self))[1])
    keyed = {"query": "q4", "node_ids": ["winner_at_close6"]}
    chain = {"query": "q7", "node_ids": ["key_by1", "window_aggregate2"]}
    assert h.handler({"warmup": True, "programs": [keyed, chain]}, FakeContext(10))["warm"]
    assert ran == ["winner_at_close6"]  # the chain has no made-up batch: compiled only
