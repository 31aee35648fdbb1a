"""The agent end to end in one process: the real handler in threads, the real gRPC channel."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.direct_sink import chunk_name
from core.offload_chains import offload_chains
from core.wire.arrow_ipc import encode
from core.wire.protocol import PROTOCOL_VERSION, grpc_module, pb, worker_token
from lambda_worker.handler import handler
from lambda_worker.program import ProgramSpec
from lambda_worker.session import SessionError
from router import stats
from router.client import AgentClient, OffloadError
from tests.jobs import page_views, views
from tests.router.conftest import Q5, Q7, bids, sorted_rows
from tests.router.fakes import FakeContext, ThreadInvoker

pytestmark = pytest.mark.timeout(60)


def test_offload_runs_on_a_worker_and_equals_a_local_run(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(ThreadInvoker())
    data = bids(40_000)
    with AgentClient(agent.address, secret) as client:
        for i, spec in enumerate((Q5, Q7)):
            result = client.offload(1, 0, i, spec, data)
            assert result.worker_id and not result.ran_locally and not result.cached
            assert result.rows_in == data.num_rows and result.rows_out == result.table.num_rows
            local = spec.compile().run_table(data)
            assert sorted_rows(result.table) == sorted_rows(local)
        s = client.stats()
    assert s[stats.CHUNKS_DISPATCHED] == 2 and s[stats.CHUNKS_RUN_LOCALLY] == 0
    assert s[stats.WORKERS_STARTED] >= 1 and s["session_id"] == agent.config.session_id


def test_a_jobs_own_plan_runs_on_a_worker_that_holds_no_builder_for_it(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    """A job not built into the product: its plan travels with its first chunk, the worker decodes and
    runs it, and the answer equals the plan run here."""
    agent = make_agent(ThreadInvoker())
    plan, data = page_views(), views(20_000)
    (chain,) = offload_chains(plan)
    spec = ProgramSpec.of_plan(plan, chain.node_ids)
    with AgentClient(agent.address, secret) as client:
        first = client.offload(1, 0, 0, spec, data)
        again = client.offload(1, 0, 1, spec, data.slice(0, 5_000))
    assert first.worker_id and not first.ran_locally and first.rows_out > 0
    assert sorted_rows(first.table) == sorted_rows(spec.compile().run_table(data))
    assert sorted_rows(again.table) == sorted_rows(spec.compile().run_table(data.slice(0, 5_000)))


def test_a_retried_offload_returns_the_cached_result_without_recomputation(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(ThreadInvoker())
    data = bids(20_000)
    with AgentClient(agent.address, secret) as client:
        first = client.offload(5, 2, 9, Q5, data)
        results = []
        threads = [
            threading.Thread(target=lambda: results.append(client.offload(5, 2, 9, Q5, data)))
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r.cached for r in results)
        assert all(sorted_rows(r.table) == sorted_rows(first.table) for r in results)
        assert client.offload(5, 2, 10, Q5, data).cached is False  # another key is computed
        s = client.stats()
    assert s[stats.CHUNKS_SUBMITTED] == 2 and s[stats.CHUNKS_DISPATCHED] == 2 and s[stats.CACHE_HITS] == 4


def test_an_offload_with_a_sink_file_writes_the_rows_there_once(make_agent, secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    sink_dir = tmp_path / "out" / "_offloaded"
    agent = make_agent(ThreadInvoker(), agent={"sink_dir": sink_dir})
    data = bids(20_000)
    name = chunk_name("bid", 1, 2, 3)
    with AgentClient(agent.address, secret) as client:
        first = client.offload(1, 2, 3, Q5, data, sink_file=name)
        assert first.table.num_rows == 0 and first.payload_bytes == 0 and first.rows_out > 0
        written = pq.read_table(sink_dir / name)
        assert sorted_rows(written) == sorted_rows(Q5.compile().run_table(data))
        assert written.num_rows == first.rows_out
        retry = client.offload(1, 2, 3, Q5, data, sink_file=name)
        assert retry.cached and pq.read_table(sink_dir / name).equals(written)
    assert [p.name for p in sink_dir.iterdir()] == [name]  # no temporary left behind


@pytest.mark.parametrize(
    "sink_file",
    ["../../escaped.parquet", "/tmp/escaped.parquet", "bid-1-2-3.parquet/../../x.parquet", "notes.txt"],
)
def test_a_sink_file_outside_the_sink_directory_is_refused_and_nothing_is_written(  # type: ignore[no-untyped-def]
    make_agent, secret, tmp_path, sink_file
) -> None:
    sink_dir = tmp_path / "out" / "_offloaded"
    agent = make_agent(ThreadInvoker(), agent={"sink_dir": sink_dir})
    before = sorted(tmp_path.rglob("*"))
    with AgentClient(agent.address, secret) as client, pytest.raises(OffloadError) as e:
        client.offload(1, 2, 3, Q5, bids(2_000), sink_file=sink_file)
    assert (e.value.error_type, e.value.code) == ("BadSinkFile", "INVALID_ARGUMENT"), e.value
    assert sorted(tmp_path.rglob("*")) == before and not Path("/tmp/escaped.parquet").exists()


def test_an_agent_without_a_sink_directory_writes_no_sink_file(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(ThreadInvoker())
    with AgentClient(agent.address, secret) as client, pytest.raises(OffloadError) as e:
        client.offload(1, 2, 3, Q5, bids(2_000), sink_file=chunk_name("bid", 1, 2, 3))
    assert e.value.error_type == "NoSinkDir", e.value


def test_a_chunk_of_offsets_past_2_31_is_offloaded_and_keyed_by_them(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(ThreadInvoker())
    data = bids(2_000)
    start, end = 2**31 + 1_000, 2**33  # a long-running stream's offsets: past int32
    with AgentClient(agent.address, secret) as client:
        first = client.offload(start, end, 0, Q5, data)
        assert sorted_rows(first.table) == sorted_rows(Q5.compile().run_table(data))
        assert client.offload(start, end, 0, Q5, data).cached
        assert not client.offload(start, end + 1, 0, Q5, data).cached  # the end offset is part of the key


def test_without_a_fleet_chunks_run_in_the_agent(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(None, dispatch={"local_fallback_s": 0.0})
    data = bids(10_000)
    with AgentClient(agent.address, secret) as client:
        result = client.offload(1, 0, 0, Q7, data)
        assert result.ran_locally and result.worker_id == ""
        assert sorted_rows(result.table) == sorted_rows(Q7.compile().run_table(data))
        assert client.stats()[stats.CHUNKS_RUN_LOCALLY] == 1


def test_a_program_error_keeps_its_class_and_message_across_the_boundary(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(ThreadInvoker())
    wrong = pa.table({"auction": [1, 2], "price": [3, 4]})  # no date_time column
    with AgentClient(agent.address, secret) as client:
        with pytest.raises(OffloadError) as info:
            client.offload(1, 0, 0, Q5, wrong)
        s = client.stats()
    assert info.value.error_type == "ColumnNotFoundError" and "date_time" in str(info.value)
    assert info.value.code == "INTERNAL"
    assert s[stats.WORKER_FAILURES] == 1 and s[stats.CHUNKS_FAILED] == 1


def test_unknown_programs_and_callers_without_the_secret_are_refused(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(None)
    data = bids(1_000)
    with AgentClient(agent.address, b"not-the-secret-at-all") as intruder:
        with pytest.raises(OffloadError) as info:
            intruder.offload(1, 0, 0, Q5, data)
        assert info.value.code == "UNAUTHENTICATED"
    spec = ProgramSpec("q7", ("key_by1",))
    with AgentClient(agent.address, secret) as client:
        agent_pb2, _ = pb()
        bare = agent_pb2.OffloadRequest(epoch=1, program_id=spec.program_id, payload=encode(data, "zstd"))
        with pytest.raises(OffloadError) as info:  # without the spec, asking again cannot help
            client.offload_raw(bare)
        assert info.value.code == "NOT_FOUND" and info.value.error_type == "UnknownProgram"
        client._known.add(spec.program_id)  # as after an agent restart: the client thinks it was sent
        assert client.offload(1, 0, 0, spec, data).rows_in == data.num_rows  # resent with the spec
        assert client.retries == 1
        assert client.stats()[stats.REJECTED_CALLERS] == 1


def test_a_failing_tick_is_logged_with_its_traceback_and_the_agent_keeps_ticking(  # type: ignore[no-untyped-def]
    make_agent, caplog, monkeypatch
) -> None:
    agent = make_agent(None)
    ticks: list[float] = []

    def broken_tick() -> None:
        ticks.append(time.monotonic())
        raise RuntimeError("the watchdog tripped")

    with caplog.at_level(logging.ERROR, logger="router.agent.server"):
        monkeypatch.setattr(agent.dispatcher, "tick", broken_tick)
        deadline = time.monotonic() + 10
        while len(ticks) < 2:
            assert time.monotonic() < deadline, "the tick loop stopped"
            time.sleep(0.02)
    record = next(r for r in caplog.records if r.getMessage() == "agent tick failed")
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert "RuntimeError: the watchdog tripped" in caplog.text


def _hello(agent, worker_id: str, token: str, version: int = PROTOCOL_VERSION, build: str | None = None):  # type: ignore[no-untyped-def]
    grpc = grpc_module()
    agent_pb2, agent_pb2_grpc = pb()
    with grpc.insecure_channel(agent.address) as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        hello = agent_pb2.Hello(
            session_id=agent.config.session_id,
            worker_id=worker_id,
            secret=token,
            protocol_version=version,
            build=agent.config.build if build is None else build,
        )
        call = stub.Work(iter([agent_pb2.WorkerMessage(hello=hello)]), timeout=5)
        with pytest.raises(grpc.RpcError) as info:
            list(call)
        return info.value.code()


def test_workers_without_the_session_secret_are_refused_and_counted(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    grpc = grpc_module()
    agent = make_agent(None)
    sid = agent.config.session_id
    assert _hello(agent, "w1", "0" * 64) == grpc.StatusCode.UNAUTHENTICATED
    # A correct token for an id this agent never invoked is refused too.
    assert _hello(agent, "w2", worker_token(secret, sid, "w2")) == grpc.StatusCode.UNAUTHENTICATED
    assert _hello(agent, "w3", "x", version=PROTOCOL_VERSION + 1) == grpc.StatusCode.FAILED_PRECONDITION
    assert agent.stats()[stats.REJECTED_WORKERS] == 3


def test_a_worker_of_another_build_is_refused_and_its_chunks_run_elsewhere(
    make_agent, secret, caplog
) -> None:  # type: ignore[no-untyped-def]
    grpc = grpc_module()
    sid = "s-build"
    agent = make_agent(None, agent={"session_id": sid})
    # Authenticated, but without the agent's build (an older worker says none at all).
    assert (
        _hello(agent, "w1", worker_token(secret, sid, "w1"), build="") == grpc.StatusCode.FAILED_PRECONDITION
    )
    assert (
        _hello(agent, "w2", worker_token(secret, sid, "w2"), build="0" * 16)
        == grpc.StatusCode.FAILED_PRECONDITION
    )
    assert agent.stats()[stats.REJECTED_WORKERS] == 2
    # A real worker, started from these sources, against an agent that runs another build.
    invoker = ThreadInvoker()
    other = make_agent(invoker, agent={"build": "0" * 16}, dispatch={"local_fallback_s": 0.5})
    with AgentClient(other.address, secret) as client:
        result = client.offload(1, 0, 0, Q5, bids(2_000))
    assert result.ran_locally and other.stats()[stats.REJECTED_WORKERS] >= 1
    assert "deploy this build" in caplog.text and "no worker is started for" in caplog.text
    time.sleep(1.0)  # many ticks of the agent's scaling: a refused build starts no more workers
    assert other.stats()[stats.WORKERS_STARTED] <= other.config.fleet.max_workers
    deadline = time.monotonic() + 10
    while not invoker.results:
        assert time.monotonic() < deadline, "the refused worker's invocation never ended"
        time.sleep(0.02)
    assert isinstance(invoker.results[0], SessionError) and "FAILED_PRECONDITION" in str(invoker.results[0])


def test_a_refused_worker_fails_its_invocation_with_the_reason(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(None)
    descriptor = {
        "session_id": agent.config.session_id,
        "agent_address": agent.address,
        "secret": "wrong",
        "worker_id": "w9",
        "idle_timeout_s": 1,
    }
    with pytest.raises(SessionError, match="UNAUTHENTICATED"):
        handler(descriptor, FakeContext(10))
    assert agent.stats()[stats.REJECTED_WORKERS] == 1


def test_a_stopping_agent_drains_its_workers(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    invoker = ThreadInvoker()
    agent = make_agent(invoker)
    with AgentClient(agent.address, secret) as client:
        client.offload(1, 0, 0, Q5, bids(2_000))
    agent.stop(grace_s=0.5)
    deadline = time.monotonic() + 30  # a bounded wait for the worker's session to end
    while not invoker.results:
        assert time.monotonic() < deadline, "the worker's session never ended"
        time.sleep(0.02)
    summary = invoker.results[0]
    assert summary["reason"] in ("drained", "closed") and summary["chunks"] == 1


def test_release_drains_idle_workers_whose_sessions_then_end(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    invoker = ThreadInvoker()
    agent = make_agent(invoker, idle_timeout_s=600.0)  # a drill's warm sessions: they would stay
    with AgentClient(agent.address, secret) as client:
        client.offload(1, 0, 0, Q5, bids(2_000))
        assert client.stats()["workers_connected"] >= 1
        assert client.release(0, "on VMs") >= 1
        deadline = time.monotonic() + 30  # a bounded wait for the sessions to end
        while client.stats()["workers_connected"]:
            assert time.monotonic() < deadline, "a released worker's session never ended"
            time.sleep(0.02)
        assert client.release(0, "again") == 0
        assert client.offload(1, 0, 1, Q5, bids(2_000)).rows_in  # a later chunk gets a new worker
    assert invoker.results[0]["reason"] == "drained"


def test_a_connection_that_never_says_hello_is_closed(make_agent) -> None:  # type: ignore[no-untyped-def]
    grpc = grpc_module()
    _, agent_pb2_grpc = pb()
    agent = make_agent(None, agent={"hello_timeout_s": 0.3})
    silent = threading.Event()

    def nothing():  # type: ignore[no-untyped-def]
        silent.wait(10)
        yield from ()

    with grpc.insecure_channel(agent.address) as channel:
        call = agent_pb2_grpc.AgentStub(channel).Work(nothing(), timeout=10)
        with pytest.raises(grpc.RpcError) as info:
            list(call)
        silent.set()
    assert info.value.code() == grpc.StatusCode.CANCELLED


def test_a_worker_from_another_build_refuses_to_start(make_agent) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(None)
    descriptor = {
        "session_id": agent.config.session_id,
        "agent_address": agent.address,
        "secret": "x",
        "worker_id": "w1",
        "protocol_version": PROTOCOL_VERSION + 1,
    }
    with pytest.raises(SessionError, match="deploy the same build"):
        handler(descriptor, FakeContext(10))


def test_the_session_secret_stays_out_of_the_configs_repr(secret) -> None:  # type: ignore[no-untyped-def]
    from router.agent.config import AgentConfig

    config = AgentConfig(secret=secret)
    assert secret.decode() not in repr(config) and str(secret) not in repr(config)


def _raw_offload(address: str, metadata: tuple = ()):  # type: ignore[no-untyped-def, type-arg]
    """A bare call to Offload that sends whatever bytes it is given (no client, no retries)."""
    from core.wire.protocol import CHANNEL_OPTIONS, grpc_module

    channel = grpc_module().insecure_channel(address, options=CHANNEL_OPTIONS)
    call = channel.unary_unary("/sponge.agent.Agent/Offload", lambda b: b, lambda b: b)
    return channel, lambda body, timeout: call.future(body, timeout=timeout, metadata=metadata)


def test_a_caller_without_the_secret_is_refused_before_its_request_is_read(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    grpc = grpc_module()
    agent = make_agent(None)
    channel, offload = _raw_offload(agent.address)
    with channel:
        # Not a request at all, and large: parsing it would fail, reading it would cost the agent.
        refused = offload(b"\xff" * (32 << 20), 30)
        assert refused.exception().code() == grpc.StatusCode.UNAUTHENTICATED
    with AgentClient(agent.address, secret) as client:
        assert client.stats()[stats.REJECTED_CALLERS] == 1


def test_calls_past_the_agents_threads_are_refused_at_once_not_queued(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    from core.wire.protocol import SECRET_METADATA

    grpc = grpc_module()
    # No worker ever starts (every invoke is throttled) and the local fallback is late: each call
    # holds one of the agent's four threads until its deadline.
    agent = make_agent(
        ThreadInvoker(concurrency_limit=0), dispatch={"local_fallback_s": 60.0}, agent={"grpc_threads": 4}
    )
    agent_pb2, _ = pb()
    payload = encode(bids(500), "zstd")

    def request(epoch: int) -> bytes:
        return agent_pb2.OffloadRequest(
            epoch=epoch, program_id=Q5.program_id, program=Q5.dumps(), payload=payload
        ).SerializeToString()

    channel, offload = _raw_offload(agent.address, ((SECRET_METADATA, secret.decode()),))
    with channel:
        busy = [offload(request(epoch), 5) for epoch in range(4)]
        time.sleep(1.0)
        started = time.monotonic()
        extra = offload(request(99), 30)
        assert extra.exception().code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert time.monotonic() - started < 4  # answered at once, not after a queued wait
        assert all(b.exception().code() == grpc.StatusCode.DEADLINE_EXCEEDED for b in busy)
