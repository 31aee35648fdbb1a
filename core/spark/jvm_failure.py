"""Why Spark's JVM died under a run, said as one error a user can act on.

When the driver JVM dies (a task ran out of heap and Spark's handler exited with 52, the kernel's
OOM killer sent SIGKILL, ...), the Python side only sees py4j's connection being refused, or, worse,
nothing at all: the progress listener falls silent and a run would wait for its timeout. So a run
watches the JVM's process while its query streams (`JvmWatch.check`) and turns any failure after the
JVM's death into a `JvmDiedError` that names

* the cause, read from the JVM's log (`SparkConfig.jvm_log`, the JVM's stdout and stderr): e.g.
  `java.lang.OutOfMemoryError: Java heap space` and, when the stack shows it, the stateful operator
  it happened in (StateStoreSaveExec, StreamingSymmetricHashJoinExec, ...);
* the memory in force (--driver-memory, --executor-memory, the state store);
* the flag that changes it, with a value to try, and where the log is.

The same reading serves a query that failed while the JVM lives on: an executor of a standalone
cluster that ran out of memory, or an OutOfMemoryError outside a task (the driver's backstop,
session.OOM_BACKSTOP, kills such a JVM shortly after).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import JvmDiedError
from core.spark.session import Jvm, MemoryConfig, current_jvm, format_mb, runs_in_driver

SPARK_OOM_EXIT = 52  # SparkExitCode.OOM: Spark's uncaught-exception handler after an OutOfMemoryError
SIGKILL_EXIT = -9  # subprocess's code for a process killed by SIGKILL
DEATH_WAIT_S = 5.0  # how long a failure that looks like a dying JVM waits for the JVM to be gone
LOG_HEAD, LOG_TAIL = 4 << 20, 4 << 20  # of a longer log only the first and last 4 MiB are read

_OOM = re.compile(
    r"java\.lang\.OutOfMemoryError(?::[ \t]*(?P<what>[^\r\n]*))?"
    r"|(?P<netty>io\.netty\.util\.internal\.OutOfDirectMemoryError:[^\r\n]*)"
)
_OPERATOR = re.compile(
    r"\b(\w*(?:StateStoreSave|StateStoreRestore|SymmetricHashJoin|TransformWithState|GroupsWithState"
    r"|Deduplicate|SessionWindowStateStore)\w*Exec)\b"
)
_RECORD = re.compile(r"^\d\d:\d\d:\d\d \w+ ")  # a record of core/spark/log4j2.properties' layout
_ERROR_RECORD = re.compile(r"^\d\d:\d\d:\d\d ERROR (.*)$", re.MULTILINE)
_EXECUTOR_LOST = re.compile(r"ExecutorLostFailure|exited with code 52|exit code 52|exitCode=52")
#: How a query fails while its JVM shuts down: worth waiting a moment for the JVM's exit.
_SHUTTING_DOWN = re.compile(
    r"SparkContext (?:was|has been) shut down|stopped SparkContext|SparkContext is stopped|"
    r"RpcEnv already stopped|dagScheduler\(\)|OutOfMemoryError"
)


@dataclass(frozen=True)
class Cause:
    """What the JVM's log (or a query's failure) says: the OutOfMemoryError, the stateful operator
    it was thrown under, and the last ERROR record (for a death that was not out of memory)."""

    oom: str | None = None
    operator: str | None = None
    last_error: str | None = None


def find_cause(text: str) -> Cause:
    """The first OutOfMemoryError in `text` (one with its reason preferred), the stateful operator in
    the stack of any log record that mentions one, and the last ERROR record."""
    oom = None
    for m in _OOM.finditer(text):
        if m.group("netty"):
            found = m.group("netty").strip()
        elif m.group("what") and m.group("what").strip():
            found = f"java.lang.OutOfMemoryError: {m.group('what').strip()}"
        else:
            found = "java.lang.OutOfMemoryError"
        if oom is None or (oom == "java.lang.OutOfMemoryError" and found != oom):
            oom = found
        if oom.startswith("java.lang.OutOfMemoryError: "):
            break
    operator = None
    if oom is not None:
        for record in _records(text):
            if _OOM.search(record) and (op := _OPERATOR.search(record)):
                operator = op.group(1)
                break
    errors = _ERROR_RECORD.findall(text)
    return Cause(oom, operator, errors[-1].strip() if errors else None)


def _records(text: str) -> Iterator[str]:
    """The log's records, each with the stack trace printed under it."""
    record: list[str] = []
    for line in text.splitlines():
        if _RECORD.match(line) and record:
            yield "\n".join(record)
            record = []
        record.append(line)
    if record:
        yield "\n".join(record)


def read_log(path: Path | None, start: int = 0) -> str:
    """The log from byte `start` on ("" when there is none); of a long one, its head and its tail."""
    if path is None or not path.exists():
        return ""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        start = min(max(start, 0), size)
        f.seek(start)
        if size - start <= LOG_HEAD + LOG_TAIL:
            data = f.read()
        else:
            data = f.read(LOG_HEAD) + b"\n...\n"
            f.seek(size - LOG_TAIL)
            data += f.read()
    return data.decode("utf-8", errors="replace")


def _log_size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def _bigger(mb: int) -> str:
    return format_mb(mb * 2)


def _where(jvm: Jvm) -> str:
    return (
        f"the JVM's log: {jvm.log}" if jvm.log is not None else "the JVM's log went to this process's stderr"
    )


def _store(memory: MemoryConfig) -> str:
    if memory.state_store == "hdfs":
        return "--state-store hdfs (every key of the state on that heap)"
    cap = f", --rocksdb-memory {format_mb(memory.rocksdb_mb)}" if memory.rocksdb_mb is not None else ""
    return f"--state-store rocksdb (state off the heap{cap})"


def _in(cause: Cause) -> str:
    return f" in {cause.operator} (a stateful operator)" if cause.operator else ""


def jvm_died(
    jvm: Jvm,
    *,
    exit_code: int | None,
    log_from: int = 0,
    memory: MemoryConfig | None = None,
    query_failure: str | None = None,
) -> JvmDiedError:
    """The error for the driver JVM `jvm` that ended with `exit_code` (None: it still runs), read from
    its log after byte `log_from` and from the query's failure.
    `memory` is the run's (its state store); the heaps are those the JVM was started with."""
    memory = memory or jvm.memory
    cause = find_cause(read_log(jvm.log, log_from) + "\n" + (query_failure or ""))
    heap = format_mb(jvm.memory.driver_mb)
    where = _where(jvm)
    if cause.oom is not None or exit_code == SPARK_OOM_EXIT:
        oom = cause.oom or f"exit code {SPARK_OOM_EXIT}, Spark's exit after an OutOfMemoryError"
        how = "died of" if exit_code is not None else "ran out of memory:"
        tasks = (
            f"the one heap every task of {jvm.master} shares"
            if runs_in_driver(jvm.master)
            else "the driver's heap; tasks run in the executors"
        )
        machine = (
            f"; this machine has {jvm.memory.machine.total_mb / 1024:.1f} GiB of RAM"
            if jvm.memory.machine
            else ""
        )
        off_heap = (
            "; or keep the state off the heap: drop --state-store hdfs"
            if memory.state_store == "hdfs"
            else ""
        )
        return JvmDiedError(
            f"Spark's JVM {how} {oom}{_in(cause)}, with --driver-memory {heap} in force ({tasks}) and "
            f"{_store(memory)}",
            hint=f"raise it, e.g. --driver-memory {_bigger(jvm.memory.driver_mb)}{machine}{off_heap}; "
            f"{where}",
        )
    if exit_code == SIGKILL_EXIT:
        rocksdb = (
            f" and --rocksdb-memory {format_mb(memory.rocksdb_mb)}" if memory.rocksdb_mb is not None else ""
        )
        return JvmDiedError(
            "Spark's JVM was killed (SIGKILL), most likely by the kernel's out-of-memory killer: this "
            f"machine ran out of memory with --driver-memory {heap}{rocksdb} in force",
            hint="lower --driver-memory or --rocksdb-memory, or free memory on this machine; `dmesg` shows "
            f"the OOM killer's report; {where}",
        )
    last = f": {cause.last_error}" if cause.last_error else ""
    return JvmDiedError(
        f"Spark's JVM exited unexpectedly with code {exit_code}{last}",
        hint=f"{where} (--driver-memory {heap} in force)",
    )


def executor_died(memory: MemoryConfig, query_failure: str) -> JvmDiedError | None:
    """The error for a query that failed because an executor of a standalone cluster ran out of memory
    (the driver lives on), or None when the failure says nothing of the kind."""
    if memory.executor_mb is None:
        return None
    cause = find_cause(query_failure)
    if cause.oom is None and not _EXECUTOR_LOST.search(query_failure):
        return None
    oom = cause.oom or "it exited (code 52 is Spark's exit after an OutOfMemoryError)"
    return JvmDiedError(
        f"a Spark executor died: {oom}{_in(cause)}, with --executor-memory {format_mb(memory.executor_mb)} "
        f"in force and {_store(memory)}",
        hint=f"raise it, e.g. --executor-memory {_bigger(memory.executor_mb)}; an executor's log is the "
        "stderr under its worker's work directory in the cluster's run directory",
    )


def _looks_like_lost_jvm(e: BaseException) -> bool:
    """py4j's ways of saying the JVM is gone: refused or broken connections, empty answers."""
    for err in (e, e.__cause__, e.__context__):
        if err is None:
            continue
        if isinstance(err, (ConnectionError, EOFError)) or type(err).__name__ == "Py4JNetworkError":
            return True
        if type(err).__name__ == "Py4JError" and "Java side" in str(err):
            return True
    return False


class JvmWatch:
    """The driver JVM of one run: whether it died, and the error that says why (module doc).

    `memory` is the run's (its state store); None takes the JVM's own. Only what the JVM logs after the
    watch began is read, so a JVM shared by several runs (the drill's warm-up and trace) reports the
    run that failed.
    """

    def __init__(self, memory: MemoryConfig | None = None, jvm: Jvm | None = None) -> None:
        self._jvm = jvm
        self._memory = memory
        known = self.jvm
        self.log_from = _log_size(known.log) if known is not None else 0  # a JVM launched later: all of it

    @property
    def jvm(self) -> Jvm | None:
        """The JVM watched: the one given, else this process's (launched, maybe, after the watch began)."""
        return self._jvm if self._jvm is not None else current_jvm()

    @property
    def memory(self) -> MemoryConfig:
        jvm = self.jvm
        return self._memory or (jvm.memory if jvm is not None else MemoryConfig())

    def died(self) -> bool:
        jvm = self.jvm
        return jvm is not None and jvm.exit_code() is not None

    def check(self) -> None:
        """Raise the JVM's death, if it died."""
        if self.died():
            raise self.error()  # type: ignore[misc] - a dead JVM always has an error

    def error(self, query_failure: str | None = None, wait_s: float = 0.0) -> JvmDiedError | None:
        """The JVM's death, an executor's, or an OutOfMemoryError that failed the query, as an error;
        None when the failure is none of these. Waits up to `wait_s` for a JVM on its way out (Spark's
        shutdown hooks run before it exits), so its exit code and last log records are in."""
        jvm = self.jvm
        if jvm is None:
            return executor_died(self.memory, query_failure) if query_failure else None
        if query_failure is not None and not _SHUTTING_DOWN.search(query_failure):
            wait_s = 0.0  # an ordinary failure (a bad plan, a task failed too often): no JVM to wait for
        deadline = time.monotonic() + wait_s
        while jvm.exit_code() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        exit_code = jvm.exit_code()
        if exit_code is None and query_failure is not None:
            lost = executor_died(self.memory, query_failure)
            if lost is not None:
                return lost
        logged = read_log(jvm.log, self.log_from) + "\n" + (query_failure or "")
        if exit_code is None and find_cause(logged).oom is None:
            return None
        return jvm_died(
            jvm, exit_code=exit_code, log_from=self.log_from, memory=self.memory, query_failure=query_failure
        )

    @contextlib.contextmanager
    def reporting(self) -> Iterator[None]:
        """Turn whatever fails once the JVM is gone (py4j's refused connection, a broken query) into
        the JVM's own error."""
        try:
            yield
        except JvmDiedError:
            raise
        except Exception as e:
            dying = self.died() or _looks_like_lost_jvm(e)
            err = self.error(wait_s=DEATH_WAIT_S) if dying else None
            if err is None:
                raise
            raise err from e
