"""`sponge status`'s log reading against botocore's Stubber: pages followed, a cap kept, a missing
log group (no invocation yet) read as no events."""

from __future__ import annotations

from typing import Any

import pytest

from infra.deploy.status import _log_events
from tests.infra.deploy.stubs import stubbed

pytestmark = pytest.mark.timeout(60)

GROUP = "/aws/lambda/s-worker"


def _events(*timestamps: int) -> dict[str, Any]:
    return {"events": [{"timestamp": t, "message": f"m{t}", "logStreamName": "a"} for t in timestamps]}


def test_log_events_follow_every_page_and_come_oldest_first() -> None:
    logs, stub = stubbed("logs")
    stub.add_response(
        "filter_log_events", {**_events(30, 10), "nextToken": "t1"}, {"logGroupName": GROUP, "startTime": 5}
    )
    stub.add_response(
        "filter_log_events", _events(20), {"logGroupName": GROUP, "startTime": 5, "nextToken": "t1"}
    )
    assert [e["timestamp"] for e in _log_events(logs, GROUP, 5)] == [10, 20, 30]
    stub.assert_no_pending_responses()


def test_log_events_stop_at_the_cap() -> None:
    logs, stub = stubbed("logs")
    stub.add_response("filter_log_events", {**_events(1, 2), "nextToken": "t1"})
    stub.add_response("filter_log_events", {**_events(3, 4), "nextToken": "t2"})
    assert [e["timestamp"] for e in _log_events(logs, GROUP, 0, max_events=3)] == [1, 2, 3]
    stub.assert_no_pending_responses()  # the third page is never asked for


def test_a_log_group_not_there_yet_has_no_events_and_other_errors_surface() -> None:
    logs, stub = stubbed("logs")
    stub.add_client_error("filter_log_events", service_error_code="ResourceNotFoundException")
    assert _log_events(logs, GROUP, 0) == []
    stub.add_client_error("filter_log_events", service_error_code="AccessDeniedException")
    with pytest.raises(Exception, match="AccessDeniedException"):
        _log_events(logs, GROUP, 0)
