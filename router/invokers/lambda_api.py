"""The AWS backend of the Invoker contract: boto3's Lambda `invoke`, with AWS's failure modes mapped.

Why each setting (DESIGN.md section 7):

* a function error still comes back as HTTP 200 with a `FunctionError` field ("Unhandled" or
  "Handled"), so it is read from the response, not from an exception, and becomes InvokeFailed
  with the function's own errorType and errorMessage;
* throttling is HTTP 429 TooManyRequestsException (with a Reason such as
  ReservedFunctionConcurrentInvocationLimitExceeded): it becomes Throttled, never retried here,
  because the agent decides what to do with missing capacity;
* boto3's default 60 s read timeout plus its retries can invoke a slow synchronous function
  several times, so the read timeout is set above the function timeout and botocore's own retries
  are switched off; this module retries only errors that prove the request was not run (5xx service
  errors, connection failures before the request was sent), a bounded number of times with backoff;
* TCP keepalive keeps long synchronous invokes alive through NAT and load balancers.

"Event" invocations (the default) return 202 at once, and the worker's session reports the rest.

`prewarm(n)` is the warm pool of paper section 4.4 on a deployed function: n warm-up invocations at
once, always synchronous (their answer says whether the environment was cold), each asking the handler
to hold its environment for `hold_s` so that the n overlap and Lambda starts or reuses n distinct
environments instead of handing one finished warm-up's environment to the next.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError, MissingDependencyError
from router.invokers.base import InvokeFailed, InvokeHandle, Invoker, InvokeResult, Throttled

RETRYABLE_CODES = frozenset({"ServiceException", "InternalFailure", "ServiceUnavailableException"})
THROTTLE_CODES = frozenset({"TooManyRequestsException", "ThrottlingException"})
ASYNC_PAYLOAD_LIMIT = 1024 * 1024  # 1 MB for "Event" invokes (6 MB for synchronous)
SYNC_PAYLOAD_LIMIT = 6 * 1024 * 1024
INVOCATION_TYPES = ("Event", "RequestResponse")
WARMUP_HOLD_S = 0.5
"""How long each warm-up of a round holds its environment (lambda_worker/handler.py caps it): ten times the
spread of a round's invokes reaching LocalStack (under 40 ms for 4 at once; with a 50 ms hold a round of 4
still reached 4 environments, bench.cold_start), with room for bigger pools and a loaded machine; and
short, because a burst that arrives during a round finds the pool busy (ADR 0039)."""


@dataclass(frozen=True)
class WarmUp:
    """One answered warm-up: whether its environment started cold, the invoke's round trip (with the
    hold), the handler's own start-up (imports and compile, `init_seconds`), and the environment (its
    log stream) where the runtime says."""

    cold: bool
    seconds: float
    init_seconds: float
    environment: str | None = None


@dataclass(frozen=True)
class WarmRound:
    """What one round of concurrent warm-ups found; a warm-up that failed or was throttled is missing
    from `answers`."""

    asked: int
    answers: tuple[WarmUp, ...]
    seconds: float

    @property
    def answered(self) -> int:
        return len(self.answers)

    @property
    def cold(self) -> int:
        """Answers from a new environment: the pool was smaller than asked, or an idle one was reclaimed."""
        return sum(1 for a in self.answers if a.cold)

    @property
    def environments(self) -> int:
        """Distinct environments that answered (by log stream), where the runtime reports one."""
        return len({a.environment for a in self.answers if a.environment})


@dataclass(frozen=True)
class Boto3InvokerConfig:
    function_name: str
    qualifier: str | None = None
    region: str | None = None
    endpoint_url: str | None = None  # LocalStack
    invocation_type: str = "Event"
    function_timeout_s: float = 60.0
    read_timeout_margin_s: float = 10.0
    connect_timeout_s: float = 5.0
    max_retries: int = 2
    retry_backoff_s: float = 0.2
    concurrency_limit: int = 100
    max_pool_connections: int = 64

    def __post_init__(self) -> None:
        if not self.function_name:
            raise ConfigError("the boto3 invoker needs a function name", hint="pass --function-name")
        if self.invocation_type not in INVOCATION_TYPES:
            raise ConfigError(
                f"invocation_type must be Event or RequestResponse, got {self.invocation_type!r}"
            )
        if not 1 <= self.function_timeout_s <= 900:
            raise ConfigError(
                f"function_timeout_s must be in [1, 900] like Lambda's, got {self.function_timeout_s}"
            )
        if self.max_retries < 0 or self.concurrency_limit < 0:
            raise ConfigError("max_retries and concurrency_limit must be >= 0")

    @property
    def read_timeout_s(self) -> float:
        return self.function_timeout_s + self.read_timeout_margin_s


def client_config(config: Boto3InvokerConfig) -> Any:
    """botocore's Config for the Lambda client (see the module doc for why each value)."""
    from botocore.config import Config

    return Config(
        read_timeout=config.read_timeout_s,
        connect_timeout=config.connect_timeout_s,
        retries={"total_max_attempts": 1, "mode": "standard"},
        tcp_keepalive=True,
        max_pool_connections=config.max_pool_connections,
    )


class Boto3Invoker(Invoker):
    def __init__(self, config: Boto3InvokerConfig, client: Any = None) -> None:
        self.config = config
        if client is None:
            try:
                import boto3
            except ImportError:
                raise MissingDependencyError(
                    "the boto3 invoker needs boto3", hint="run make setup (boto3 is a project dependency)"
                ) from None
            client = boto3.client(
                "lambda",
                region_name=config.region,
                endpoint_url=config.endpoint_url,
                config=client_config(config),
            )
        self.client = client
        self._pool = ThreadPoolExecutor(
            max(1, min(config.concurrency_limit, 256)), thread_name_prefix="lambda-invoke"
        )
        self._closed = False
        self._lock = threading.Lock()

    @property
    def concurrency_limit(self) -> int:
        return self.config.concurrency_limit

    def invoke_async(self, descriptor: Mapping[str, Any]) -> InvokeHandle:
        payload = json.dumps(descriptor).encode()
        limit = ASYNC_PAYLOAD_LIMIT if self.config.invocation_type == "Event" else SYNC_PAYLOAD_LIMIT
        if len(payload) > limit:
            raise InvokeFailed(
                f"invoke payload of {len(payload)} bytes exceeds Lambda's {limit} bytes",
                error_type="RequestTooLarge",
            )
        with self._lock:
            if self._closed:
                raise InvokeFailed("the invoker is closed", error_type="Closed")
            handle = InvokeHandle(str(descriptor.get("worker_id", "")))
            self._pool.submit(self._run, payload, handle)
        return handle

    def _run(self, payload: bytes, handle: InvokeHandle) -> None:
        try:
            handle.set_result(self.invoke(payload))
        except (Throttled, InvokeFailed) as e:
            handle.set_exception(e)
        except Exception as e:  # never leave a handle unresolved
            handle.set_exception(InvokeFailed(f"{type(e).__name__}: {e}", error_type=type(e).__name__))

    def warm(
        self, n: int, programs: Sequence[Mapping[str, Any]] = (), hold_s: float = WARMUP_HOLD_S
    ) -> WarmRound:
        """n concurrent synchronous warm-up invocations (see the module doc); never raises for one that
        fails or is throttled: a warm-up that did not happen only costs a later cold start."""
        started = time.monotonic()
        if n <= 0:
            return WarmRound(0, (), 0.0)
        event: dict[str, Any] = {"warmup": True, "hold_s": hold_s}
        if programs:
            event["programs"] = [dict(p) for p in programs]
        payload = json.dumps(event).encode()
        # A pool of the round's own: the invoker's pool may be held by synchronous worker sessions, and
        # a warm-up queued behind another would not overlap it.
        with ThreadPoolExecutor(n, thread_name_prefix="lambda-warmup") as pool:
            calls = [pool.submit(self.invoke, payload, "RequestResponse") for _ in range(n)]
        answers = []
        for call in calls:
            try:
                result = call.result()
            except (Throttled, InvokeFailed):
                continue
            body = result.payload or {}
            answers.append(
                WarmUp(
                    cold=bool(body.get("cold_start")),
                    seconds=result.seconds,
                    init_seconds=float(body.get("init_seconds") or 0.0),
                    environment=body.get("log_stream") or None,
                )
            )
        return WarmRound(n, tuple(answers), time.monotonic() - started)

    def prewarm(
        self, n: int, programs: Sequence[Mapping[str, Any]] = (), hold_s: float = WARMUP_HOLD_S
    ) -> int:
        """Warm n environments of the deployed function at once; returns how many of them were cold."""
        return self.warm(n, programs, hold_s).cold

    def invoke(self, payload: bytes, invocation_type: str | None = None) -> InvokeResult:
        """One invocation, synchronously, with the retries and mappings described in the module doc;
        `invocation_type` overrides the configured one (warm-ups are always RequestResponse)."""
        from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

        invocation_type = invocation_type or self.config.invocation_type
        kwargs: dict[str, Any] = {
            "FunctionName": self.config.function_name,
            "InvocationType": invocation_type,
            "Payload": payload,
        }
        if self.config.qualifier:
            kwargs["Qualifier"] = self.config.qualifier
        attempt = 0
        started = time.monotonic()
        # Our loop, not botocore's: only an error proving the worker did not run may be retried.
        while True:
            try:
                response = self.client.invoke(**kwargs)
                break
            except ClientError as e:
                err = e.response.get("Error", {})
                code = err.get("Code", "")
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code in THROTTLE_CODES or status == 429:
                    reason = e.response.get("Reason") or err.get("Message", "")
                    raise Throttled(f"Lambda throttled the invoke: {code} {reason}".strip()) from None
                if (code in RETRYABLE_CODES or status >= 500) and attempt < self.config.max_retries:
                    attempt += 1
                    time.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
                    continue
                raise InvokeFailed(
                    f"{code}: {err.get('Message', '')}", error_type=code or "ClientError"
                ) from None
            except EndpointConnectionError as e:
                # The request never reached Lambda: safe to retry.
                if attempt < self.config.max_retries:
                    attempt += 1
                    time.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
                    continue
                raise InvokeFailed(str(e), error_type="EndpointConnectionError") from None
            except ConnectionClosedError as e:
                # It may have run: retrying could start a second worker, so report instead.
                raise InvokeFailed(str(e), error_type="ConnectionClosedError") from None
        return self._result(response, time.monotonic() - started, invocation_type)

    def _result(self, response: Mapping[str, Any], seconds: float, invocation_type: str) -> InvokeResult:
        status = int(response.get("StatusCode", 0))
        body = response.get("Payload")
        raw = body.read() if body is not None else b""
        parsed: Any = None
        if raw:
            try:
                parsed = json.loads(raw)
            except json.JSONDecodeError:
                parsed = {"raw": raw.decode(errors="replace")}
        if response.get("FunctionError"):
            info = parsed if isinstance(parsed, Mapping) else {}
            raise InvokeFailed(
                str(info.get("errorMessage", "the function failed")),
                error_type=str(info.get("errorType", response["FunctionError"])),
            )
        finished = invocation_type == "RequestResponse"
        return InvokeResult(finished, parsed if isinstance(parsed, Mapping) else None, status, seconds)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
