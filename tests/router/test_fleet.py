"""Starting workers: caps, throttle back-off, back-off after a worker of another build, admission of
invoked workers only."""

from __future__ import annotations

import pytest

from core.wire.protocol import token_matches
from router import stats
from router.fleet import FleetConfig, FleetManager
from router.invokers.base import InvokeHandle, InvokeResult, Throttled

pytestmark = pytest.mark.timeout(10)


class ScriptedInvoker:
    """Accepts up to `limit` invokes, then throttles; keeps the handles for the test to resolve."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.handles: list[InvokeHandle] = []
        self.events: list[dict] = []

    @property
    def concurrency_limit(self) -> int:
        return 100

    def invoke_async(self, descriptor):  # type: ignore[no-untyped-def]
        if len(self.handles) >= self.limit:
            raise Throttled("429")
        self.events.append(dict(descriptor))
        h = InvokeHandle(descriptor["worker_id"])
        self.handles.append(h)
        return h

    def close(self) -> None:
        pass


def _fleet(invoker, **kw) -> tuple[FleetManager, stats.Counters]:  # type: ignore[no-untyped-def]
    counters = stats.Counters()
    config = FleetConfig(**{"max_workers": 3, "throttle_backoff_s": 60.0, **kw})
    fm = FleetManager(
        invoker,
        config,
        session_id="s123456789",
        session_secret=b"k" * 32,
        agent_address="127.0.0.1:1",
        counters=counters,
    )
    return fm, counters


def test_starts_what_is_wanted_up_to_the_cap_with_valid_descriptors() -> None:
    inv = ScriptedInvoker(10)
    fm, c = _fleet(inv)
    assert fm.want(5, {"query": "q5", "node_ids": ["map1"]}) == 3
    assert fm.want(5) == 0  # the three starting ones already cover the cap
    assert c.get(stats.WORKERS_STARTED) == 3
    ev = inv.events[0]
    assert ev["agent_address"] == "127.0.0.1:1" and ev["program"] == {"query": "q5", "node_ids": ["map1"]}
    assert token_matches(b"k" * 32, "s123456789", ev["worker_id"], ev["secret"])


def test_a_throttle_is_counted_and_backs_off() -> None:
    inv = ScriptedInvoker(1)
    fm, c = _fleet(inv)
    assert fm.want(3) == 1
    assert c.get(stats.THROTTLES) == 1
    assert fm.want(3) == 0 and len(inv.events) == 1  # backing off: no new attempt


def test_a_throttle_reported_by_the_handle_is_counted_backs_off_and_started_no_worker() -> None:
    """A RequestResponse invoke learns of Lambda's 429 after invoke_async returned, through its handle."""
    inv = ScriptedInvoker(10)
    fm, c = _fleet(inv)
    assert fm.want(2) == 2
    inv.handles[1].set_exception(Throttled("429 ReservedFunctionConcurrentInvocationLimitExceeded"))
    assert c.get(stats.THROTTLES) == 1 and c.get(stats.WORKERS_STARTED) == 1
    assert fm.starting == 1 and not fm.admit(inv.events[1]["worker_id"])
    assert fm.want(3) == 0 and len(inv.events) == 2  # backing off: no new attempt


def test_a_worker_refused_for_its_build_stops_the_starts_for_a_while() -> None:
    """Every worker of a function deployed from other sources is refused: the fleet must not start one
    after another as each invocation ends (hundreds of paid invocations a minute)."""
    inv = ScriptedInvoker(100)
    fm, c = _fleet(inv, refused_backoff_s=60.0)
    assert fm.want(3) == 3
    first = inv.events[0]["worker_id"]
    fm.refused(first)
    assert fm.starting == 2 and not fm.admit(first)
    inv.handles[0].set_result(InvokeResult(True, {}))  # its invocation ends, refused
    assert fm.want(3) == 0 and len(inv.events) == 3  # backing off: no new attempt
    assert c.get(stats.WORKERS_STARTED) == 3
    again = ScriptedInvoker(100)
    fm, _ = _fleet(again, refused_backoff_s=0.0)
    assert fm.want(1) == 1
    fm.refused(again.events[0]["worker_id"])
    assert fm.want(2) == 2  # after the back-off, starts go on (the function may have been redeployed)


def test_only_invoked_workers_are_admitted_once() -> None:
    inv = ScriptedInvoker(10)
    fm, _ = _fleet(inv)
    fm.want(1)
    wid = inv.events[0]["worker_id"]
    assert not fm.admit("someone-else")
    assert fm.admit(wid) and not fm.admit(wid)


def test_a_finished_invocation_frees_its_slot_and_its_admission() -> None:
    inv = ScriptedInvoker(10)
    fm, _ = _fleet(inv, max_workers=1)
    fm.want(1)
    inv.handles[0].set_result(InvokeResult(True, {}))
    assert fm.starting == 0 and not fm.admit(inv.events[0]["worker_id"])
    assert fm.want(1) == 1


def test_workers_that_never_connect_stop_counting_after_the_start_timeout() -> None:
    inv = ScriptedInvoker(10)
    fm, _ = _fleet(inv, max_workers=1, start_timeout_s=0.0)
    fm.want(1)
    fm.tick()
    assert fm.starting == 0 and fm.want(1) == 1
    assert fm.admit(inv.events[0]["worker_id"])  # still admissible if it shows up late


def test_without_an_invoker_nothing_starts() -> None:
    fm, _ = _fleet(None)
    assert fm.want(10) == 0


def test_a_worker_that_dials_in_after_its_replacement_does_not_take_the_fleet_past_its_cap() -> None:
    inv = ScriptedInvoker(10)
    fm, _ = _fleet(inv, max_workers=1, start_timeout_s=0.0)
    assert fm.want(1) == 1
    late = inv.events[0]["worker_id"]
    fm.tick()  # its start timed out: it no longer counts as capacity ...
    assert fm.want(1) == 1  # ... so another is invoked
    replacement = inv.events[1]["worker_id"]
    assert fm.admit(replacement)
    assert not fm.admit(late)  # the first dials in after all: the cap holds
    assert fm.want(1) == 0
