"""THE Lambda handler of Sponge's transient workers (the same function on AWS, LocalStack and locally).

Thin on purpose: it parses the session descriptor, sets up Powertools (Logger with the session id as
correlation id, EMF Metrics in namespace "Sponge", Tracer) and hands over to
lambda_worker/session.py. Why lazy: a cold start pays for every import, so pyarrow, polars and grpc
are imported on the first invocation that needs them, and they, the compiled programs and the
cold/warm flag live at module level so warm invocations of the same execution environment reuse
them (paper section 4.4). The Tracer is created only where tracing is enabled: its X-Ray SDK import
alone costs ~0.4 s, which a local or LocalStack worker should not pay.

Configuration is read from the environment once, here at the edge (HandlerSettings); the embedded
fleet sets POWERTOOLS_TRACE_DISABLED and friends in the local runtime's environment.

Events:
    {"warmup": true, "programs": [{...}]?, "hold_s": S?}  import, compile each program (and run a keyed
                                          one once over made-up rows), then hold the environment S
                                          seconds (at most MAX_WARMUP_HOLD_S) before returning (warm pools
                                          and keep-warm pings)
    {session descriptor}                  dial the agent and serve chunks (core/wire/descriptor.py)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_IMPORT_STARTED = time.monotonic()

from aws_lambda_powertools import Logger, Metrics  # noqa: E402 - timed from the line above
from aws_lambda_powertools.metrics import MetricUnit  # noqa: E402

from core.deployment import METRICS_NAMESPACE  # noqa: E402


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class HandlerSettings:
    """Everything the handler takes from its environment, resolved once at import."""

    service: str = "sponge-worker"
    tracing: bool = False
    provisioned: bool = False
    """Lambda initialised this environment ahead of any invoke (provisioned concurrency): its first
    invocation pays no start-up, so it is not a cold start (Powertools' ColdStart metric agrees)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HandlerSettings:
        return cls(
            service=env.get("POWERTOOLS_SERVICE_NAME") or "sponge-worker",
            # Like Powertools itself: trace only inside Lambda, and never when switched off.
            tracing=bool(env.get("LAMBDA_TASK_ROOT")) and not _truthy(env.get("POWERTOOLS_TRACE_DISABLED")),
            provisioned=env.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "provisioned-concurrency",
        )


SETTINGS = HandlerSettings.from_env(os.environ)
MAX_WARMUP_HOLD_S = 5.0
"""A warm-up holds its environment only briefly: long enough for the other warm-ups of its round to find
it busy (so each starts or reaches an environment of its own), short enough that a burst arriving
meanwhile is not kept waiting for the pool."""
logger = Logger(service=SETTINGS.service)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SETTINGS.service)


class _WarmState:
    """What survives between invocations of one execution environment."""

    def __init__(self, cold: bool = True) -> None:
        self.cold = cold
        self.programs: Any = None  # lambda_worker.program.ProgramCache, created on first use
        self.faults: Any = None  # lambda_worker.session.ChunkFaults, set only by the local runtime
        self.traced: Callable[[Mapping[str, Any], Any], dict[str, Any]] | None = None

    def program_cache(self) -> Any:
        if self.programs is None:
            from lambda_worker.program import ProgramCache

            self.programs = ProgramCache()
        return self.programs


STATE = _WarmState(cold=not SETTINGS.provisioned)


def configure_faults(faults: Any) -> None:
    """Install failure injection (a lambda_worker.session.ChunkFaults): the local runtime's tests only."""
    STATE.faults = faults


def _warmup(event: Mapping[str, Any], context: Any, cold: bool, started: float) -> dict[str, Any]:
    from core.wire.protocol import grpc_module, pb
    from lambda_worker.program import ProgramSpec, preload

    grpc_module()
    pb()
    preload()
    programs = STATE.program_cache()
    for spec in event.get("programs") or ():
        program = programs.get(ProgramSpec.from_json(spec))
        warm = getattr(program, "warm", None)
        if warm is not None:
            try:
                warm()
            except Exception:  # a made-up batch that fails costs only a slower first seal
                logger.exception("warming program %s failed", spec)
    init_seconds = time.monotonic() - started
    hold_s = min(max(float(event.get("hold_s") or 0.0), 0.0), MAX_WARMUP_HOLD_S)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is not None:  # never into the function's timeout (WorkerTimeout may be 3 s)
        hold_s = min(hold_s, max(0.0, remaining() / 1000 - 1.0))
    if hold_s:
        # Why hold: a round of concurrent warm-ups must overlap, or Lambda hands a finished warm-up's
        # environment to the next one and the round warms fewer environments than it asked for.
        time.sleep(hold_s)
    # The log stream names the environment: a round's answers show how many distinct ones it reached.
    stream = getattr(context, "log_stream_name", None)
    return {"warm": True, "cold_start": cold, "init_seconds": init_seconds, "log_stream": stream}


def _serve(event: Mapping[str, Any], context: Any, cold: bool, started: float) -> dict[str, Any]:
    from core.wire.descriptor import SessionDescriptor
    from lambda_worker.session import ChunkFaults, WorkerSession

    descriptor = SessionDescriptor.from_event(event)
    logger.append_keys(worker_id=descriptor.worker_id)

    session = WorkerSession(
        descriptor,
        context,
        STATE.program_cache(),
        cold_start=cold,
        init_seconds=time.monotonic() - started,
        faults=STATE.faults or ChunkFaults(),
    )
    summary = session.run()
    # One value per metric and invocation: EMF documents stay small however many chunks a session took.
    metrics.add_metric(name="Chunks", unit=MetricUnit.Count, value=summary.chunks)
    metrics.add_metric(name="ChunkFailures", unit=MetricUnit.Count, value=summary.failures)
    metrics.add_metric(name="RowsIn", unit=MetricUnit.Count, value=summary.rows_in)
    metrics.add_metric(name="ComputeSeconds", unit=MetricUnit.Seconds, value=summary.compute_s)
    metrics.add_metric(name="SessionSeconds", unit=MetricUnit.Seconds, value=summary.seconds)
    logger.info("session over", extra=summary.to_json())
    return {**summary.to_json(), "cold_start": cold}


def _handle(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    cold = STATE.cold
    STATE.cold = False
    started = _IMPORT_STARTED if cold else time.monotonic()
    metrics.add_metric(name="ColdStarts" if cold else "WarmStarts", unit=MetricUnit.Count, value=1)
    if isinstance(event, Mapping) and event.get("warmup"):
        return _warmup(event, context, cold, started)
    return _serve(event, context, cold, started)


@metrics.log_metrics
@logger.inject_lambda_context(correlation_id_path="session_id")
def _handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    return _handle(event, context)


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda entry point (`lambda_worker.handler.handler`)."""
    if not SETTINGS.tracing:
        return _handler(event, context)
    if STATE.traced is None:
        from aws_lambda_powertools import Tracer

        STATE.traced = Tracer(service=SETTINGS.service).capture_lambda_handler(_handler)
    return STATE.traced(event, context)
