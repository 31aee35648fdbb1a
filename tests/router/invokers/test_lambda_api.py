"""The AWS invoker against botocore's Stubber: AWS's answers mapped to Throttled / InvokeFailed."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from router.invokers import make_invoker
from router.invokers.base import InvokeFailed, Throttled
from router.invokers.lambda_api import Boto3Invoker, Boto3InvokerConfig, client_config

pytestmark = pytest.mark.timeout(30)


def _invoker(**kw: object) -> tuple[Boto3Invoker, Stubber]:
    config = Boto3InvokerConfig(function_name="sponge-worker", retry_backoff_s=0.0, **kw)  # type: ignore[arg-type]
    client = boto3.client(
        "lambda",
        region_name="eu-west-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=client_config(config),
    )
    stubber = Stubber(client)
    stubber.activate()
    return Boto3Invoker(config, client=client), stubber


def _body(obj: object) -> StreamingBody:
    raw = json.dumps(obj).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


def test_client_is_configured_against_double_invokes() -> None:
    inv, _ = _invoker(function_timeout_s=120.0)
    cfg = inv.client.meta.config
    assert cfg.read_timeout == 130.0 > inv.config.function_timeout_s
    assert cfg.tcp_keepalive is True
    assert cfg.retries["total_max_attempts"] == 1


def test_event_invoke_is_accepted_and_not_finished() -> None:
    inv, stub = _invoker()
    stub.add_response(
        "invoke",
        {"StatusCode": 202, "Payload": _body("")},
        {"FunctionName": "sponge-worker", "InvocationType": "Event", "Payload": ANY},
    )
    result = inv.invoke_async({"worker_id": "w1"}).result(5)
    assert result.status_code == 202 and not result.finished
    stub.assert_no_pending_responses()


def test_request_response_returns_the_handler_summary() -> None:
    inv, stub = _invoker(invocation_type="RequestResponse", qualifier="live")
    stub.add_response(
        "invoke",
        {"StatusCode": 200, "Payload": _body({"chunks": 3})},
        {
            "FunctionName": "sponge-worker",
            "InvocationType": "RequestResponse",
            "Payload": ANY,
            "Qualifier": "live",
        },
    )
    result = inv.invoke_async({"worker_id": "w1"}).result(5)
    assert result.finished and result.payload == {"chunks": 3}


def test_a_function_error_arrives_as_200_and_becomes_invoke_failed_with_its_type() -> None:
    inv, stub = _invoker(invocation_type="RequestResponse")
    body = {"errorType": "SessionError", "errorMessage": "agent 10.0.0.5:7000: UNAUTHENTICATED"}
    stub.add_response("invoke", {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _body(body)})
    with pytest.raises(InvokeFailed) as info:
        inv.invoke_async({"worker_id": "w1"}).result(5)
    assert info.value.error_type == "SessionError" and "UNAUTHENTICATED" in str(info.value)


def test_429_becomes_throttled_and_is_not_retried() -> None:
    inv, stub = _invoker()
    stub.add_client_error(
        "invoke",
        service_error_code="TooManyRequestsException",
        service_message="Rate Exceeded.",
        http_status_code=429,
        modeled_fields={"Reason": "ReservedFunctionConcurrentInvocationLimitExceeded"},
    )
    with pytest.raises(Throttled, match="TooManyRequestsException"):
        inv.invoke_async({"worker_id": "w1"}).result(5)
    stub.assert_no_pending_responses()


def test_service_errors_are_retried_a_bounded_number_of_times() -> None:
    inv, stub = _invoker(max_retries=2)
    for _ in range(2):
        stub.add_client_error("invoke", service_error_code="ServiceException", http_status_code=500)
    stub.add_response("invoke", {"StatusCode": 202, "Payload": _body("")})
    assert inv.invoke_async({}).result(5).status_code == 202

    inv2, stub2 = _invoker(max_retries=1)
    for _ in range(2):
        stub2.add_client_error("invoke", service_error_code="ServiceException", http_status_code=500)
    with pytest.raises(InvokeFailed) as info:
        inv2.invoke_async({}).result(5)
    assert info.value.error_type == "ServiceException"
    stub2.assert_no_pending_responses()


def test_client_errors_are_not_retried() -> None:
    inv, stub = _invoker()
    stub.add_client_error("invoke", service_error_code="ResourceNotFoundException", http_status_code=404)
    with pytest.raises(InvokeFailed) as info:
        inv.invoke_async({}).result(5)
    assert info.value.error_type == "ResourceNotFoundException"


def test_oversized_payloads_are_refused_before_calling_aws() -> None:
    inv, _ = _invoker()
    with pytest.raises(InvokeFailed, match="exceeds"):
        inv.invoke_async({"program": "x" * (1024 * 1024)})


def test_config_is_validated_and_backends_are_chosen_by_name() -> None:
    with pytest.raises(Exception, match="function name"):
        Boto3InvokerConfig(function_name="")
    with pytest.raises(Exception, match="Event or RequestResponse"):
        Boto3InvokerConfig(function_name="f", invocation_type="DryRun")
    with pytest.raises(Exception, match="unknown invoker"):
        make_invoker("kubernetes")


def test_a_warm_round_is_synchronous_and_counts_the_cold_answers() -> None:
    """Event invokes answer nothing, so warm-ups are RequestResponse whatever the agent's type; a
    throttled one is missing from the round, not an error."""
    inv, stub = _invoker(invocation_type="Event", qualifier="live")
    expected = {"FunctionName": "sponge-worker", "InvocationType": "RequestResponse", "Payload": ANY}
    expected["Qualifier"] = "live"
    for cold, stream in ((True, "a"), (True, "b"), (False, "c")):
        answer = {"warm": True, "cold_start": cold, "init_seconds": 0.8, "log_stream": stream}
        stub.add_response("invoke", {"StatusCode": 200, "Payload": _body(answer)}, expected)
    stub.add_client_error("invoke", service_error_code="TooManyRequestsException", http_status_code=429)
    done = inv.warm(4)
    stub.assert_no_pending_responses()
    assert (done.asked, done.answered, done.cold, done.environments) == (4, 3, 2, 3)
    assert all(a.init_seconds == 0.8 for a in done.answers)
    assert inv.warm(0).answered == 0


class _Barrier:
    """A Lambda client whose invokes answer only once `n` of them are in flight together: a round whose
    warm-ups did not overlap never completes (the barrier times out and the warm-ups fail)."""

    def __init__(self, n: int) -> None:
        import threading

        self.barrier = threading.Barrier(n, timeout=5)
        self.events: list[dict] = []

    def invoke(self, **kwargs: object) -> dict:
        self.barrier.wait()
        self.events.append(json.loads(kwargs["Payload"]))  # type: ignore[arg-type]
        return {"StatusCode": 200, "Payload": _body({"cold_start": True, "log_stream": "x"})}


def test_the_warm_ups_of_a_round_overlap_and_ask_the_handler_to_hold() -> None:
    client = _Barrier(5)
    inv = Boto3Invoker(Boto3InvokerConfig(function_name="f", concurrency_limit=1), client=client)
    # All five cold, though one invoke thread.
    assert inv.prewarm(5, programs=[{"query": "q5"}], hold_s=0.5) == 5
    assert all(e == {"warmup": True, "hold_s": 0.5, "programs": [{"query": "q5"}]} for e in client.events)
