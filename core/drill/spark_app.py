"""The drill's one Spark application as the drill sees it: a child process (core/drill/run_policy.py)
that runs the probes' and the policies' runs in turn, each given as a spec file, each answered by a
result file.

Why a process that outlives a run: the application's JVMs, compiled code and Python workers then serve
every run of the drill (docs/adr/0059). Why a process at all: it pins itself and its JVMs to the VM
cores, which the drill's own process is not.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from core import errors
from core.drill.run_policy import ERROR_FILE, RUN_LOG, PolicyRun
from core.errors import JvmDiedError, SpongeError

EXIT_WAIT_S = 60.0  # the child stops its application (VMs, agent) before it exits
POLL_S = 0.2  # how soon a run's result is seen


class SparkApp:
    """Start it with `with SparkApp(directory) as app:`; `app.run(spec, directory, status)` per run."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.jvm_log = directory / "jvm.log"  # the application's driver JVM, for every run
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(interrupted=kind is not None)

    def run(self, spec: PolicyRun, directory: Path, status: Callable[[str], None]) -> dict[str, Any]:
        """Run `spec` in the application; its spec, result and log files go to `directory`."""
        directory.mkdir(parents=True, exist_ok=True)
        spec = replace(spec, jvm_log=str(self.jvm_log))
        spec_path, result_path, error_path = (
            directory / "spec.json",
            directory / "result.json",
            directory / ERROR_FILE,
        )
        spec_path.write_text(json.dumps(asdict(spec)))
        for stale in (result_path, error_path, directory / RUN_LOG):
            stale.unlink(missing_ok=True)
        proc = self._child()
        started = time.time()
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps([str(spec_path), str(result_path)]) + "\n")
            proc.stdin.flush()
            while not result_path.exists() and not error_path.exists() and proc.poll() is None:
                time.sleep(POLL_S)
                status(f"{spec.policy}: {time.time() - started:.0f} s")
        except BaseException:
            self.close(interrupted=True)
            raise
        if result_path.exists():
            return json.loads(result_path.read_text())
        returncode = self._wait_exit(proc)
        self._proc = None
        raise child_failure(spec, returncode, directory)

    def close(self, interrupted: bool = False) -> None:
        """End the child: at the end of its input it stops the application; interrupted, on SIGTERM."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if interrupted:  # the child stops its agent and VMs on SIGTERM
            proc.terminate()
        elif proc.stdin is not None:
            proc.stdin.close()
        self._wait_exit(proc)

    def _child(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / "app.log", "a") as log:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "core.drill.run_policy"],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
        return self._proc

    @staticmethod
    def _wait_exit(proc: subprocess.Popen[str]) -> int:
        try:
            return proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def child_failure(spec: PolicyRun, returncode: int, directory: Path) -> SpongeError:
    """Why a policy's (or a probe's) run failed: the error it reported (a JVM that died says why:
    core/spark/jvm_failure.py), else what its JVM's log shows, else the tail of its run.log."""
    from core.spark.jvm_failure import find_cause, read_log
    from core.spark.session import format_mb

    run = "the calibration probe" if spec.policy == "probe" else f"the {spec.policy} run"
    log_path = directory / RUN_LOG
    jvm_log = Path(spec.jvm_log) if spec.jvm_log else directory / "jvm.log"
    error_path = directory / ERROR_FILE
    if error_path.exists():
        reported = json.loads(error_path.read_text())
        kind = getattr(errors, str(reported.get("kind")), SpongeError)
        kind = kind if isinstance(kind, type) and issubclass(kind, SpongeError) else SpongeError
        return kind(f"{run} failed: {reported['message']}", hint=reported.get("hint") or f"see {log_path}")
    cause = find_cause(read_log(jvm_log))
    if cause.oom is not None:  # the process died before it could say (e.g. killed with its JVM)
        return JvmDiedError(
            f"{run} failed (exit {returncode}): its JVM ran out of memory: {cause.oom}",
            hint=f"raise --driver-memory (now {format_mb(spec.memory.driver_mb)}); see {jvm_log}",
        )
    tail = "".join(log_path.read_text().splitlines(keepends=True)[-5:]) if log_path.exists() else ""
    return SpongeError(f"{run} failed (exit {returncode}): {tail.strip()}", hint=f"see {log_path}")
