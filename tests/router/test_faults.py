"""The agent's fault injectors in isolation: who gets hit, how often, what is counted, what is refused."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest

from core.errors import ConfigError
from core.fault_spec import FaultSpec
from router import stats
from router.agent.cli import main
from router.agent.config import AgentConfig
from router.agent.server import AgentServer
from router.dispatcher import ChunkTask
from router.faults import AgentFaults, ShareDraw, SlowChunks, ThrottlingInvoker, WorkerKiller
from router.invokers.base import InvokeHandle, Invoker, Throttled
from router.invokers.embedded import EmbeddedFleet
from tests.router.fakes import ThreadInvoker

pytestmark = pytest.mark.timeout(30)


class _Backend(Invoker):
    """Records invokes and kills; only `alive` worker ids can be killed."""

    def __init__(self, alive: set[str] | None = None) -> None:
        self.invoked = 0
        self.alive = set(alive or ())
        self.killed: list[str] = []
        self.closed = False

    @property
    def concurrency_limit(self) -> int:
        return 7

    def invoke_async(self, descriptor: Mapping[str, Any]) -> InvokeHandle:
        self.invoked += 1
        return InvokeHandle(str(descriptor.get("worker_id", "")))

    def close(self) -> None:
        self.closed = True

    @property
    def can_kill(self) -> bool:
        return True

    def kill(self, worker_id: str) -> bool:
        if worker_id not in self.alive:
            return False
        self.alive.discard(worker_id)
        self.killed.append(worker_id)
        return True


def test_share_draws_repeat_with_the_seed_and_hit_about_the_share() -> None:
    a, b = ShareDraw(0.3, seed=5), ShareDraw(0.3, seed=5)
    draws = [a() for _ in range(2000)]
    assert draws == [b() for _ in range(2000)]
    assert 0.25 < sum(draws) / len(draws) < 0.35
    assert not any(ShareDraw(0.0, 1)() for _ in range(100)) and all(ShareDraw(1.0, 1)() for _ in range(100))


def test_injected_throttles_never_reach_the_backend_and_are_counted() -> None:
    backend, counters = _Backend(), stats.Counters()
    invoker = ThrottlingInvoker(backend, FaultSpec.parse("throttle:share=0.5"), counters, seed=1)
    throttled = 0
    for i in range(200):
        try:
            invoker.invoke_async({"worker_id": f"w{i}"})
        except Throttled as e:
            assert "injected" in str(e)
            throttled += 1
    assert throttled == counters.get(stats.INJECTED_THROTTLE) and 60 < throttled < 140
    assert backend.invoked == 200 - throttled
    assert invoker.concurrency_limit == 7 and invoker.can_kill
    invoker.close()
    assert backend.closed


def test_only_a_first_dispatch_is_slowed() -> None:
    counters = stats.Counters()
    slow = SlowChunks(FaultSpec.parse("slow-worker:share=1,delay=3s"), counters, seed=1)
    task = ChunkTask(1, 1, "p", "{}", b"")
    task.dispatches = 1
    assert slow.delay_for(task) == 3.0
    task.dispatches = 2  # the chunk timeout took it back: the re-dispatch runs at full speed
    assert slow.delay_for(task) == 0.0
    assert counters.get(stats.INJECTED_SLOW_WORKER) == 1


def test_the_killer_prefers_a_worker_holding_a_chunk_and_skips_empty_ticks() -> None:
    backend, counters = _Backend(alive={"idle", "busy"}), stats.Counters()
    connected: list[tuple[str, int | None]] = []
    killer = WorkerKiller(
        FaultSpec.parse("kill-worker:every=2s"), backend, lambda: list(connected), counters, seed=1, start=0.0
    )
    assert killer.tick(1.9) is None  # not yet
    assert killer.tick(2.0) is None and counters.get(stats.INJECTED_KILL_WORKER) == 0  # nobody there
    connected[:] = [("idle", None), ("busy", 7)]
    assert killer.tick(3.9) is None  # the skipped tick is not made up for
    assert killer.tick(4.0) == "busy"
    connected[:] = [("idle", None)]
    assert killer.tick(11.0) == "idle"  # a late tick kills once, not once per missed period
    assert killer.tick(11.5) is None
    assert backend.killed == ["busy", "idle"] and counters.get(stats.INJECTED_KILL_WORKER) == 2


def test_a_chunk_count_kill_fires_once_after_that_many_dispatches() -> None:
    backend, counters = _Backend(alive={"a", "b"}), stats.Counters()
    connected: list[tuple[str, int | None]] = [("a", None), ("b", 3)]
    killer = WorkerKiller(
        FaultSpec.parse("kill-worker:after-chunks=3"), backend, lambda: list(connected), counters, seed=1
    )
    counters.add(stats.CHUNKS_DISPATCHED, 2)
    assert killer.tick() is None  # two dispatched: not yet, whatever the clock says
    counters.add(stats.CHUNKS_DISPATCHED)
    assert killer.tick() == "b"  # the third went out: the worker holding a chunk dies
    counters.add(stats.CHUNKS_DISPATCHED, 10)
    assert killer.tick() is None  # once
    assert backend.killed == ["b"] and counters.get(stats.INJECTED_KILL_WORKER) == 1


def test_the_agent_refuses_faults_it_cannot_inject(secret: bytes) -> None:
    with pytest.raises(ConfigError, match="injects only kill-worker, throttle, slow-worker"):
        AgentConfig(secret=secret, faults=(FaultSpec.parse("agent-restart:at=3s"),))
    config = AgentConfig(secret=secret, faults=(FaultSpec.parse("kill-worker:every=1s"),))
    for backend in (None, ThreadInvoker()):  # no fleet, or one whose processes the agent cannot reach
        with pytest.raises(ConfigError, match="kill-worker needs the embedded fleet"):
            AgentServer(config, backend)


def test_faults_compose_and_none_change_nothing() -> None:
    backend, counters = _Backend(), stats.Counters()
    assert AgentFaults((), counters).invoker(backend) is backend
    specs = (FaultSpec.parse("throttle:share=0.1"), FaultSpec.parse("throttle:share=0.2"))
    wrapped = AgentFaults(specs, counters).invoker(backend)
    assert isinstance(wrapped, ThrottlingInvoker) and isinstance(wrapped.inner, ThrottlingInvoker)


@pytest.mark.parametrize(
    ("inject", "invoker", "message"),
    [
        ("kill-worker", "none", "lacks every="),
        ("query-restart:at=1s", "none", "injects only kill-worker, throttle, slow-worker"),
        ("kill-worker:every=1s", "none", "kill-worker needs the embedded fleet"),
        ("kill-worker:every=1s", "boto3", "kill-worker needs the embedded fleet"),
    ],
)
def test_the_command_line_refuses_a_bad_inject_in_one_line(  # type: ignore[no-untyped-def]
    tmp_path, capsys, secret: bytes, inject: str, invoker: str, message: str
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(secret)
    argv = ["--secret-file", str(secret_file), "--invoker", invoker, "--inject", "throttle:share=0.1"]
    assert main([*argv, "--inject", inject]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_only_the_embedded_fleet_can_kill_and_only_workers_it_is_serving() -> None:
    from router.invokers.lambda_api import Boto3Invoker, Boto3InvokerConfig

    with EmbeddedFleet() as fleet:
        assert fleet.can_kill and fleet.kill("never-invoked") is False
    aws = Boto3Invoker(Boto3InvokerConfig(function_name="f"), client=object())
    assert not aws.can_kill and aws.kill("w1") is False
    aws.close()


@pytest.mark.slow  # the agent as its own process
def test_the_agent_process_exits_2_with_one_line_for_an_unknown_fault(tmp_path, secret: bytes) -> None:  # type: ignore[no-untyped-def]
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(secret)
    cmd = [sys.executable, "-m", "router.agent", "--secret-file", str(secret_file), "--invoker", "none"]
    proc = subprocess.run([*cmd, "--inject", "kill-vm:every=1s"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: unknown fault kind 'kill-vm'") and proc.stderr.count("\n") == 1
