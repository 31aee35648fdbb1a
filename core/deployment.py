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

# The CloudWatch namespace of the EMF metrics: the workers' (template.yaml sets it too) and a run's own.
METRICS_NAMESPACE = "Sponge"

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
            target=_text(data, "target"),
            stack_name=_text(data, "stack_name"),
            region=_text(data, "region"),
            function_name=_text(data, "function_name"),
            endpoint_url=data.get("endpoint_url") or None,
            qualifier=data.get("qualifier") or None,
            function_timeout_s=float(data.get("function_timeout_s") or 300),
            log_group=str(data.get("log_group") or ""),
            outputs=dict(data.get("outputs") or {}),
            deployed_at=str(data.get("deployed_at") or ""),
            code_sha256=str(data.get("code_sha256") or ""),
        )

    def provisioned_environments(self) -> int:
        """Environments the stack keeps warm by provisioned concurrency (its output; 0 when absent)."""
        return int(self.outputs.get("ProvisionedEnvironments") or 0)

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


def _text(data: Mapping[str, Any], key: str) -> str:
    """A required string field (KeyError when absent): a null or a number is not quietly made a name."""
    value = data[key]
    if not isinstance(value, str):
        raise TypeError(f"{key!r} must be a string, got {value!r}")
    return value


def redeploy_hint(target: str) -> str:
    return f"run sponge deploy --target {target}"


def stack_file(target: str, stack_dir: Path | None = None) -> Path:
    return (stack_dir or STACK_DIR) / f"stack-{target}.json"


def load_deployment(target: str, stack_dir: Path | None = None) -> Deployment:
    """The deployment recorded for `target`, or a ConfigError that names the file and says how to make one.

    Why every failure becomes one ConfigError: the file is written by `sponge deploy` and read by every
    `sponge run --target`; a truncated or hand-edited one must tell the user to deploy again (which
    rewrites it), not end in a KeyError or a JSON decoder's traceback.
    """
    if target not in TARGETS:
        raise ConfigError(f"unknown deploy target {target!r}", hint=f"use one of {', '.join(TARGETS)}")
    path = stack_file(target, stack_dir)
    hint = redeploy_hint(target)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no deployed stack for {target} (no {path})", hint=hint) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the stack file {path}: {e}", hint=hint) from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConfigError(
            f"the stack file {path} is not valid JSON, truncated or edited? ({e})", hint=hint
        ) from None
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"the stack file {path} holds a JSON {type(data).__name__}, not an object", hint=hint
        )
    if data.get("target", target) != target:
        raise ConfigError(
            f"the stack file {path} records a deployment to {data['target']!r}, not {target}", hint=hint
        )
    try:
        return Deployment.from_json(data)
    except KeyError as e:
        raise ConfigError(f"the stack file {path} lacks the field {e}", hint=hint) from None
    except (TypeError, ValueError, ConfigError) as e:
        detail = e.message if isinstance(e, ConfigError) else str(e)
        raise ConfigError(f"the stack file {path} is not a deployment record ({detail})", hint=hint) from None
