"""The embedded fleet's execution environments behave like Lambda's: cold vs warm, limits, timeouts."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from router.invokers.base import InvokeFailed, Throttled
from router.invokers.embedded import EmbeddedFleet, EmbeddedFleetConfig, WorkerFaults

pytestmark = [pytest.mark.solo, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts and never answers: a session against it just waits."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    t.join(2)
    for s in held:
        s.close()
    server.close()


def _session(address: str, margin: float) -> dict:
    return {
        "session_id": "s",
        "agent_address": address,
        "secret": "t",
        "worker_id": "w",
        "safety_margin_s": margin,
    }


def test_cold_start_then_warm_reuse_of_the_same_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fleet = EmbeddedFleet(EmbeddedFleetConfig(concurrency_limit=1, log_path=str(tmp_path / "w.log")))
    try:
        program = {"query": "q5", "node_ids": ["map1", "key_by2", "window_aggregate3"]}
        cold = fleet.invoke_async({"warmup": True, "programs": [program]}).result(60)
        warm = fleet.invoke_async({"warmup": True, "programs": [program]}).result(60)
        assert cold.payload["cold_start"] is True and warm.payload["cold_start"] is False
        envs = fleet.environments()
        assert len(envs) == 1 and envs[0].invocations == 2 and fleet.counters["cold"] == 1
        assert (
            "Sponge" in (tmp_path / "w.log").read_text()
        )  # EMF metrics went to the log, not the reply channel
    finally:
        fleet.close()


def test_the_concurrency_limit_throttles_and_frees_up(black_hole: str) -> None:
    # The function timeout counts the handler's cold imports (~2 s on this machine under load): 10 s is
    # 5x that, so only the session's own deadline (timeout less the margin) ends the invocation.
    fleet = EmbeddedFleet(EmbeddedFleetConfig(concurrency_limit=1, timeout_s=10.0))
    try:
        busy = fleet.invoke_async(_session(black_hole, margin=8.5))  # waits ~1.5 s on a silent agent
        with pytest.raises(Throttled):
            fleet.invoke_async({"warmup": True})
        summary = busy.result(30).payload  # the session gives up before the function's deadline
        assert summary["reason"] == "deadline" and summary["chunks"] == 0
        assert fleet.invoke_async({"warmup": True}).result(30).payload["warm"]
        assert fleet.counters["throttled"] == 1
    finally:
        fleet.close()


def test_an_invocation_past_its_timeout_is_killed(black_hole: str) -> None:
    # The timeout that kills the stalled invocation also bounds the next one, a cold warm-up whose imports
    # take ~2 s on this machine under load: 10 s is 5x that.
    faults = {0: WorkerFaults(stall_s=30.0)}
    fleet = EmbeddedFleet(EmbeddedFleetConfig(concurrency_limit=1, timeout_s=10.0, faults=faults))
    try:
        handle = fleet.invoke_async(_session(black_hole, margin=0.5))
        with pytest.raises(InvokeFailed, match="timed out") as info:
            handle.result(30)
        assert info.value.error_type == "Timeout" and not fleet.environments()[0].alive
        # The next invocation gets a fresh, cold environment: the killed one is gone.
        assert fleet.invoke_async({"warmup": True}).result(30).payload["cold_start"] is True
        assert fleet.counters["timeouts"] == 1 and fleet.counters["environments_started"] == 2
    finally:
        fleet.close()
