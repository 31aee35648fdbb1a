"""The agent's configuration, validated once, before anything binds a port or starts a worker.

Why a module of its own: the command line (cli.py) and every in-process user of the agent (tests,
router/measure.py, the benches) build an `AgentConfig` without needing the server's machinery.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ConfigError
from core.fault_spec import FaultSpec
from core.wire.build import build_id
from router.agent.warm_pool import WarmPoolConfig
from router.dispatcher import DispatchConfig
from router.faults import check_agent_faults
from router.fleet import FleetConfig

MIN_SECRET_BYTES = 16


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent needs, validated once.

    `advertise_address` is what workers dial (the VM's address in the Lambda's VPC); it defaults to
    host:port. `hello_timeout_s`: a connection that does not introduce itself by then is closed.
    `faults`: what the agent injects (kill-worker, throttle, slow-worker only); `fault_seed` seeds the
    share-based ones, so a drill repeats its sequence of decisions. `build`: the digest of the worker
    sources this agent was started from; a worker of another build is refused. `warm_pool`: the
    environments warmed at start-up and kept warm while idle (router/agent/warm_pool.py).
    """

    secret: bytes = field(repr=False)  # never in a log line or an error that prints the config
    host: str = "127.0.0.1"
    port: int = 0
    advertise_address: str | None = None
    session_id: str = field(default_factory=lambda: "s" + secrets.token_hex(8))
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    warm_pool: WarmPoolConfig = field(default_factory=WarmPoolConfig)
    result_cache_bytes: int = 256 * 1024 * 1024
    hello_timeout_s: float = 5.0
    tick_s: float = 0.05
    grpc_threads: int = 64
    compression: str = "zstd"
    faults: tuple[FaultSpec, ...] = ()
    fault_seed: int = 1
    handoff_dir: Path | None = None  # where keyed stages' stashed records and group states live (ADR 0024)
    tls_dir: Path | None = (
        None  # serve TLS with the certificate there (core/wire/run_pki.py); None: plaintext
    )
    sink_dir: Path | None = None  # the only directory chunk files go to (core/direct_sink.py); None: none
    build: str = field(default_factory=build_id)  # the sources a worker must run (core/wire/build.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", check_agent_faults(self.faults))
        if not isinstance(self.secret, bytes) or len(self.secret) < MIN_SECRET_BYTES:
            raise ConfigError(
                f"the session secret must be at least {MIN_SECRET_BYTES} bytes",
                hint="write e.g. the output of `python -c 'import secrets; print(secrets.token_hex(32))'`",
            )
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        if self.grpc_threads < 4:
            raise ConfigError(f"grpc_threads must be >= 4, got {self.grpc_threads}")
        if self.compression not in ("zstd", "lz4", "none"):
            raise ConfigError(f"unknown compression {self.compression!r}", hint="use zstd, lz4 or none")

    @staticmethod
    def read_secret(path: str | Path) -> bytes:
        try:
            text = Path(path).read_text().strip()
        except OSError as e:
            raise ConfigError(f"cannot read the secret file {path}: {e.strerror}") from None
        return text.encode()
