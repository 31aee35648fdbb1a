"""The VM agent as the runtime starts it in local mode: a separate OS process on a fixed port.

Why a process and a fixed port: in production the agent is a daemon beside the Spark executor and
outlives queries and tasks; here it is started per run, and Spark tasks reach it at an address
fixed for the whole run, so an agent restart (an injected fault, or a real crash) only makes tasks
wait and retry, never look elsewhere. Counters live in the agent; the runner samples them, so the
counts of an agent that was killed are kept up to its last sample.
"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from core.errors import ConfigError, SpongeError
from core.fault_spec import FaultSpec
from router.invokers.lambda_api import INVOCATION_TYPES
from router.stats import WORKERS_PREWARMED

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def write_secret(path: Path) -> Path:
    """A fresh per-session secret, readable by this user only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def _pin(cpus: frozenset[int] | None) -> Any:
    """preexec_fn that pins the child to `cpus` (inherited by the workers it forks), or None."""
    if not cpus:
        return None
    chosen = sorted(cpus)
    return lambda: os.sched_setaffinity(0, chosen)


def check_invocation_type(invocation_type: str) -> None:
    """A ConfigError unless `invocation_type` is one the boto3 invoker makes (Event, RequestResponse)."""
    if invocation_type not in INVOCATION_TYPES:
        raise ConfigError(
            f"unknown Lambda invocation type {invocation_type!r}", hint=f"use {' or '.join(INVOCATION_TYPES)}"
        )


@dataclass(frozen=True)
class LambdaFunction:
    """The deployed function a boto3 agent invokes (core.deployment.Deployment, reduced to what it needs).

    `env`: extra environment of the agent process, e.g. LocalStack's test credentials, so the
    invoker uses boto3's default chain everywhere and never sees a key on its command line.
    `invocation_type`: "Event" (the default: Lambda answers 202 at once and queues an invocation it
    cannot run yet) or "RequestResponse" (the invoke is held for the worker's whole session, and a
    reached concurrency limit is an immediate 429, which the fleet counts as a throttle and backs
    off from).
    """

    name: str
    region: str
    qualifier: str | None = None
    endpoint_url: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    invocation_type: str = "Event"

    def __post_init__(self) -> None:
        if not self.name or not self.region:
            raise ConfigError("a deployed function needs a name and a region", hint="run sponge deploy")
        check_invocation_type(self.invocation_type)

    def argv(self) -> list[str]:
        args = ["--function-name", self.name, "--region", self.region]
        args += ["--invocation-type", self.invocation_type]
        if self.qualifier:
            args += ["--qualifier", self.qualifier]
        if self.endpoint_url:
            args += ["--endpoint-url", self.endpoint_url]
        return args


@dataclass(frozen=True)
class AgentProcessConfig:
    """`function`: invoke that deployed function with boto3; None: the embedded fleet."""

    secret_file: Path
    max_workers: int
    function: LambdaFunction | None = None
    faults: tuple[FaultSpec, ...] = ()
    chunk_timeout_s: float = 10.0
    function_timeout_s: float = 60.0
    concurrency_limit: int | None = None
    log_path: Path | None = None
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    start_timeout_s: float = 60.0
    prewarm: int = 0  # warm pool: environments started and warmed at start-up
    idle_timeout_s: float = 10.0  # a worker's session idles out after this long without chunks
    cpus: frozenset[int] | None = None  # pin the agent (and the embedded workers it forks) to these cores

    @property
    def invoker(self) -> str:
        return "embedded" if self.function is None else "boto3"

    def argv(self) -> list[str]:
        args = [
            sys.executable, "-m", "router.agent",
            "--host", self.host,
            "--port", str(self.port),
            "--secret-file", str(self.secret_file),
            "--invoker", self.invoker,
            "--max-workers", str(self.max_workers),
            "--concurrency-limit", str(self.concurrency_limit or max(self.max_workers, 1)),
            "--function-timeout-s", str(self.function_timeout_s),
            "--chunk-timeout-s", str(self.chunk_timeout_s),
        ]  # fmt: skip
        if self.function is not None:
            args += self.function.argv()
        if self.log_path is not None:
            args += ["--worker-log", str(self.log_path)]
        if self.prewarm:
            args += ["--prewarm", str(self.prewarm)]
        args += ["--idle-timeout-s", str(self.idle_timeout_s)]
        for spec in self.faults:
            args += ["--inject", spec.text()]
        return args


class AgentProcess:
    """Start, sample, kill-and-restart and stop the agent; `totals()` sums every incarnation's counters."""

    def __init__(self, config: AgentProcessConfig) -> None:
        self.config = config
        self.address = f"{config.host}:{config.port}"
        self._proc: subprocess.Popen[str] | None = None
        self._finished: list[dict[str, int]] = []  # last counters of every earlier incarnation
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._client: Any = None
        self.restarts = 0

    def start(self) -> str:
        self._spawn()
        atexit.register(self._kill_at_exit)
        self._sampler = threading.Thread(target=self._sample_loop, name="agent-sampler", daemon=True)
        self._sampler.start()
        return self.address

    def _spawn(self) -> None:
        log: IO[str] | int = subprocess.DEVNULL
        if self.config.log_path is not None:
            self.config.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(self.config.log_path.with_suffix(".agent.log"), "a")  # noqa: SIM115
        proc = subprocess.Popen(
            self.config.argv(),
            cwd=PROJECT_ROOT,
            env={**os.environ, **dict(self.config.function.env if self.config.function else ())},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
            preexec_fn=_pin(self.config.cpus),
        )
        assert proc.stdout is not None
        if self.config.cpus:  # before any worker is forked: they inherit the agent's affinity
            os.sched_setaffinity(proc.pid, self.config.cpus)
        deadline = time.time() + self.config.start_timeout_s
        line = ""
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if '"listening"' in line:
                self._proc = proc
                return
        proc.kill()
        raise SpongeError(
            f"the VM agent did not start on {self.address}: {line.strip() or 'no output'}",
            hint="run `python -m router.agent --help` and check the worker log",
        )

    def _stats(self) -> dict[str, int] | None:
        from router.client import AgentClient, OffloadError

        if self._client is None:
            secret = self.config.secret_file.read_text().strip().encode()
            self._client = AgentClient(self.address, secret, timeout_s=2.0)
        try:
            stats = self._client.stats()
        except OffloadError:
            return None
        return {k: int(v) for k, v in stats.items() if isinstance(v, int | float) and not isinstance(v, bool)}

    def _sample_loop(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                if self._proc is None or self._proc.poll() is not None:
                    continue
            stats = self._stats()
            if stats is not None:
                with self._lock:
                    self._last = stats

    def wait_warm(self, n: int, timeout_s: float) -> bool:
        """Wait until the warm pool reports its environments warmed (or `n` workers are connected);
        False after `timeout_s`, when the run goes on with whatever is warm."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            sample = self.latest()
            if sample.get(WORKERS_PREWARMED, 0) > 0 or sample.get("workers_connected", 0) >= n:
                return True
            time.sleep(0.1)
        return False

    def latest(self) -> dict[str, int]:
        """The last sample of the running agent's counters and gauges (workers_connected, ...)."""
        with self._lock:
            return dict(self._last)

    def restart(self) -> None:
        """Kill the agent (SIGKILL: in-flight chunks are lost) and start a new one on the same port."""
        with self._lock:
            proc = self._proc
            self._proc = None
            self._finished.append(self._last)
            self._last = {}
        if proc is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self._spawn()
        self.restarts += 1

    def _kill_at_exit(self) -> None:
        """An interpreter that exits without stop() (a SIGTERM while the query starts) must not leave
        its agent and workers behind: they form the agent's process group."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    def stop(self) -> dict[str, int]:
        """Stop gracefully; returns the counters summed over every incarnation."""
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=5)
        final = self._stats() if self._proc is not None else None
        with self._lock:
            if final is not None:
                self._last = final
            proc = self._proc
            self._proc = None
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._client is not None:
            self._client.close()
        return self.totals()

    def totals(self) -> dict[str, int]:
        with self._lock:
            parts: Sequence[dict[str, int]] = [*self._finished, self._last]
        out: dict[str, int] = {}
        for part in parts:
            for k, v in part.items():
                out[k] = out.get(k, 0) + v
        return out

    def __enter__(self) -> AgentProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
