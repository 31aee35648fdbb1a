"""HostRuntimeExecutor: LocalStack's RuntimeExecutor interface, with a host process per environment.

It mirrors localstack's DockerRuntimeExecutor (docker_runtime_executor.py) where a container would
be: `prepare_version` unzips the code, `start` spawns runtime.py with the function's environment and
waits for its ready call on LocalStack's executor endpoint, `invoke` goes through the same
ExecutorEndpoint (POST /invoke, then the runtime posts the result back), `stop` ends the process
group. What Lambda's sandbox would do and a bare process does not, it does here:

* the process runs with the environment LocalStack computed for the function (plus PATH, HOME, LANG),
  not with LocalStack's own, and with the code directory as LAMBDA_TASK_ROOT and cwd;
* a runtime that dies during an invocation (a crash, a kill, the timeout) yields Lambda's error
  result (Runtime.ExitError) instead of leaving LocalStack waiting 905 s for an answer, and the next
  invocation starts a fresh process (a reset sandbox: a new init, as on AWS).

The interpreter is SPONGE_FUNCTION_PYTHON (read once, in LocalStack's environment) or LocalStack's
own. Why configurable: a deployment zip holds the function's sources but not its native wheels
(pyarrow, polars, grpcio built for Lambda's Linux); on AWS or with Docker the runtime image and the
packaged dependencies provide them, here an interpreter that has them installed does.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from pathlib import Path

from localstack import config
from localstack.services.lambda_.invocation.executor_endpoint import ExecutorEndpoint
from localstack.services.lambda_.invocation.lambda_models import FunctionVersion, InvocationResult
from localstack.services.lambda_.invocation.runtime_executor import LambdaRuntimeException, RuntimeExecutor
from localstack.utils.net import get_free_tcp_port

LOG = logging.getLogger(__name__)
RUNTIME_SCRIPT = Path(__file__).resolve().with_name("runtime.py")
PASSED_THROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH", "JAVA_HOME")
STOP_GRACE_S = 2.0


@dataclass(frozen=True)
class ExecutorSettings:
    """SPONGE_FUNCTION_PYTHON and SPONGE_EXECUTOR_LOG_DIR, read from LocalStack's environment once."""

    python: str
    log_dir: Path

    @classmethod
    def from_env(cls) -> ExecutorSettings:
        python = os.environ.get("SPONGE_FUNCTION_PYTHON", "").strip() or sys.executable
        log_dir = os.environ.get("SPONGE_EXECUTOR_LOG_DIR", "").strip() or os.path.join(
            config.dirs.tmp, "sponge-executor"
        )
        return cls(python=python, log_dir=Path(log_dir))


SETTINGS = ExecutorSettings.from_env()


class HostRuntimeExecutor(RuntimeExecutor):
    def __init__(self, id: str, function_version: FunctionVersion) -> None:
        super().__init__(id=id, function_version=function_version)
        self.executor_endpoint = ExecutorEndpoint(self.id, container_address="127.0.0.1")
        self.settings = SETTINGS
        self.log_path = self.settings.log_dir / f"{function_version.id.function_name}-{self.id}.log"
        self._env: dict[str, str] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._request_id = ""

    # ---- life cycle ----

    def start(self, env_vars: dict[str, str]) -> None:
        self.executor_endpoint.start()
        code_dir = str(self.function_version.config.code.get_unzipped_code_location())
        env = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
        env.update({k: str(v) for k, v in env_vars.items() if v is not None})
        env.update(
            {
                "LAMBDA_TASK_ROOT": code_dir,
                "PYTHONPATH": code_dir,
                "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        self._env = env
        self._spawn()

    def _spawn(self) -> None:
        """Start a runtime process and wait for its ready call (or its death, or LocalStack's timeout)."""
        port = get_free_tcp_port()
        self.executor_endpoint.container_port = port
        if self.executor_endpoint.startup_future is None or self.executor_endpoint.startup_future.done():
            self.executor_endpoint.startup_future = Future()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(
                [self.settings.python, "-u", "-P", str(RUNTIME_SCRIPT)],
                cwd=self._env["LAMBDA_TASK_ROOT"],
                env={**self._env, "SPONGE_RUNTIME_PORT": str(port)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        with self._lock:
            self._proc = proc
        threading.Thread(
            target=self._watch, args=(proc,), name=f"runtime-watch-{self.id[:8]}", daemon=True
        ).start()
        LOG.debug(
            "started runtime %s (pid %d) for %s", self.id, proc.pid, self.function_version.qualified_arn
        )
        self.executor_endpoint.wait_for_startup()

    def _watch(self, proc: subprocess.Popen[bytes]) -> None:
        """Turn the runtime's death into the result Lambda gives: an error for whatever was waiting."""
        code = proc.wait()
        if self._stopped:
            return
        reason = f"signal: {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        startup = self.executor_endpoint.startup_future
        if startup is not None and not startup.done():
            _settle(
                startup,
                error=LambdaRuntimeException(f"runtime exited during init ({reason}): {self._tail()}"),
            )
            return
        pending = self.executor_endpoint.invocation_future
        if pending is not None and not pending.done():
            body = {"errorMessage": f"Runtime exited with error: {reason}", "errorType": "Runtime.ExitError"}
            _settle(
                pending,
                result=InvocationResult(
                    self._request_id, json.dumps(body).encode(), is_error=True, logs=self._tail()
                ),
            )

    def stop(self) -> None:
        self._stopped = True
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass
        try:
            self.executor_endpoint.shutdown()
        except Exception as e:
            LOG.debug("error while stopping executor endpoint %s: %s", self.id, e)

    # ---- addresses ----

    def get_address(self) -> str:
        return "127.0.0.1"

    def get_endpoint_from_executor(self) -> str:
        return "127.0.0.1"

    def get_runtime_endpoint(self) -> str:
        port = config.GATEWAY_LISTEN[0].port
        return f"http://127.0.0.1:{port}{self.executor_endpoint.get_endpoint_prefix()}"

    # ---- invocations ----

    def invoke(self, payload: dict[str, str]) -> InvocationResult:
        with self._lock:
            dead = self._proc is None or self._proc.poll() is not None
        if dead and not self._stopped:
            LOG.debug("runtime %s had exited; starting a fresh one (a reset sandbox)", self.id)
            self._spawn()
        self._request_id = str(payload.get("invoke-id", ""))
        result = self.executor_endpoint.invoke(payload)
        if result.is_error and b"Sandbox.Timedout" in (result.payload or b""):
            # The runtime exits after a timeout: let it be gone before the next invocation comes.
            with self._lock:
                proc = self._proc
            if proc is not None:
                try:
                    proc.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        return result

    def get_logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _tail(self, lines: int = 20) -> str:
        return "\n".join(self.get_logs().splitlines()[-lines:])

    # ---- versions ----

    @classmethod
    def prepare_version(cls, function_version: FunctionVersion) -> None:
        if function_version.config.code:
            function_version.config.code.prepare_for_execution()

    @classmethod
    def cleanup_version(cls, function_version: FunctionVersion) -> None:
        pass

    @classmethod
    def validate_environment(cls) -> bool:
        python = SETTINGS.python
        if not (os.path.isfile(python) and os.access(python, os.X_OK)) and shutil.which(python) is None:
            LOG.warning("SPONGE_FUNCTION_PYTHON=%s is not an executable interpreter", python)
            return False
        return True


def _settle(future: Future, *, result: object = None, error: BaseException | None = None) -> None:
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass  # settled meanwhile by the runtime's own answer
