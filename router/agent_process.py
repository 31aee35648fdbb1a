"""The VM agent as the runtime starts it in local mode: a separate OS process on a fixed port.

Why a process and a fixed port: in production the agent is a daemon beside the Spark executor and
outlives queries and tasks; here it is started per run, and Spark tasks reach it at an address
fixed for the whole run, so an agent restart (an injected fault, or a real crash) only makes tasks
wait and retry, never look elsewhere. Counters live in the agent; the runner samples them, so the
counts of an agent that was killed are kept up to its last sample.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from core.errors import ConfigError, SpongeError
from core.fault_spec import FaultSpec
from core.wire.protocol import ChannelTls, grpc_module, open_channel
from router.agent import ready_port
from router.agent.warm_pool import WarmPoolConfig
from router.dispatcher import DEFAULT_CHUNK_TIMEOUT_S, DEFAULT_LOCAL_FALLBACK_S
from router.invokers.lambda_api import INVOCATION_TYPES
from router.stats import INJECTED_KILL_WORKER, WORKERS_PREWARMED

PROJECT_ROOT = Path(__file__).resolve().parent.parent
logger = logging.getLogger(__name__)
EXIT_POLL_S = 0.2
"""How often the readiness wait looks whether the agent has exited (its workers may keep stdout open)."""
SUPERVISE_S = 0.5  # how often the launcher samples the agent's counters and checks it is alive
RECOVER_ATTEMPTS = 3  # starts of an agent that died on its own before the launcher gives up
STDERR_TAIL_LINES = 8


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
    """`function`: invoke that deployed function with boto3; None: the embedded fleet.

    `start_timeout_s`: how long the agent may take from launch to serving gRPC (its ready line on
    stdout, then a connected channel); past it the agent is killed and the run stops with an error,
    so an agent that hangs silently cannot hang the run. Start-up is mostly imports: seconds, more on
    a loaded machine.
    """

    secret_file: Path
    max_workers: int
    function: LambdaFunction | None = None
    faults: tuple[FaultSpec, ...] = ()
    chunk_timeout_s: float = DEFAULT_CHUNK_TIMEOUT_S
    local_fallback_s: float = DEFAULT_LOCAL_FALLBACK_S
    function_timeout_s: float = 60.0
    concurrency_limit: int | None = None
    log_path: Path | None = None
    host: str = "127.0.0.1"  # the address it listens on (0.0.0.0: every interface)
    port: int = field(default_factory=free_port)
    advertise: str | None = None  # the host its callers and workers dial (default: `host`)
    # The port workers dial, when something forwards it to `port` (a NAT rule, a proxy); default `port`.
    advertise_port: int | None = None
    start_timeout_s: float = 60.0
    prewarm: int = 0  # warm pool: environments started and warmed at start-up
    # Keep-warm: while the fleet is idle, warm `max_workers` environments every this many seconds of
    # idleness (router/agent/warm_pool.py); None or 0: never.
    keep_warm_s: float | None = None
    idle_timeout_s: float = 10.0  # a worker's session idles out after this long without chunks
    cpus: frozenset[int] | None = None  # pin the agent (and the embedded workers it forks) to these cores
    handoff_dir: Path | None = None  # keyed stages' stash and group states (router/handoff_store.py)
    sink_dir: Path | None = None  # the only directory it writes chunk files to (core/direct_sink.py)
    tls_dir: Path | None = None  # serve TLS with the files there (core/wire/run_pki.py); None: plaintext
    worker_netns: str | None = None  # embedded fleet: the network namespace its workers run in

    def __post_init__(self) -> None:
        if not self.start_timeout_s > 0:
            raise ConfigError(f"start_timeout_s must be positive, got {self.start_timeout_s}")
        WarmPoolConfig(self.prewarm, self.max_workers, self.keep_warm_s)  # refused here, not by the agent

    def tls(self) -> ChannelTls | None:
        """How the launcher's own channels reach the agent: its TLS files, or None for plaintext."""
        return ChannelTls.read(self.tls_dir) if self.tls_dir is not None else None

    @property
    def dial_host(self) -> str:
        return self.advertise or self.host

    @property
    def invoker(self) -> str:
        return "embedded" if self.function is None else "boto3"

    def argv(self) -> list[str]:
        args = [
            sys.executable, "-m", "router.agent",
            "--host", self.host,
            "--port", str(self.port),
            "--advertise", f"{self.dial_host}:{self.advertise_port or self.port}",
            "--secret-file", str(self.secret_file),
            "--invoker", self.invoker,
            "--max-workers", str(self.max_workers),
            "--concurrency-limit", str(self.concurrency_limit or max(self.max_workers, 1)),
            "--function-timeout-s", str(self.function_timeout_s),
            "--chunk-timeout-s", str(self.chunk_timeout_s),
            "--local-fallback-s", str(self.local_fallback_s),
            "--exit-with-parent",  # launch() holds its standard input: a killed driver takes it along
        ]  # fmt: skip
        if self.function is not None:
            args += self.function.argv()
        if self.log_path is not None:
            args += ["--worker-log", str(self.log_path)]
        if self.prewarm:
            args += ["--prewarm", str(self.prewarm)]
        if self.keep_warm_s:
            args += ["--keep-warm-s", repr(float(self.keep_warm_s))]
        args += ["--idle-timeout-s", str(self.idle_timeout_s)]
        if self.handoff_dir is not None:
            args += ["--handoff-dir", str(self.handoff_dir)]
        if self.sink_dir is not None:
            args += ["--sink-dir", str(self.sink_dir)]
        if self.tls_dir is not None:
            args += ["--tls-dir", str(self.tls_dir)]
        if self.worker_netns is not None:
            args += ["--worker-netns", self.worker_netns]
        for spec in self.faults:
            args += ["--inject", spec.text()]
        return args


def launch(
    argv: Sequence[str],
    *,
    host: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    stderr_path: Path | None = None,
    cpus: frozenset[int] | None = None,
    tls: ChannelTls | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the agent's command line `argv` and return it with its port once it serves gRPC on `host`.

    Ready means its ready line on stdout (router/agent/__init__.py), then a channel to the port it
    reports that connects. All of it within `timeout_s`: an agent that prints nothing, never listens or
    exits is killed (with its process group: the workers it forked) and reported with its exit status
    and the end of its stderr, which goes to `stderr_path` (appended) or a temporary file. `tls`:
    how to reach an agent that serves TLS.
    """
    if stderr_path is not None:
        stderr_path.parent.mkdir(parents=True, exist_ok=True)
        stderr: IO[bytes] = open(stderr_path, "a+b")  # noqa: SIM115 (closed below; the agent keeps its copy)
        see = f"see {stderr_path}"
    else:
        stderr = tempfile.TemporaryFile(prefix="sponge-agent-")  # noqa: SIM115
        see = "give it a log_path to keep its whole stderr"
    deadline = time.monotonic() + timeout_s
    try:
        log_start = stderr.seek(0, os.SEEK_END)
        proc = subprocess.Popen(
            list(argv),
            cwd=PROJECT_ROOT,
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,  # its own process group: killing it kills the workers it forks
            preexec_fn=_pin(cpus),
        )
        try:
            if cpus:  # before any worker is forked: they inherit the agent's affinity
                os.sched_setaffinity(proc.pid, cpus)
            port = _await_ready_line(proc, deadline)
            if port is not None and _await_channel(proc, f"{host}:{port}", deadline, tls):
                return proc, port
        except BaseException:
            _kill(proc)
            raise
        tail = _tail(stderr, log_start)
        status = proc.poll()
        _kill(proc)  # also when it exited: workers it forked may live on in its process group
        if status is not None:
            raise SpongeError(
                f"the VM agent exited with status {status} before it was ready{tail}",
                hint=f"{see}; `python -m router.agent --help` lists its flags",
            )
        stage = "printed no ready line" if port is None else f"reported port {port} but did not serve gRPC"
        raise SpongeError(
            f"the VM agent was not ready within {timeout_s:g} s (it {stage}); killed it{tail}",
            hint=f"{see}; on a loaded machine raise AgentProcessConfig.start_timeout_s",
        )
    finally:
        stderr.close()


def _await_ready_line(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    """The port in the agent's ready line; None if its stdout closes, it exits or `deadline` passes first.

    Why selectors and not readline: a blocking read never returns from an agent that prints nothing.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0 and proc.poll() is None:
            if not selector.select(min(remaining, EXIT_POLL_S)):
                continue
            data = os.read(fd, 65536)
            if not data:  # stdout closed: it cannot become ready; let the caller see its exit status
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.0, deadline - time.monotonic()))
                return None
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                if (port := ready_port(line)) is not None:
                    return port
    return None


def _await_channel(
    proc: subprocess.Popen[bytes], target: str, deadline: float, tls: ChannelTls | None
) -> bool:
    """True once a gRPC channel to `target` connects; False if the agent exits or `deadline` passes."""
    grpc = grpc_module()
    with open_channel(target, [], tls) as channel:
        ready = grpc.channel_ready_future(channel)
        try:
            while (remaining := deadline - time.monotonic()) > 0 and proc.poll() is None:
                try:
                    ready.result(timeout=min(remaining, EXIT_POLL_S))
                    return True
                except grpc.FutureTimeoutError:
                    continue
            return False
        finally:
            ready.cancel()


def _tail(stderr: IO[bytes], start: int) -> str:
    """The last lines the agent wrote to `stderr` since `start`, as a suffix of an error message."""
    size = os.fstat(stderr.fileno()).st_size
    first = max(start, size - 4096)
    text = os.pread(stderr.fileno(), size - first, first).decode(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()][-STDERR_TAIL_LINES:]
    return "; its stderr ends with: " + " | ".join(lines) if lines else "; it wrote nothing to stderr"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the agent's process group (the agent and the workers it forked) and reap the agent."""
    with contextlib.suppress(ProcessLookupError):  # exited, and its group with it
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


class AgentProcess:
    """Start, sample, kill-and-restart and stop the agent; `totals()` sums every incarnation's counters."""

    def __init__(self, config: AgentProcessConfig) -> None:
        self.config = config
        self.address = f"{config.dial_host}:{config.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._finished: list[dict[str, int]] = []  # last counters of every earlier incarnation
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._client: Any = None
        self.restarts = 0  # kill-and-restart faults carried out
        self.crashes = 0  # deaths noticed and recovered from

    def start(self) -> str:
        self._spawn()
        atexit.register(self._kill_at_exit)
        self._sampler = threading.Thread(target=self._sample_loop, name="agent-sampler", daemon=True)
        self._sampler.start()
        return self.address

    def _spawn(self) -> None:
        config = self.config
        log_path = config.log_path.with_suffix(".agent.log") if config.log_path is not None else None
        env = {**os.environ, **dict(config.function.env if config.function else ())}
        proc, port = launch(
            config.argv(), host=config.dial_host, timeout_s=config.start_timeout_s, env=env,
            stderr_path=log_path, cpus=config.cpus, tls=config.tls(),
        )  # fmt: skip
        if port != config.port:
            _kill(proc)
            raise SpongeError(
                f"the VM agent reports port {port}, not the {config.port} it was started with",
                hint="check that nothing rewrites the agent's --port",
            )
        self._proc = proc

    @property
    def pid(self) -> int | None:
        """The running agent's process id, also its process group's (the workers it forked)."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def _agent_client(self) -> Any:
        from router.client import AgentClient

        if self._client is None:
            secret = self.config.secret_file.read_text().strip().encode()
            self._client = AgentClient(self.address, secret, timeout_s=2.0, tls=self.config.tls())
        return self._client

    def _stats(self) -> dict[str, int] | None:
        from router.client import OffloadError

        try:
            stats = self._agent_client().stats()
        except OffloadError:
            return None
        return {k: int(v) for k, v in stats.items() if isinstance(v, int | float) and not isinstance(v, bool)}

    def _sample_loop(self) -> None:
        while not self._stop.wait(SUPERVISE_S):
            with self._lock:
                proc = self._proc
            if proc is None:
                continue
            if proc.poll() is not None:
                self._recover(proc)
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

    def release(self, keep: int, reason: str) -> int:
        """Drain the agent's idle workers beyond `keep` connected (router/dispatcher.py `drain_idle`);
        how many were told to leave."""
        return self._agent_client().release(keep, reason)

    def latest(self) -> dict[str, int]:
        """The last sample of the running agent's counters and gauges (workers_connected, ...)."""
        with self._lock:
            return dict(self._last)

    def restart(self) -> None:
        """Kill the agent (SIGKILL: in-flight chunks are lost) and start a new one on the same port.

        The new agent injects the same faults, except a one-shot fault (`kill-worker:after-chunks=N`)
        that an earlier agent already injected: its trigger means once per run, not once per agent.
        """
        latest = self._stats()  # up to the kill, not to the last sample
        with self._lock:
            proc = self._proc
            self._proc = None
            self._finished.append(latest if latest is not None else self._last)
            self._last = {}
            killed = sum(part.get(INJECTED_KILL_WORKER, 0) for part in self._finished)
        if proc is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if killed:
            faults = tuple(f for f in self.config.faults if f.get("after-chunks") is None)
            self.config = dataclasses.replace(self.config, faults=faults)
        self._spawn()
        self.restarts += 1

    def _recover(self, proc: subprocess.Popen[bytes]) -> None:
        """An agent that died on its own (killed, crashed) is started again on the same port, where its
        callers ask again, and from the same handoff directory: the run goes on (counted as a crash)."""
        with self._lock:
            if self._proc is not proc or self._stop.is_set():
                return  # restarted or stopping meanwhile
            self._proc = None
            self._finished.append(self._last)  # its counters up to the last sample
            self._last = {}
        logger.warning(
            "the VM agent (pid %d) exited with status %s; starting it again", proc.pid, proc.returncode
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # workers it forked, left behind
        for attempt in range(1, RECOVER_ATTEMPTS + 1):
            try:
                self._spawn()
            except SpongeError as e:
                logger.error("starting the VM agent again failed (attempt %d): %s", attempt, e.one_line())
                continue
            self.crashes += 1
            return

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
