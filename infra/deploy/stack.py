"""The CloudFormation stack: create or update it from template.yaml, wait for it, delete it.

`deploy` packages and uploads the code (infra/deploy/code_package.py) into an artifact bucket of the
account, creates or updates the stack with the capabilities the SAM transform needs, waits for it to
settle and writes the stack file (core/deployment.py); `destroy` empties the staging bucket and
deletes the stack. DeployConfig checks everything it can before the first AWS call.

The waits are boto3's own CloudFormation waiters, polled every WAIT_DELAY_S instead of their 30 s
default (LocalStack settles a stack in seconds); what went wrong is read from the error's code
(infra/deploy/aws_errors.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from botocore.exceptions import ClientError, WaiterError

from core.atomic_write import write_text
from core.deployment import PROJECT_ROOT, STACK_DIR, TARGETS, Deployment, stack_file
from core.errors import ConfigError, DeployError
from infra.deploy.aws_errors import Failure, classify, error_text
from infra.deploy.clients import aws_client, client_for
from infra.deploy.code_package import package_code, rewrite_code_uri

TEMPLATE = PROJECT_ROOT / "template.yaml"
DEFAULT_STACK = "sponge"
LOCALSTACK_REGION = "us-east-1"
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
# S3's rules for a new bucket's name (without the rarely wanted dots, which break virtual-hosted HTTPS).
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
WAIT_DELAY_S = 1.0  # between two describe_stacks of a wait

Progress = Callable[[str], None]
Action = Literal["create", "update", "delete"]  # a stack change, named as boto3's waiters name them


def _quiet(_: str) -> None:
    pass


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
    artifact_bucket: str | None = None  # None: sponge-artifacts-<account>-<region>

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
        if self.artifact_bucket is not None and not _BUCKET_NAME.match(self.artifact_bucket):
            raise ConfigError(
                f"bad artifact bucket name {self.artifact_bucket!r}",
                hint="3 to 63 lowercase letters, digits and hyphens; a letter or digit at each end",
            )
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


def artifact_bucket_name(config: DeployConfig, region: str, sts: Any) -> str:
    """--artifact-bucket, or the account's own default: sponge-artifacts-<account>-<region>."""
    if config.artifact_bucket:
        return config.artifact_bucket
    account = sts.get_caller_identity()["Account"]
    return f"sponge-artifacts-{account}-{region}"


def ensure_artifact_bucket(s3: Any, name: str, region: str, progress: Progress = _quiet) -> None:
    """Create the bucket when it is missing, and only then.

    Bucket names are global: a 403 means the name is taken by another account (or these credentials
    may not read it), and uploading the code there would fail or hand it to a stranger, so that stops
    the deploy with a way out instead of a create.
    """
    try:
        s3.head_bucket(Bucket=name)
        return
    except ClientError as e:
        failure = classify(e)
        if failure is Failure.NOT_YOURS:
            raise _bucket_not_yours(name) from None
        if failure is not Failure.MISSING:
            raise DeployError(f"cannot check the artifact bucket {name}: {error_text(e)}") from e
    kwargs: dict[str, Any] = {"Bucket": name}
    if region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        s3.create_bucket(**kwargs)
    except ClientError as e:
        if classify(e) is Failure.NOT_YOURS:  # BucketAlreadyExists: another account took it since the check
            raise _bucket_not_yours(name) from None
        raise
    s3.put_public_access_block(
        Bucket=name,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    progress(f"created the artifact bucket s3://{name}")


def _bucket_not_yours(name: str) -> ConfigError:
    return ConfigError(
        f"the artifact bucket {name} exists but is not accessible to these credentials "
        "(it belongs to another account, or a policy denies s3:ListBucket on it)",
        hint="pass --artifact-bucket with a name of your own (it is created if missing), "
        "or use credentials of the account that owns the bucket",
    )


def deploy(config: DeployConfig, progress: Progress = _quiet) -> Deployment:
    """Package, upload, create or update the stack, wait, and write the stack file."""
    region = _region(config)
    cfn, s3, sts = (
        aws_client(s, config.target, region, config.endpoint_url) for s in ("cloudformation", "s3", "sts")
    )
    zipped, digest = package_code(config.code_dir)
    progress(f"packaged the worker code: {len(zipped) / 1e6:.1f} MB, sha256 {digest[:12]}")
    bucket = artifact_bucket_name(config, region, sts)
    ensure_artifact_bucket(s3, bucket, region, progress)
    key = f"{config.stack_name}/worker-{digest[:20]}.zip"
    s3.put_object(Bucket=bucket, Key=key, Body=zipped)
    progress(f"uploaded s3://{bucket}/{key}")
    body = rewrite_code_uri(config.template.read_text(), f"s3://{bucket}/{key}")
    template_key = f"{config.stack_name}/template-{hashlib.sha256(body.encode()).hexdigest()[:20]}.yaml"
    s3.put_object(Bucket=bucket, Key=template_key, Body=body.encode())
    template_url = _object_url(s3, bucket, template_key)
    params = [{"ParameterKey": k, "ParameterValue": v} for k, v in config.parameter_overrides().items()]
    status = status_of(cfn, config.stack_name)
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
        except ClientError as e:
            if classify(e) is not Failure.NO_CHANGES:
                raise DeployError(f"update of stack {config.stack_name} refused: {error_text(e)}") from None
            progress("no changes")
        else:
            _wait(cfn, config.stack_name, "update", config.timeout_s, since=started)
    outputs = outputs_of(cfn, config.stack_name)
    deployment = Deployment.from_outputs(
        config.target, config.stack_name, region, config.endpoint_url, outputs, code_sha256=digest
    )
    path = stack_file(config.target, config.stack_dir)
    # Atomically: a deploy cut short leaves the previous record whole, never a torn file for runs to read.
    write_text(path, json.dumps(deployment.to_json(), indent=2) + "\n")
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


def status_of(cfn: Any, name: str) -> str | None:
    """The stack's StackStatus, or None when there is no such stack."""
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as e:
        if classify(e) is Failure.MISSING:
            return None
        raise
    return stacks[0]["StackStatus"] if stacks else None


def _wait(cfn: Any, name: str, action: Action, timeout_s: float, since: float | None = None) -> None:
    """Wait for the stack to settle (boto3's stack_<action>_complete waiter); a failure raises
    DeployError naming the first failed resource, running out of time one saying so."""
    attempts = max(1, math.ceil(timeout_s / WAIT_DELAY_S))
    try:
        cfn.get_waiter(f"stack_{action}_complete").wait(
            StackName=name, WaiterConfig={"Delay": WAIT_DELAY_S, "MaxAttempts": attempts}
        )
    except WaiterError as e:
        last = e.last_response or {}
        if "Error" in last:  # the describe itself failed (a create or update whose stack is gone)
            raise DeployError(f"stack {name}: {action} stopped: {error_text(last)}") from None
        stacks = last.get("Stacks") or [{}]
        status = stacks[0].get("StackStatus", "unknown")
        if status.endswith("_IN_PROGRESS"):
            raise DeployError(
                f"stack {name}: {action} did not finish within {timeout_s:g} s (still {status})"
            ) from None
        raise DeployError(
            f"stack {name}: {action} ended in {status}: {_first_failure(cfn, name, since)}",
            hint=f"see the stack events (aws cloudformation describe-stack-events --stack-name {name})",
        ) from None


def _first_failure(cfn: Any, name: str, since: float | None) -> str:
    """The earliest *_FAILED event since `since` (events come newest first, so paging stops there)."""
    cutoff = -math.inf if since is None else since - 5  # 5 s of slack between our clock and AWS's
    failed: list[dict[str, Any]] = []
    try:
        for page in cfn.get_paginator("describe_stack_events").paginate(StackName=name):
            events = page.get("StackEvents", [])
            failed += [
                e
                for e in events
                if e.get("ResourceStatus", "").endswith("FAILED") and e["Timestamp"].timestamp() >= cutoff
            ]
            if events and events[-1]["Timestamp"].timestamp() < cutoff:
                break
    except ClientError as e:
        return f"no stack events ({error_text(e)})"
    if not failed:
        return "no failed resource reported"
    first = min(failed, key=lambda e: e["Timestamp"])
    return (
        f"{first.get('LogicalResourceId')} ({first.get('ResourceType')}): {first.get('ResourceStatusReason')}"
    )


def outputs_of(cfn: Any, name: str) -> dict[str, str]:
    """The stack's Outputs as OutputKey -> OutputValue."""
    stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    return {o["OutputKey"]: str(o.get("OutputValue", "")) for o in stack.get("Outputs", [])}


# ---- destroy ---------------------------------------------------------------------------------------


def destroy(deployment: Deployment, stack_dir: Path | None = None, progress: Progress = _quiet) -> None:
    """Empty the staging bucket (CloudFormation cannot delete a bucket with objects), delete the stack."""
    cfn, s3 = client_for(deployment, "cloudformation"), client_for(deployment, "s3")
    bucket = deployment.outputs.get("StagingBucket")
    if bucket:
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        except ClientError as e:
            if classify(e) is not Failure.MISSING:
                raise
    progress(f"deleting stack {deployment.stack_name} ...")
    if status_of(cfn, deployment.stack_name) is not None:
        cfn.delete_stack(StackName=deployment.stack_name)
        _wait(cfn, deployment.stack_name, "delete", 900.0)
    stack_file(deployment.target, stack_dir).unlink(missing_ok=True)
    progress(f"stack {deployment.stack_name} deleted")
