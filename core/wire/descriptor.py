"""The session descriptor: the one payload a Lambda worker is invoked with.

Why a typed, strictly checked value: the descriptor crosses a process (and on AWS a service)
boundary as JSON, and a worker built from another version must fail at once with a message naming
the field, not misbehave later. The agent builds it (`to_event`), the handler parses it (`from_event`).
It imports nothing heavy, so parsing it costs nothing on a cold start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError

_REQUIRED = ("session_id", "agent_address", "secret", "worker_id")
_OPTIONAL = (
    "idle_timeout_s",
    "safety_margin_s",
    "program",
    "protocol_version",
    "compression",
    "tls_ca",
    "tls_cert",
    "tls_key",
)


@dataclass(frozen=True)
class SessionDescriptor:
    """Where to dial, how to prove who we are, and when to leave.

    `idle_timeout_s`: leave after this long without a chunk (the agent re-invokes when load returns).
    `safety_margin_s`: leave when less than this remains before the function's timeout, so the
    agent sees a clean goodbye instead of a killed stream. `program`: a program spec to compile
    before dialing, so the first chunk does not pay for it. `tls_ca`: the PEM certificate of the CA
    the agent's TLS certificate comes from (public); None, a plaintext agent (loopback runs).
    """

    session_id: str
    agent_address: str
    secret: str
    worker_id: str
    idle_timeout_s: float = 10.0
    safety_margin_s: float = 2.0
    program: Mapping[str, Any] | None = None
    protocol_version: int = 1
    compression: str = "zstd"
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def __post_init__(self) -> None:
        for name in _REQUIRED:
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(
                    f"session descriptor field {name!r} must be a non-empty string, got {value!r}"
                )
        if ":" not in self.agent_address:
            raise ConfigError(f"agent_address must be host:port, got {self.agent_address!r}")
        for name in ("idle_timeout_s", "safety_margin_s"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(
                    f"session descriptor field {name!r} must be a non-negative number, got {value!r}"
                )
            object.__setattr__(self, name, float(value))
        if self.program is not None and not isinstance(self.program, Mapping):
            raise ConfigError("session descriptor field 'program' must be a program spec object")
        if isinstance(self.protocol_version, bool) or not isinstance(self.protocol_version, int):
            raise ConfigError(f"protocol_version must be an integer, got {self.protocol_version!r}")
        if self.compression not in ("zstd", "lz4", "none"):
            raise ConfigError(f"unknown compression {self.compression!r}", hint="use zstd, lz4 or none")
        for name, marker in (
            ("tls_ca", "CERTIFICATE"),
            ("tls_cert", "CERTIFICATE"),
            ("tls_key", "PRIVATE KEY"),
        ):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or f"BEGIN {marker}" not in value):
                raise ConfigError(f"session descriptor field {name!r} must be PEM ({marker.lower()})")
        if (self.tls_cert is None) != (self.tls_key is None) or (self.tls_cert and not self.tls_ca):
            raise ConfigError("session descriptor fields 'tls_cert' and 'tls_key' go together, with 'tls_ca'")

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> SessionDescriptor:
        if not isinstance(event, Mapping):
            raise ConfigError(f"the invoke payload must be a JSON object, got {type(event).__name__}")
        unknown = set(event) - set(_REQUIRED) - set(_OPTIONAL)
        if unknown:
            raise ConfigError(
                f"unknown session descriptor fields {sorted(unknown)}",
                hint="the agent and this worker come from different builds: deploy the same version",
            )
        missing = [k for k in _REQUIRED if k not in event]
        if missing:
            raise ConfigError(f"session descriptor lacks {missing}")
        return cls(**dict(event))

    def to_event(self) -> dict[str, Any]:
        event: dict[str, Any] = {
            "session_id": self.session_id,
            "agent_address": self.agent_address,
            "secret": self.secret,
            "worker_id": self.worker_id,
            "idle_timeout_s": self.idle_timeout_s,
            "safety_margin_s": self.safety_margin_s,
            "protocol_version": self.protocol_version,
            "compression": self.compression,
        }
        if self.program is not None:
            event["program"] = dict(self.program)
        for name in ("tls_ca", "tls_cert", "tls_key"):
            if getattr(self, name) is not None:
                event[name] = getattr(self, name)
        return event
