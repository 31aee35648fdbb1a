"""The CloudFormation stack: create or update it from template.yaml, wait for it, delete it.

`deploy` packages and uploads the code (infra/deploy/code_package.py) into an artifact bucket of the
account, creates or updates the stack with the capabilities the SAM transform needs, waits for it to
settle and writes the stack file (core/deployment.py); `destroy` empties the staging bucket and
deletes the stack. DeployConfig checks everything it can before the first AWS call.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.deployment import PROJECT_ROOT, STACK_DIR, TARGETS, Deployment, stack_file
from core.errors import ConfigError, DeployError
from infra.deploy.clients import aws_client, client_for
from infra.deploy.code_package import package_code, rewrite_code_uri

TEMPLATE = PROJECT_ROOT / "template.yaml"
DEFAULT_STACK = "sponge"
LOCALSTACK_REGION = "us-east-1"
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")

Progress = Callable[[str], None]


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
        except Exception as e:
            if "No updates are to be performed" not in str(e):
                raise DeployError(f"update of stack {config.stack_name} refused: {e}") from None
            progress("no changes")
        else:
            _wait(cfn, config.stack_name, "update", config.timeout_s, since=started)
    outputs = outputs_of(cfn, config.stack_name)
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


def status_of(cfn: Any, name: str) -> str | None:
    """The stack's StackStatus, or None when there is no such stack."""
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
        status = status_of(cfn, name)
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
        except Exception as e:
            if "NoSuchBucket" not in str(e):
                raise
    progress(f"deleting stack {deployment.stack_name} ...")
    if status_of(cfn, deployment.stack_name) is not None:
        cfn.delete_stack(StackName=deployment.stack_name)
        _wait(cfn, deployment.stack_name, "delete", 900.0)
    stack_file(deployment.target, stack_dir).unlink(missing_ok=True)
    progress(f"stack {deployment.stack_name} deleted")
