"""The dispatcher's chunk life cycle, with fake workers: nothing lost, nothing resolved twice."""

from __future__ import annotations

import time

import pytest

from core.wire.arrow_ipc import checksum
from router import stats
from router.dispatcher import ChunkFailed, ChunkOutcome, ChunkTask, DispatchConfig, Dispatcher
from tests.router.fakes import FakeLink

pytestmark = pytest.mark.timeout(30)


def _local_ok(task: ChunkTask) -> ChunkOutcome:
    return ChunkOutcome(b"local:" + task.payload, "", True, task.redispatches, 1, 1, 0)


def _dispatcher(**kw: float) -> tuple[Dispatcher, stats.Counters]:
    counters = stats.Counters()
    config = DispatchConfig(**{"local_fallback_s": 60.0, "chunk_timeout_s": 60.0, **kw})  # type: ignore[arg-type]
    return Dispatcher(config, counters, _local_ok), counters


def _task(i: int) -> ChunkTask:
    return ChunkTask(i, 7, "p1", "{}", f"chunk{i}".encode())


def _result(d: Dispatcher, link: FakeLink, task: ChunkTask, payload: bytes = b"partial") -> None:
    per_node = {"map1": 10, "filter2": 4}
    d.on_result(
        link.worker_id, task.chunk_id, task.epoch, payload, 10, 2, checksum(payload), rows_by_node=per_node
    )


def test_chunks_go_to_idle_workers_one_at_a_time_in_order() -> None:
    d, c = _dispatcher()
    a, b = FakeLink("a"), FakeLink("b")
    d.attach(a)
    tasks = [_task(i) for i in range(3)]
    for t in tasks:
        d.submit(t)
    assert [t.chunk_id for t in a.sent] == [0]
    d.attach(b)
    assert [t.chunk_id for t in b.sent] == [1]
    _result(d, a, tasks[0])
    assert [t.chunk_id for t in a.sent] == [0, 2]
    out = tasks[0].future.result(1)
    assert out.worker_id == "a" and out.payload == b"partial" and not out.ran_locally
    assert c.get(stats.CHUNKS_DISPATCHED) == 3 and c.get(stats.CHUNKS_DONE) == 1


def test_a_disconnected_worker_loses_its_chunk_to_another_and_a_late_result_is_dropped() -> None:
    d, c = _dispatcher()
    a, b = FakeLink("a"), FakeLink("b")
    d.attach(a)
    t = _task(1)
    d.submit(t)
    d.detach("a")
    assert c.get(stats.CHUNKS_REDISPATCHED) == 1
    d.attach(b)
    assert b.sent == [t]
    _result(d, a, t, b"from the dead")  # a late result from the worker that lost the chunk
    assert not t.future.done() and c.get(stats.LATE_RESULTS) == 1
    _result(d, b, t, b"good")
    assert t.future.result(1).payload == b"good" and t.future.result(1).redispatches == 1
    _result(d, b, t, b"duplicate")  # a second result for a resolved chunk changes nothing
    assert t.future.result(1).payload == b"good" and c.get(stats.CHUNKS_DONE) == 1


def test_a_chunk_held_past_its_deadline_is_taken_back_and_the_worker_closed() -> None:
    d, c = _dispatcher(chunk_timeout_s=0.05)
    slow, fast = FakeLink("slow"), FakeLink("fast")
    d.attach(slow)
    t = _task(1)
    d.submit(t)
    while time.monotonic() <= t.deadline:  # until the chunk is overdue by the dispatcher's own clock
        time.sleep(0.01)
    d.tick()
    assert slow.closed and c.get(stats.CHUNK_TIMEOUTS) == 1 and c.get(stats.CHUNKS_REDISPATCHED) == 1
    d.attach(fast)
    assert fast.sent == [t]
    _result(d, fast, t)
    _result(d, slow, t, b"too late")
    assert t.future.result(1).worker_id == "fast" and c.get(stats.LATE_RESULTS) == 1


def test_chunks_run_locally_when_no_worker_comes_in_time() -> None:
    d, c = _dispatcher(local_fallback_s=0.0)
    t = _task(1)
    d.submit(t)
    d.tick()
    out = t.future.result(5)
    assert out.ran_locally and out.payload == b"local:chunk1" and c.get(stats.CHUNKS_RUN_LOCALLY) == 1


def test_after_max_dispatches_a_chunk_runs_locally() -> None:
    d, c = _dispatcher(max_dispatches=2)
    t = _task(1)
    d.submit(t)
    for name in ("a", "b"):
        d.attach(FakeLink(name))
        d.detach(name)
    assert t.future.result(5).ran_locally
    assert c.get(stats.CHUNKS_DISPATCHED) == 2 and c.get(stats.CHUNKS_REDISPATCHED) == 1


def test_a_worker_failure_is_arbitrated_by_a_local_run() -> None:
    d, c = _dispatcher()
    a = FakeLink("a")
    d.attach(a)
    t = _task(1)
    d.submit(t)
    d.on_failure("a", 1, "MemoryError", "out of memory")
    assert t.future.result(5).ran_locally and c.get(stats.WORKER_FAILURES) == 1
    assert t.worker_error == ("MemoryError", "out of memory")


def test_a_program_error_comes_back_with_its_class_and_message() -> None:
    def broken(task: ChunkTask) -> ChunkOutcome:
        raise KeyError("column 'x' is missing")

    counters = stats.Counters()
    d = Dispatcher(DispatchConfig(local_fallback_s=0.0), counters, broken)
    t = _task(1)
    d.submit(t)
    d.tick()
    with pytest.raises(ChunkFailed) as info:
        t.future.result(5)
    assert info.value.error_type == "KeyError" and "column 'x'" in info.value.detail
    assert counters.get(stats.CHUNKS_FAILED) == 1


def test_a_corrupt_result_is_not_merged_and_the_chunk_is_redone() -> None:
    d, c = _dispatcher()
    a = FakeLink("a")
    d.attach(a)
    t = _task(1)
    d.submit(t)
    d.on_result("a", 1, 7, b"bits", 1, 1, checksum(b"other bits"))
    assert not t.future.done() and c.get(stats.CORRUPT_RESULTS) == 1
    assert a.sent == [t, t]  # the same (healthy) worker gets it again
    _result(d, a, t)
    assert t.future.result(1).payload == b"partial"


def test_a_retiring_worker_gets_no_new_chunks() -> None:
    d, _ = _dispatcher()
    a = FakeLink("a")
    d.attach(a)
    t1, t2 = _task(1), _task(2)
    d.submit(t1)
    d.submit(t2)
    d.retire("a")
    _result(d, a, t1)
    assert a.sent == [t1] and not t2.future.done()


def test_drain_idle_tells_idle_workers_beyond_keep_to_leave_and_never_a_busy_one() -> None:
    d, _ = _dispatcher()
    a, b, c = FakeLink("a"), FakeLink("b"), FakeLink("c")
    for link in (a, b, c):
        d.attach(link)
    t1 = _task(1)
    d.submit(t1)  # a is busy
    assert d.drain_idle(keep=1, reason="on VMs") == 2  # b and c idle: both go, a stays
    assert (a.drained, b.drained, c.drained) == ([], ["on VMs"], ["on VMs"])
    assert d.drain_idle(keep=0, reason="on VMs") == 0  # a is still busy; b and c are leaving already
    t2 = _task(2)
    d.submit(t2)
    _result(d, a, t1)
    assert [t.chunk_id for t in a.sent] == [1, 2]  # a drained worker gets nothing: a takes the next
    _result(d, a, t2)
    assert d.drain_idle(keep=0, reason="done") == 1 and a.drained == ["done"]
    assert t1.future.result(1).worker_id == "a" and t2.future.result(1).worker_id == "a"


def test_close_drains_workers_and_fails_what_is_left() -> None:
    d, _ = _dispatcher()
    a = FakeLink("a")
    d.attach(a)
    t1, t2 = _task(1), _task(2)
    d.submit(t1)
    d.submit(t2)
    d.close()
    assert a.drained and a.closed
    for t in (t1, t2):
        with pytest.raises(ChunkFailed, match="AgentStopping"):
            t.future.result(1)
    t3 = _task(3)
    with pytest.raises(ChunkFailed):
        d.submit(t3).result(1)


def test_demand_counts_waiting_and_running_chunks() -> None:
    d, _ = _dispatcher()
    d.attach(FakeLink("a"))
    for i in range(3):
        d.submit(_task(i))
    wanted, connected, head = d.demand()
    assert (wanted, connected) == (3, 1) and head is not None and head.chunk_id == 1


def test_records_are_counted_once_where_their_chunk_ran() -> None:
    d, c = _dispatcher(max_dispatches=1)
    a = FakeLink("a")
    d.attach(a)
    offloaded, home = _task(1), _task(2)
    d.submit(offloaded)
    _result(d, a, offloaded)  # rows_in=10 from a worker
    _result(d, a, offloaded, b"duplicate")
    d.submit(home)
    d.detach("a")  # its only dispatch is used up: it runs in the agent (rows_in=1)
    assert home.future.result(5).ran_locally
    assert c.get(stats.RECORDS_OFFLOADED) == 10 and c.get(stats.RECORDS_RUN_LOCALLY) == 1
    # per node too, for the worker's result only: the duplicate and the agent's own run add nothing
    assert stats.operators_offloaded(c.snapshot()) == {"map1": 10, "filter2": 4}


def test_worker_compute_time_is_counted_once_per_chunk_a_worker_resolved() -> None:
    d, c = _dispatcher(max_dispatches=2)
    a, b = FakeLink("a"), FakeLink("b")
    d.attach(a)
    first, home = _task(1), _task(2)
    d.submit(first)
    d.detach("a")  # a loses the chunk: redispatched, and a's late result counts nothing
    d.attach(b)

    def result(link: FakeLink, task: ChunkTask, seconds: float, payload: bytes = b"partial") -> None:
        d.on_result(
            link.worker_id, task.chunk_id, task.epoch, payload, 10, 2, checksum(payload), cpu_seconds=seconds
        )

    result(a, first, 9.0)
    result(b, first, 0.25)  # the result that resolves it
    result(b, first, 7.0, b"duplicate")
    assert first.future.result(1).worker_id == "b"
    d.submit(home)
    # A corrupt result is redone, and its time not counted.
    d.on_result("b", 2, 7, b"bits", 1, 1, checksum(b"other bits"), cpu_seconds=5.0)
    d.detach("b")  # its second dispatch used up: the agent runs it, which is no worker's time
    assert home.future.result(5).ran_locally
    assert c.get(stats.WORKER_CPU_US) == 250_000
    assert c.snapshot()[stats.WORKER_CPU_US] == 250_000  # a known counter: in every Stats reply


def test_an_unmeasurable_compute_time_counts_as_none() -> None:
    d, c = _dispatcher()
    a = FakeLink("a")
    d.attach(a)
    for i, seconds in enumerate((float("nan"), -1.0, float("inf"), 0.000_0004, 0.000_0006)):
        t = _task(i)
        d.submit(t)
        d.on_result("a", i, 7, b"p", 1, 1, checksum(b"p"), cpu_seconds=seconds)
        assert t.future.result(1).worker_id == "a"
    assert c.get(stats.WORKER_CPU_US) == 1  # 0.4 us rounds to 0, 0.6 us to 1


def test_workers_shows_who_holds_what() -> None:
    d, _ = _dispatcher()
    d.attach(FakeLink("a"))
    d.attach(FakeLink("b"))
    d.submit(_task(5))
    assert d.workers() == [("a", 5), ("b", None)]
