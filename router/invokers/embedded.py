"""The embedded Lambda fleet: worker processes on this machine that behave like Lambda's.

Why it is strict: the local runner must never be more forgiving than production (docs: STYLE.md).
Each execution environment is a separate OS process running the real handler through
lambda_worker/local_runtime.py, and the fleet reproduces what an AWS caller has to survive:

* a cold start (a new process: interpreter, handler import, then the program compile on first use)
  versus warm reuse of an idle process that keeps its imports and compiled programs;
* a per-function concurrency limit: an invoke while `concurrency_limit` invocations run raises
  Throttled, like Lambda's 429 TooManyRequestsException;
* a timeout: an invocation still running after `timeout_s` has its process killed (Lambda resets
  the environment) and fails with "Task timed out";
* crashes: a process that dies mid-invocation fails it with the exit code.

Invocations are synchronous (RequestResponse-like): the handle resolves when the handler returns.
`kill(worker_id)` SIGKILLs the process serving a worker's invocation (the agent's
`--inject kill-worker`). The processes never outlive the fleet's process, even when it is SIGKILLed
and cannot clean up: each asks the kernel to kill it when its parent dies (PR_SET_PDEATHSIG, see
core/parent_death.py, armed in lambda_worker/local_runtime.py), and they are all started from one
long-lived thread of the fleet, because Linux sends that signal when the *thread* that forked the
child ends, not the process.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from core.deployment import METRICS_NAMESPACE
from core.errors import ConfigError
from router.invokers.base import InvokeFailed, InvokeHandle, Invoker, InvokeResult, Throttled

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class WorkerFaults:
    """Failure injection for one execution environment (tests): slow chunks, a crash in chunk N, a stall."""

    delay_s: float = 0.0
    crash_in_chunk: int = 0
    stall_s: float = 0.0


@dataclass(frozen=True)
class EmbeddedFleetConfig:
    """`faults` maps an environment's ordinal (0 = the first process started) to its injected faults."""

    function_name: str = "sponge-worker"
    concurrency_limit: int = 4
    timeout_s: float = 60.0
    memory_mb: int = 1769
    ready_timeout_s: float = 30.0
    idle_lifetime_s: float = 600.0
    python: str = sys.executable
    log_path: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    cpus: tuple[int, ...] | None = None
    faults: Mapping[int, WorkerFaults] = field(default_factory=dict)
    # A command the runtime is started under, e.g. ("ip", "netns", "exec", NAME): workers on a
    # network of their own, which reach the agent only at its advertised address, as Lambda's do.
    launcher: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.concurrency_limit, bool) or not isinstance(self.concurrency_limit, int):
            raise ConfigError(f"concurrency_limit must be an integer, got {self.concurrency_limit!r}")
        if self.concurrency_limit < 0:
            raise ConfigError(f"concurrency_limit must be >= 0, got {self.concurrency_limit}")
        for name in ("timeout_s", "ready_timeout_s", "idle_lifetime_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        if not 128 <= self.memory_mb <= 10240:
            raise ConfigError(f"memory_mb must be in [128, 10240] like Lambda's, got {self.memory_mb}")


class _Environment:
    """One worker process and the thread that reads its replies."""

    def __init__(self, ordinal: int, proc: subprocess.Popen[str]) -> None:
        self.ordinal = ordinal
        self.proc = proc
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.ready = threading.Event()
        self.import_s = 0.0
        self.spawned = time.monotonic()
        self.idle_since = time.monotonic()
        self.invocations = 0
        self.killed = False
        threading.Thread(target=self._read, name=f"env-{ordinal}-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if msg.get("type") == "ready":
                self.import_s = float(msg.get("import_s", 0.0))
                self.ready.set()
            else:
                self.replies.put(msg)
        self.replies.put(None)
        self.ready.set()

    @property
    def alive(self) -> bool:
        return not self.killed and self.proc.poll() is None

    def kill(self) -> None:
        self.killed = True
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


@dataclass(frozen=True)
class EnvironmentInfo:
    ordinal: int
    pid: int
    busy: bool
    alive: bool
    invocations: int
    worker_id: str | None = None
    """The worker whose invocation it is running now, if any."""


class EmbeddedFleet(Invoker):
    """A Lambda fleet of local processes (see the module doc for the behaviours it reproduces)."""

    def __init__(self, config: EmbeddedFleetConfig | None = None) -> None:
        self.config = config or EmbeddedFleetConfig()
        self._lock = threading.Lock()
        self._idle: list[_Environment] = []
        self._busy: set[_Environment] = set()
        self._all: list[_Environment] = []
        self._serving: dict[str, _Environment] = {}  # worker id -> environment running its invocation
        # The one thread that starts processes (see the module doc: their parent-death signal is tied to
        # it); a ThreadPoolExecutor's worker thread lives until shutdown().
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="env-spawner")
        self._ordinals = itertools.count()
        self._requests = itertools.count(1)
        self._closed = False
        self._log: IO[str] | None = open(self.config.log_path, "a") if self.config.log_path else None  # noqa: SIM115
        self.counters = {
            "environments_started": 0,
            "invocations": 0,
            "cold": 0,
            "throttled": 0,
            "timeouts": 0,
            "crashes": 0,
            "killed": 0,
        }

    @property
    def concurrency_limit(self) -> int:
        return self.config.concurrency_limit

    # ---- processes ----

    def _child_env(self) -> dict[str, str]:
        c = self.config
        env = dict(os.environ)
        env.update(
            {
                "AWS_LAMBDA_FUNCTION_NAME": c.function_name,
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(c.memory_mb),
                "AWS_LAMBDA_FUNCTION_TIMEOUT": str(int(c.timeout_s)),
                "POWERTOOLS_SERVICE_NAME": c.function_name,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "POWERTOOLS_TRACE_DISABLED": "true",
                "PYTHONUNBUFFERED": "1",
                # Lambda gives one vCPU per 1769 MB (up to six): size polars' thread pool the same way.
                "POLARS_MAX_THREADS": str(max(1, min(6, c.memory_mb // 1769))),
                "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p),
            }
        )
        env.update(c.env)
        return env

    def _spawn(self) -> _Environment:
        c = self.config
        ordinal = next(self._ordinals)
        cmd = [
            *c.launcher,
            c.python,
            "-m",
            "lambda_worker.local_runtime",
            "--function-name",
            c.function_name,
            "--memory-mb",
            str(c.memory_mb),
            f"--parent-pid={os.getpid()}",
        ]
        faults = c.faults.get(ordinal)
        if faults is not None:
            cmd += [
                f"--fault-delay-s={faults.delay_s}",
                f"--fault-crash-in-chunk={faults.crash_in_chunk}",
                f"--fault-stall-s={faults.stall_s}",
            ]
        cpus = c.cpus
        proc = self._spawner.submit(
            subprocess.Popen,
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log if self._log is not None else None,
            text=True,
            bufsize=1,
            env=self._child_env(),
            cwd=str(PROJECT_ROOT),
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        ).result()
        env = _Environment(ordinal, proc)
        self._all.append(env)
        self.counters["environments_started"] += 1
        return env

    def _reap_idle(self) -> None:
        now = time.monotonic()
        keep = []
        for env in self._idle:
            if not env.alive or now - env.idle_since > self.config.idle_lifetime_s:
                env.kill()
            else:
                keep.append(env)
        self._idle = keep

    # ---- the Invoker contract ----

    def invoke_async(self, descriptor: Mapping[str, Any]) -> InvokeHandle:
        with self._lock:
            if self._closed:
                raise InvokeFailed("the embedded fleet is closed", error_type="Closed")
            if len(self._busy) >= self.config.concurrency_limit:
                self.counters["throttled"] += 1
                raise Throttled(
                    f"Rate Exceeded: {len(self._busy)} of {self.config.concurrency_limit} executions in use",
                    hint="raise the function's concurrency limit or retry later",
                )
            self._reap_idle()
            env = self._idle.pop() if self._idle else None
            cold = env is None
            if env is None:
                env = self._spawn()
                self.counters["cold"] += 1
            self._busy.add(env)
            self.counters["invocations"] += 1
            request_id = f"local-{next(self._requests):06d}"
            worker_id = descriptor.get("worker_id")
            if worker_id:
                self._serving[str(worker_id)] = env
        handle = InvokeHandle(str(worker_id or request_id))
        threading.Thread(
            target=self._invoke,
            args=(env, dict(descriptor), handle, request_id, cold),
            daemon=True,
            name=f"invoke-{request_id}",
        ).start()
        return handle

    def _invoke(
        self, env: _Environment, payload: dict[str, Any], handle: InvokeHandle, request_id: str, cold: bool
    ) -> None:
        c = self.config
        keep = False
        started = time.monotonic()
        try:
            if not env.ready.wait(c.ready_timeout_s) or not env.alive:
                env.kill()
                raise InvokeFailed(
                    f"execution environment {env.ordinal} did not start", error_type="Runtime.InitError"
                )
            # Like Lambda, the function timeout counts from the invocation, after the runtime's init.
            deadline = time.time() + c.timeout_s
            request = {"request_id": request_id, "payload": payload, "deadline_ms": int(deadline * 1000)}
            try:
                assert env.proc.stdin is not None
                env.proc.stdin.write(json.dumps(request) + "\n")
                env.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self.counters["crashes"] += 1
                env.kill()
                raise InvokeFailed(
                    "Runtime exited before the invocation", error_type="Runtime.ExitError"
                ) from None
            env.invocations += 1
            try:
                reply = env.replies.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                self.counters["timeouts"] += 1
                env.kill()
                raise InvokeFailed(
                    f"Task timed out after {c.timeout_s:.2f} seconds", error_type="Timeout"
                ) from None
            if reply is None:
                self.counters["crashes"] += 1
                code = env.proc.wait(timeout=5)
                env.kill()
                raise InvokeFailed(
                    f"Runtime exited with error: exit status {code}", error_type="Runtime.ExitError"
                )
            keep = True
            if not reply.get("ok"):
                err = reply.get("error") or {}
                raise InvokeFailed(
                    str(err.get("errorMessage", "unknown error")),
                    error_type=str(err.get("errorType", "Unhandled")),
                )
            handle.set_result(InvokeResult(True, reply.get("payload"), 200, time.monotonic() - started))
        except InvokeFailed as e:
            handle.set_exception(e)
        except Exception as e:  # never leave a handle unresolved
            handle.set_exception(InvokeFailed(f"{type(e).__name__}: {e}", error_type=type(e).__name__))
        finally:
            with self._lock:
                self._busy.discard(env)
                if self._serving.get(handle.worker_id) is env:
                    del self._serving[handle.worker_id]
                if keep and env.alive and not self._closed:
                    env.idle_since = time.monotonic()
                    self._idle.append(env)

    @property
    def can_kill(self) -> bool:
        return True

    def kill(self, worker_id: str) -> bool:
        """SIGKILL the process running `worker_id`'s invocation, as a crash of the host would.

        The invocation then fails like any crashed one ("Runtime exited with error"), and the agent
        sees the worker's stream break. False if no live process is serving that worker now.
        """
        with self._lock:
            env = self._serving.get(worker_id)
            if env is None or not env.alive:
                return False
            self.counters["killed"] += 1
        env.kill()
        return True

    def environments(self) -> list[EnvironmentInfo]:
        """Every process started so far (tests use the pids to kill one mid-chunk)."""
        with self._lock:
            serving = {id(e): wid for wid, e in self._serving.items()}
            return [
                EnvironmentInfo(
                    e.ordinal, e.proc.pid, e in self._busy, e.alive, e.invocations, serving.get(id(e))
                )
                for e in self._all
            ]

    def prewarm(self, n: int, programs: Sequence[Mapping[str, Any]] = (), timeout_s: float = 60.0) -> int:
        """Start up to `n` environments and warm them (imports, program compile); returns how many warmed.

        The paper's keep-warm policy (section 4.4): idle warm environments make the next invokes warm.
        """
        handles = []
        for _ in range(n):
            try:
                handles.append(self.invoke_async({"warmup": True, "programs": list(programs)}))
            except Throttled:
                break
        ok = 0
        for h in handles:
            try:
                h.result(timeout_s)
                ok += 1
            except Exception:  # a failed warm-up only costs a later cold start
                pass
        return ok

    def close(self) -> None:
        with self._lock:
            self._closed = True
            envs = list(self._all)
            self._idle.clear()
        for env in envs:
            if env.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    env.proc.stdin.close()
            env.kill()
        self._spawner.shutdown(wait=False)
        if self._log is not None:
            self._log.close()
            self._log = None
