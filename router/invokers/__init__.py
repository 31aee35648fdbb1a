"""The Lambda fleets the VM agent can invoke, behind one contract (`base.Invoker`), chosen by name.

`make_invoker` is the one place that maps a name to a backend; it is called once, where the agent is
configured. Backends are imported lazily so that the embedded fleet never loads boto3.
"""

from __future__ import annotations

from typing import Any

from core.errors import ConfigError
from router.invokers.base import Invoker

INVOKERS = ("embedded", "boto3")


def make_invoker(name: str, **options: Any) -> Invoker:
    """The backend called `name`, built from keyword options of its config class."""
    if name == "embedded":
        from router.invokers.embedded import EmbeddedFleet, EmbeddedFleetConfig

        return EmbeddedFleet(EmbeddedFleetConfig(**options))
    if name == "boto3":
        from router.invokers.lambda_api import Boto3Invoker, Boto3InvokerConfig

        return Boto3Invoker(Boto3InvokerConfig(**options))
    raise ConfigError(f"unknown invoker {name!r}", hint=f"choose one of {', '.join(INVOKERS)}")
