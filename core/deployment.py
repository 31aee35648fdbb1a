"""What a deployment leaves behind: the stack file that tells a run where its workers are.

Why in core: `sponge deploy` (infra/) writes it and a run with `--target localstack|aws` reads it, once,
at the edge (core/spark/offload_session.py). The record is plain data, so the run side needs nothing
from infra/ to read it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ConfigError, DeployError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STACK_DIR = PROJECT_ROOT / ".sponge"
TARGETS = ("localstack", "aws")
LOCALSTACK_CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}


@dataclass(frozen=True)
class Deployment:
    """A deployed stack, as `sponge run` needs it: which function, where, with which credentials."""

    target: str
    stack_name: str
    region: str
    function_name: str
    endpoint_url: str | None = None
    qualifier: str | None = None
    function_timeout_s: float = 300.0
    log_group: str = ""
    outputs: Mapping[str, str] = field(default_factory=dict)
    deployed_at: str = ""
    code_sha256: str = ""

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ConfigError(
                f"unknown deploy target {self.target!r}", hint=f"use one of {', '.join(TARGETS)}"
            )
        if not self.function_name:
            raise ConfigError(
                f"the stack file of {self.target} names no function", hint=redeploy_hint(self.target)
            )

    @classmethod
    def from_outputs(
        cls,
        target: str,
        stack_name: str,
        region: str,
        endpoint_url: str | None,
        outputs: Mapping[str, str],
        code_sha256: str = "",
    ) -> Deployment:
        missing = [k for k in ("FunctionName", "Region", "LogGroupName") if not outputs.get(k)]
        if missing:
            raise DeployError(
                f"stack {stack_name} lacks the outputs {missing}",
                hint="deploy the project's template.yaml (its Outputs name what the Spark side needs)",
            )
        return cls(
            target=target,
            stack_name=stack_name,
            region=outputs.get("Region") or region,
            function_name=outputs["FunctionName"],
            endpoint_url=endpoint_url,
            qualifier=outputs.get("FunctionAlias") or None,
            function_timeout_s=float(outputs.get("FunctionTimeout") or 300),
            log_group=outputs["LogGroupName"],
            outputs=dict(outputs),
            deployed_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            code_sha256=code_sha256,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "stack_name": self.stack_name,
            "region": self.region,
            "endpoint_url": self.endpoint_url,
            "function_name": self.function_name,
            "qualifier": self.qualifier,
            "function_timeout_s": self.function_timeout_s,
            "log_group": self.log_group,
            "outputs": dict(self.outputs),
            "deployed_at": self.deployed_at,
            "code_sha256": self.code_sha256,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Deployment:
        return cls(
            target=str(data["target"]),
            stack_name=str(data["stack_name"]),
            region=str(data["region"]),
            function_name=str(data["function_name"]),
            endpoint_url=data.get("endpoint_url") or None,
            qualifier=data.get("qualifier") or None,
            function_timeout_s=float(data.get("function_timeout_s") or 300),
            log_group=str(data.get("log_group") or ""),
            outputs=dict(data.get("outputs") or {}),
            deployed_at=str(data.get("deployed_at") or ""),
            code_sha256=str(data.get("code_sha256") or ""),
        )

    def credentials(self) -> dict[str, str]:
        """LocalStack accepts any key; AWS uses the default credential chain (nothing here)."""
        return dict(LOCALSTACK_CREDENTIALS) if self.target == "localstack" else {}

    def agent_env(self) -> dict[str, str]:
        """Environment for a process that invokes the function with boto3's default chain (the agent)."""
        if self.target != "localstack":
            return {}
        return {
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": self.region,
        }


def redeploy_hint(target: str) -> str:
    return f"run sponge deploy --target {target}"


def stack_file(target: str, stack_dir: Path | None = None) -> Path:
    return (stack_dir or STACK_DIR) / f"stack-{target}.json"


def load_deployment(target: str, stack_dir: Path | None = None) -> Deployment:
    """The deployment recorded for `target`, or a ConfigError that says how to make one."""
    if target not in TARGETS:
        raise ConfigError(f"unknown deploy target {target!r}", hint=f"use one of {', '.join(TARGETS)}")
    path = stack_file(target, stack_dir)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no deployed stack for {target} (no {path})", hint=redeploy_hint(target)) from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path}: {e}", hint=redeploy_hint(target)) from None
    try:
        return Deployment.from_json(data)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path} is not a stack file ({e})", hint=redeploy_hint(target)) from None
