"""What a deployed stack is doing: its status, its function, warm workers, recent invocations, metrics.

Read from the function's log group (one REPORT line per invocation, cold ones with an Init Duration,
and the workers' own EMF documents) and from CloudWatch's AWS/Lambda metrics, because those are what
both LocalStack and AWS provide; see `sponge status --help`.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import Any

from botocore.exceptions import ClientError

from core.deployment import Deployment
from infra.deploy.aws_errors import Failure, classify
from infra.deploy.clients import client_for
from infra.deploy.stack import outputs_of, status_of

_REPORT = re.compile(
    r"REPORT RequestId: (?P<id>\S+)\s+Duration: (?P<ms>[\d.]+) ms"
    r".*?(?:Init Duration: (?P<init>[\d.]+) ms)?\s*$"
)
EMF_METRICS = ("ColdStarts", "WarmStarts", "Chunks", "ChunkFailures", "RowsIn")


def status(deployment: Deployment, window_s: float = 900.0, limit: int = 10) -> dict[str, Any]:
    """The stack, the function, warm workers and recent invocations (see `sponge status --help`)."""
    out: dict[str, Any] = {"target": deployment.target, "stack": deployment.stack_name}
    cfn = client_for(deployment, "cloudformation")
    stack_status = status_of(cfn, deployment.stack_name)
    out["stack_status"] = stack_status or "DOES_NOT_EXIST"
    if stack_status is None:
        return out
    out["outputs"] = outputs_of(cfn, deployment.stack_name)
    lam = client_for(deployment, "lambda")
    fn = lam.get_function(FunctionName=deployment.function_name)
    cfg = fn["Configuration"]
    out["function"] = {
        "name": cfg["FunctionName"],
        "state": cfg.get("State"),
        "runtime": cfg.get("Runtime"),
        "memory_mb": cfg.get("MemorySize"),
        "timeout_s": cfg.get("Timeout"),
        "last_modified": cfg.get("LastModified"),
        "reserved_concurrency": fn.get("Concurrency", {}).get("ReservedConcurrentExecutions"),
    }
    since_ms = int((time.time() - window_s) * 1000)
    events = _log_events(client_for(deployment, "logs"), deployment.log_group, since_ms)
    invocations = []
    streams_active: set[str] = set()
    emf: dict[str, float] = dict.fromkeys(EMF_METRICS, 0.0)
    for ev in events:
        message = ev.get("message", "").strip()
        m = _REPORT.search(message)
        if m:
            streams_active.add(ev.get("logStreamName", ""))
            invocations.append(
                {
                    "request_id": m.group("id"),
                    "at": dt.datetime.fromtimestamp(ev["timestamp"] / 1000, dt.UTC).isoformat(
                        timespec="seconds"
                    ),
                    "duration_ms": float(m.group("ms")),
                    "cold_start": m.group("init") is not None,
                    "environment": ev.get("logStreamName", ""),
                }
            )
        elif message.startswith("{") and '"_aws"' in message:
            try:
                doc = json.loads(message)
            except ValueError:
                continue
            for name in EMF_METRICS:
                value = doc.get(name)  # Powertools writes a list of values per metric
                values = value if isinstance(value, list) else [value]
                emf[name] += sum(v for v in values if isinstance(v, int | float) and not isinstance(v, bool))
    out["invocations_in_window"] = len(invocations)
    out["recent_invocations"] = invocations[-limit:]
    out["warm_workers"] = _warm_workers(deployment, streams_active)
    out["emf_metrics"] = emf
    out["metrics"] = _lambda_metrics(client_for(deployment, "cloudwatch"), deployment.function_name, window_s)
    out["window_s"] = window_s
    return out


def _log_events(logs: Any, group: str, since_ms: int, max_events: int = 5000) -> list[dict[str, Any]]:
    """The group's events since `since_ms`, oldest first, at most `max_events`; none when the group
    does not exist yet (Lambda creates it on the first invocation's log line)."""
    pages = logs.get_paginator("filter_log_events").paginate(
        logGroupName=group, startTime=since_ms, PaginationConfig={"MaxItems": max_events}
    )
    try:
        events = [event for page in pages for event in page.get("events", [])]
    except ClientError as e:
        if classify(e) is Failure.MISSING:
            return []
        raise
    return sorted(events, key=lambda e: e.get("timestamp", 0))


def _warm_workers(deployment: Deployment, recent_streams: set[str]) -> dict[str, Any]:
    """On AWS, ConcurrentExecutions (max over 5 min); LocalStack does not publish it, so there:
    execution environments (log streams) that finished an invocation in the window, which LocalStack
    keeps warm (LAMBDA_KEEPALIVE_MS, 10 min by default)."""
    if deployment.target == "aws":
        stats = _metric(
            client_for(deployment, "cloudwatch"),
            "ConcurrentExecutions",
            deployment.function_name,
            300,
            "Maximum",
        )
        return {
            "concurrent_executions_max_5min": stats,
            "source": "CloudWatch AWS/Lambda ConcurrentExecutions",
        }
    return {
        "environments_recently_used": len(recent_streams),
        "source": "log streams with a REPORT in the window",
    }


def _metric(cw: Any, name: str, function_name: str, window_s: float, stat: str) -> float | None:
    end = dt.datetime.now(dt.UTC)
    try:
        resp = cw.get_metric_statistics(
            Namespace="AWS/Lambda",
            MetricName=name,
            Dimensions=[{"Name": "FunctionName", "Value": function_name}],
            StartTime=end - dt.timedelta(seconds=window_s),
            EndTime=end,
            Period=max(60, int(window_s)),
            Statistics=[stat],
        )
    except ClientError:
        return None  # shown as n/a: the report goes on without this one metric
    points = resp.get("Datapoints", [])
    if not points:
        return 0.0
    values = [p[stat] for p in points]
    return max(values) if stat == "Maximum" else float(sum(values))


def _lambda_metrics(cw: Any, function_name: str, window_s: float) -> dict[str, float | None]:
    return {
        name: _metric(cw, name, function_name, window_s, "Sum")
        for name in ("Invocations", "Errors", "Throttles")
    }
