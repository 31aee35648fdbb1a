"""Deploy template.yaml through CloudFormation, remember its outputs, tear it down, report on it.

    sponge deploy --target localstack|aws [--stack NAME]   ->  .sponge/stack-<target>.json
    sponge destroy --target ...          sponge status --target ...

Why our own few steps instead of `sam deploy`: the SAM CLI is not a dependency of the project (and
needs Docker for builds); what `sam deploy` does for this template is three calls, made here with
boto3 (DESIGN.md section 3): zip the code, upload it to an artifact bucket under a content hash and
point CodeUri at it (what `aws cloudformation package` does), then create or update the stack with
CAPABILITY_IAM, CAPABILITY_NAMED_IAM and CAPABILITY_AUTO_EXPAND (the SAM transform) and wait.

The stack file is the one place `sponge run --target localstack|aws` learns where its workers are:
it is read once, at the edge (core/spark/offload_session.py), into a `Deployment`.

The code package: by default the project's sources (lambda_worker, router with its generated gRPC
modules, core), without third-party wheels. That is what LocalStack's host executor runs (with an
interpreter that has the dependencies, docs/localstack.md) and what a Docker LocalStack or AWS runs
on top of a layer or image with them; `--code-dir` deploys a prepared directory instead (for AWS, the
sources plus the dependencies built for the function's architecture, or pass WorkerImageUri).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import platform
import re
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.deployment import (
    LOCALSTACK_CREDENTIALS,
    PROJECT_ROOT,
    STACK_DIR,
    TARGETS,
    Deployment,
    stack_file,
)
from core.errors import ConfigError, DeployError

TEMPLATE = PROJECT_ROOT / "template.yaml"
DEFAULT_STACK = "sponge"
CODE_PACKAGES = ("lambda_worker", "merge", "core")
LOCALSTACK_REGION = "us-east-1"
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
_CODE_URI = re.compile(r"^(?P<indent>\s*)CodeUri:\s*(?P<value>[^\s#]+)\s*(?P<comment>#.*)?$", re.MULTILINE)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same zip and hash
DONE_STATES = {"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE"}

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def aws_client(service: str, target: str, region: str, endpoint_url: str | None) -> Any:
    """A boto3 client for the target: LocalStack's endpoint and test credentials, or AWS's defaults."""
    import boto3

    creds = dict(LOCALSTACK_CREDENTIALS) if target == "localstack" else {}
    return boto3.session.Session(region_name=region, **creds).client(service, endpoint_url=endpoint_url)


def client_for(deployment: Deployment, service: str) -> Any:
    """A boto3 client for the deployment's region and endpoint."""
    return aws_client(service, deployment.target, deployment.region, deployment.endpoint_url)


# ---- deploy ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeployConfig:
    """One `sponge deploy`: validated at construction, so a typo fails before any AWS call."""

    target: str
    stack_name: str = DEFAULT_STACK
    region: str | None = None
    endpoint_url: str | None = None
    template: Path = TEMPLATE
    stack_dir: Path = STACK_DIR
    parameters: tuple[tuple[str, str], ...] = ()
    code_dir: Path | None = None
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ConfigError(
                f"unknown deploy target {self.target!r}", hint=f"use --target {' or '.join(TARGETS)}"
            )
        if not _STACK_NAME.match(self.stack_name):
            raise ConfigError(
                f"bad stack name {self.stack_name!r}",
                hint="start with a letter; letters, digits and hyphens only, at most 128",
            )
        if not self.template.is_file():
            raise ConfigError(f"no template at {self.template}", hint="run from the project (template.yaml)")
        if self.code_dir is not None and not self.code_dir.is_dir():
            raise ConfigError(f"--code-dir {self.code_dir} is not a directory")
        if self.target == "localstack" and not self.endpoint_url:
            raise ConfigError(
                "no LocalStack endpoint", hint="start LocalStack with make localstack, or pass --endpoint-url"
            )

    @classmethod
    def for_target(cls, target: str, *, endpoint_url: str | None = None, **kwargs: Any) -> DeployConfig:
        """Fill in what the target implies: LocalStack's endpoint (the running instance) and region."""
        if target == "localstack":
            endpoint_url = endpoint_url or localstack_endpoint()
            kwargs["region"] = kwargs.get("region") or LOCALSTACK_REGION
        return cls(target=target, endpoint_url=endpoint_url, **kwargs)

    def parameter_overrides(self) -> dict[str, str]:
        """Template parameters: the target's defaults, then --parameter values."""
        params: dict[str, str] = {}
        if self.target == "localstack":
            # The host executor ignores it, but a Docker LocalStack runs the image of this architecture.
            params["Architecture"] = (
                "arm64" if platform.machine().lower() in ("arm64", "aarch64") else "x86_64"
            )
        params.update(dict(self.parameters))
        return params


def localstack_endpoint() -> str:
    """The endpoint of the LocalStack started by `make localstack` (its state file), or a ConfigError."""
    from infra.localstack.launcher import LocalStackConfig, health, running

    handle = running(LocalStackConfig.from_env())
    if handle is None or health(handle.endpoint) is None:
        raise ConfigError(
            "LocalStack is not running", hint="start it with make localstack, or pass --endpoint-url"
        )
    return handle.endpoint


def parse_parameters(texts: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE pairs of --parameter, checked for shape (CloudFormation checks the names)."""
    out: list[tuple[str, str]] = []
    for text in texts:
        key, eq, value = text.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z0-9]+", key.strip()):
            raise ConfigError(
                f"--parameter {text!r} is not KEY=VALUE", hint="e.g. --parameter WorkerTimeout=120"
            )
        out.append((key.strip(), value.strip()))
    return tuple(out)


def _code_files(code_dir: Path | None) -> Iterator[tuple[Path, str]]:
    if code_dir is not None:
        for path in sorted(code_dir.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path, path.relative_to(code_dir).as_posix()
        return
    for package in CODE_PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*")):
            if (
                path.is_file()
                and "__pycache__" not in path.parts
                and path.suffix in (".py", ".pyi", ".properties")
            ):
                yield path, path.relative_to(PROJECT_ROOT).as_posix()


def package_code(code_dir: Path | None = None) -> tuple[bytes, str]:
    """The deployment zip (deterministic: fixed timestamps, sorted) and its sha256."""
    if code_dir is None and not (PROJECT_ROOT / "core" / "wire" / "_generated" / "agent_pb2.py").exists():
        raise ConfigError(
            "the generated gRPC modules are missing", hint="run make setup (core.wire.build_proto)"
        )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, name in _code_files(code_dir):
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def rewrite_code_uri(template: str, s3_uri: str) -> str:
    """`CodeUri: <local path>` lines pointed at `s3_uri` (s3:// values are left alone).

    A line-level rewrite, not a YAML round trip: the template's short-form intrinsics (!Sub, !If ...)
    need a CloudFormation-aware loader, and the rest of the template must reach CloudFormation as
    written.
    """

    def sub(m: re.Match[str]) -> str:
        if m.group("value").startswith("s3://"):
            return m.group(0)
        return f"{m.group('indent')}CodeUri: {s3_uri}"

    out, n = _CODE_URI.subn(sub, template)
    if n == 0:
        raise DeployError("template.yaml has no CodeUri to point at the uploaded code")
    return out


def _artifact_bucket(deployment_region: str, s3: Any, sts: Any) -> str:
    account = sts.get_caller_identity()["Account"]
    name = f"sponge-artifacts-{account}-{deployment_region}"
    try:
        s3.head_bucket(Bucket=name)
    except Exception:
        kwargs: dict[str, Any] = {"Bucket": name}
        if deployment_region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": deployment_region}
        s3.create_bucket(**kwargs)
        s3.put_public_access_block(
            Bucket=name,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        )
    return name


def deploy(config: DeployConfig, progress: Progress = _quiet) -> Deployment:
    """Package, upload, create or update the stack, wait, and write the stack file."""
    region = _region(config)
    cfn, s3, sts = (
        aws_client(s, config.target, region, config.endpoint_url) for s in ("cloudformation", "s3", "sts")
    )
    zipped, digest = package_code(config.code_dir)
    progress(f"packaged the worker code: {len(zipped) / 1e6:.1f} MB, sha256 {digest[:12]}")
    bucket = _artifact_bucket(region, s3, sts)
    key = f"{config.stack_name}/worker-{digest[:20]}.zip"
    s3.put_object(Bucket=bucket, Key=key, Body=zipped)
    progress(f"uploaded s3://{bucket}/{key}")
    body = rewrite_code_uri(config.template.read_text(), f"s3://{bucket}/{key}")
    template_key = f"{config.stack_name}/template-{hashlib.sha256(body.encode()).hexdigest()[:20]}.yaml"
    s3.put_object(Bucket=bucket, Key=template_key, Body=body.encode())
    template_url = _object_url(s3, bucket, template_key)
    params = [{"ParameterKey": k, "ParameterValue": v} for k, v in config.parameter_overrides().items()]
    status = _stack_status(cfn, config.stack_name)
    if status in ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED", "CREATE_FAILED"):
        progress(f"stack {config.stack_name} is {status} from a failed create: deleting it first")
        cfn.delete_stack(StackName=config.stack_name)
        _wait(cfn, config.stack_name, "delete", config.timeout_s)
        status = None
    started = time.time()
    if status is None:
        progress(f"creating stack {config.stack_name} in {region} ...")
        cfn.create_stack(
            StackName=config.stack_name,
            TemplateURL=template_url,
            Parameters=params,
            Capabilities=CAPABILITIES,
            Tags=[{"Key": "sponge:stack", "Value": config.stack_name}],
        )
        _wait(cfn, config.stack_name, "create", config.timeout_s, since=started)
    else:
        progress(f"updating stack {config.stack_name} ({status}) ...")
        try:
            cfn.update_stack(
                StackName=config.stack_name,
                TemplateURL=template_url,
                Parameters=params,
                Capabilities=CAPABILITIES,
            )
        except Exception as e:
            if "No updates are to be performed" not in str(e):
                raise DeployError(f"update of stack {config.stack_name} refused: {e}") from None
            progress("no changes")
        else:
            _wait(cfn, config.stack_name, "update", config.timeout_s, since=started)
    outputs = _outputs(cfn, config.stack_name)
    deployment = Deployment.from_outputs(
        config.target, config.stack_name, region, config.endpoint_url, outputs, code_sha256=digest
    )
    path = stack_file(config.target, config.stack_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(deployment.to_json(), indent=2) + "\n")
    progress(f"stack {config.stack_name} deployed in {time.time() - started:.1f} s; outputs in {path}")
    return deployment


def _region(config: DeployConfig) -> str:
    if config.region:
        return config.region
    import boto3

    region = boto3.session.Session().region_name
    if not region:
        raise ConfigError("no AWS region", hint="pass --region or set AWS_REGION")
    return region


def _object_url(s3: Any, bucket: str, key: str) -> str:
    endpoint = s3.meta.endpoint_url.rstrip("/")
    if "amazonaws.com" in endpoint:
        region = s3.meta.region_name
        host = "s3.amazonaws.com" if region == "us-east-1" else f"s3.{region}.amazonaws.com"
        return f"https://{bucket}.{host}/{key}"
    return f"{endpoint}/{bucket}/{key}"  # LocalStack: path style


def _stack_status(cfn: Any, name: str) -> str | None:
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except Exception as e:
        if "does not exist" in str(e):
            return None
        raise
    return stacks[0]["StackStatus"] if stacks else None


def _wait(cfn: Any, name: str, action: str, timeout_s: float, since: float | None = None) -> None:
    """Poll until the stack settles; a failure raises DeployError naming the first failed resource."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = _stack_status(cfn, name)
        if status is None and action == "delete":
            return
        if status == "DELETE_COMPLETE" and action == "delete":
            return
        if status is not None and not status.endswith("_IN_PROGRESS"):
            if (action == "create" and status == "CREATE_COMPLETE") or (
                action == "update" and status == "UPDATE_COMPLETE"
            ):
                return
            raise DeployError(
                f"stack {name}: {action} ended in {status}: {_first_failure(cfn, name, since)}",
                hint=f"see the stack events (aws cloudformation describe-stack-events --stack-name {name})",
            )
        time.sleep(1.0)
    raise DeployError(f"stack {name}: {action} did not finish within {timeout_s:.0f} s")


def _first_failure(cfn: Any, name: str, since: float | None) -> str:
    try:
        events = cfn.describe_stack_events(StackName=name)["StackEvents"]
    except Exception:
        return "no stack events"
    failed = [
        e
        for e in events
        if e.get("ResourceStatus", "").endswith("FAILED")
        and (since is None or e["Timestamp"].timestamp() >= since - 5)
    ]
    if not failed:
        return "no failed resource reported"
    first = min(failed, key=lambda e: e["Timestamp"])
    return (
        f"{first.get('LogicalResourceId')} ({first.get('ResourceType')}): {first.get('ResourceStatusReason')}"
    )


def _outputs(cfn: Any, name: str) -> dict[str, str]:
    stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    return {o["OutputKey"]: str(o.get("OutputValue", "")) for o in stack.get("Outputs", [])}


# ---- destroy ---------------------------------------------------------------------------------------


def destroy(deployment: Deployment, stack_dir: Path | None = None, progress: Progress = _quiet) -> None:
    """Empty the staging bucket (CloudFormation cannot delete a bucket with objects), delete the stack."""
    cfn, s3 = client_for(deployment, "cloudformation"), deployment.client("s3")
    bucket = deployment.outputs.get("StagingBucket")
    if bucket:
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        except Exception as e:
            if "NoSuchBucket" not in str(e):
                raise
    progress(f"deleting stack {deployment.stack_name} ...")
    if _stack_status(cfn, deployment.stack_name) is not None:
        cfn.delete_stack(StackName=deployment.stack_name)
        _wait(cfn, deployment.stack_name, "delete", 900.0)
    stack_file(deployment.target, stack_dir).unlink(missing_ok=True)
    progress(f"stack {deployment.stack_name} deleted")


# ---- status ----------------------------------------------------------------------------------------

_REPORT = re.compile(
    r"REPORT RequestId: (?P<id>\S+)\s+Duration: (?P<ms>[\d.]+) ms"
    r".*?(?:Init Duration: (?P<init>[\d.]+) ms)?\s*$"
)
EMF_METRICS = ("ColdStarts", "WarmStarts", "Chunks", "ChunkFailures", "RowsIn")


def status(deployment: Deployment, window_s: float = 900.0, limit: int = 10) -> dict[str, Any]:
    """The stack, the function, warm workers and recent invocations (see `sponge status --help`)."""
    out: dict[str, Any] = {"target": deployment.target, "stack": deployment.stack_name}
    cfn = client_for(deployment, "cloudformation")
    stack_status = _stack_status(cfn, deployment.stack_name)
    out["stack_status"] = stack_status or "DOES_NOT_EXIST"
    if stack_status is None:
        return out
    out["outputs"] = _outputs(cfn, deployment.stack_name)
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
    events: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"logGroupName": group, "startTime": since_ms}
    try:
        while len(events) < max_events:
            page = logs.filter_log_events(**kwargs)
            events.extend(page.get("events", []))
            token = page.get("nextToken")
            if not token or token == kwargs.get("nextToken"):
                break
            kwargs["nextToken"] = token
    except Exception as e:
        if "ResourceNotFound" in type(e).__name__ or "ResourceNotFound" in str(e):
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
    except Exception:
        return None
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
