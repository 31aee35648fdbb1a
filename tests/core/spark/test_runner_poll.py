"""The run's poll of its query: the query's own failure ends the run at once; a gateway error that is
not the query's is retried, and only a lasting one ends the run."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JError, Py4JJavaError

from core.errors import SpongeError
from core.spark import runner


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "GATEWAY_RETRY_S", 0.0)


def failing(times: int, error: Exception, then: object = None):
    calls = {"n": 0}

    def call():
        calls["n"] += 1
        if calls["n"] <= times:
            raise error
        return then

    return call, calls


def test_a_gateway_hiccup_is_retried_and_the_poll_goes_on() -> None:
    failure, calls = failing(3, Py4JError("An error occurred while calling o1290.exception"))
    assert runner.poll(lambda: True, failure) is True
    assert calls["n"] == 4


def test_a_lasting_gateway_error_ends_the_run() -> None:
    failure, calls = failing(10**6, Py4JError("gateway gone"))
    with pytest.raises(Py4JError, match="gateway gone"):
        runner.poll(lambda: False, failure)
    assert calls["n"] == runner.GATEWAY_RETRIES + 1


def test_the_querys_own_failure_is_not_retried() -> None:
    class JavaFailure(Py4JJavaError):
        def __init__(self) -> None:
            Exception.__init__(self, "boom")

        def __str__(self) -> str:
            return "boom"

    failure, calls = failing(1, JavaFailure())
    with pytest.raises(Py4JJavaError):
        runner.poll(lambda: False, failure)
    assert calls["n"] == 1


def test_a_failed_query_ends_the_run_with_its_first_line() -> None:
    with pytest.raises(SpongeError, match="the streaming query failed: state store lost$"):
        runner.poll(lambda: False, lambda: "state store lost\n\tat org.apache...")
