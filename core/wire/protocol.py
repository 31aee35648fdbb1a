"""What both ends of the agent protocol share: generated modules, channel options, worker tokens, TLS.

Why the generated modules are imported lazily through `pb()`: they exist only after `make setup`
ran core/wire/build_proto.py, and a missing or stale copy must fail with one line that says so, not an
ImportError deep inside a worker. The Lambda worker imports this module on first use only, so its
cold start pays for grpc and protobuf when it really dials out.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from core.errors import MissingDependencyError

PROTOCOL_VERSION = 1
"""Bumped on any change to agent.proto that old peers cannot read; the agent rejects other versions."""

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest chunk or result a channel carries (gRPC's default is 4 MiB)."""

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Keepalive: a Lambda frozen or killed mid-session must not leave a half-open stream behind.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.so_reuseport", 0),
]

SECRET_METADATA = "x-sponge-secret"
"""gRPC metadata key by which VM-side callers (Spark tasks) present the session secret."""

ERROR_TYPE_METADATA = "x-sponge-error-type"
"""Trailing metadata key by which the agent names the class of a failed call (e.g. the program's own
exception class), so the caller's error keeps it; what the caller does next is decided by the status code."""


def pb() -> tuple[ModuleType, ModuleType]:
    """(agent_pb2, agent_pb2_grpc), generated from core/wire/agent.proto."""
    try:
        from core.wire._generated import agent_pb2, agent_pb2_grpc
    except ImportError as e:
        raise MissingDependencyError(
            f"the gRPC code for core/wire/agent.proto is missing ({e})",
            hint="run make setup (it runs python -m core.wire.build_proto)",
        ) from None
    return agent_pb2, agent_pb2_grpc


def grpc_module() -> ModuleType:
    try:
        import grpc
    except ImportError:
        raise MissingDependencyError("grpcio is not installed", hint="run make setup") from None
    return grpc


def worker_token(session_secret: bytes, session_id: str, worker_id: str) -> str:
    """The secret a worker presents in its Hello: an HMAC of its identity under the session secret.

    Why derived per worker: the invoke payload (which AWS may log) then carries a token good for one
    worker of one session only, and the session secret itself never leaves the VM.
    """
    msg = f"{session_id}/{worker_id}".encode()
    return hmac.new(session_secret, msg, hashlib.sha256).hexdigest()


def token_matches(session_secret: bytes, session_id: str, worker_id: str, presented: str) -> bool:
    """Constant-time check of a presented worker token."""
    expected = worker_token(session_secret, session_id, worker_id)
    return hmac.compare_digest(expected.encode(), presented.encode())


def secret_matches(session_secret: bytes, presented: str | bytes) -> bool:
    """Constant-time check of the session secret presented by a VM-side caller."""
    raw = presented.encode() if isinstance(presented, str) else presented
    return hmac.compare_digest(session_secret, raw)


CA_FILE = "ca.pem"
"""Beside a run's secret file: the certificate authority its agent's TLS certificate comes from
(core/wire/run_pki.py). Its presence is what makes the run's callers speak TLS."""
CLIENT_CERT_FILE, CLIENT_KEY_FILE = "client.pem", "client.key"
"""Beside it too, with mutual TLS: the certificate the VM-side callers present."""


@dataclass(frozen=True)
class ChannelTls:
    """What a TLS channel to the agent trusts (`ca_pem`) and, with mutual TLS, presents."""

    ca_pem: bytes
    cert_pem: bytes | None = None
    key_pem: bytes | None = None

    @classmethod
    def read(cls, directory: Path) -> ChannelTls | None:
        """The TLS files of a run's credentials directory; None when there are none (plaintext)."""
        ca, cert, key = (directory / n for n in (CA_FILE, CLIENT_CERT_FILE, CLIENT_KEY_FILE))
        if not ca.is_file():
            return None
        mutual = cert.is_file() and key.is_file()
        return cls(
            ca.read_bytes(), cert.read_bytes() if mutual else None, key.read_bytes() if mutual else None
        )


def read_credentials(secret_file: str | Path) -> tuple[bytes, ChannelTls | None]:
    """A VM-side caller's credentials: the session secret, and the TLS to use (None: plaintext)."""
    path = Path(secret_file)
    return path.read_text().strip().encode(), ChannelTls.read(path.parent)


def open_channel(address: str, options: list[tuple[str, Any]], tls: ChannelTls | None) -> Any:
    """A channel to the agent: TLS trusting only `tls.ca_pem` (and presenting its certificate, if it
    has one) when given; plaintext otherwise."""
    grpc = grpc_module()
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.ca_pem, private_key=tls.key_pem, certificate_chain=tls.cert_pem
    )
    return grpc.secure_channel(address, credentials, options=options)
