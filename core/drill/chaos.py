"""Random fault schedules on Spark: each an offloaded `sponge run` of its own, checked record by record.

Why a process per schedule: a driver kill must kill a driver and nothing else, and a resumed run must
start from nothing but what the killed one left in its output, as a user's does. Schedule i of seed S
is drawn from seed S+i (core/fault_schedule.py) among every kind of fault a run can inject, the
driver's own kill included, each fired by an event (an epoch committed, a chunk dispatched) so that it
falls at the same point on any machine. A run whose driver was killed is resumed with `--resume` and
the faults that do not count epochs or chunks: those that do would fire again at once in the
resumed run, whose epochs go on counting. The output, once the run finishes, is compared with the
batch reference (DuckDB, core/nexmark/reference.py) by `check_records`: lost, duplicated and
unexpected records, as the protocol bench counts them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from core.chaos_tally import ScheduleOutcome
from core.fault_schedule import random_schedule
from core.fault_spec import COUNTS, DRIVER_KILL, KINDS, FaultSpec
from core.results import check_records, read_results

SPONGE = (sys.executable, "-c", "from core.cli.main import main; main()")
SIGKILLED = -9
CHUNK_TIMEOUT_S = 2.0  # a stalled worker's chunk is taken back this soon: a schedule stays short
RUN_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class ChaosRun:
    """The run every schedule makes of `query`, but for its faults."""

    query: str
    events: int
    batch_events: int
    offload_share: float
    workers: int

    @property
    def epochs(self) -> int:
        return max(3, self.events // self.batch_events)

    def argv(self, output: Path, faults: tuple[FaultSpec, ...], resume: bool = False) -> list[str]:
        args = [
            *SPONGE, "run", self.query,
            "--events", str(self.events),
            "--seed", "1",
            "--batch-events", str(self.batch_events),
            "--offload-share", str(self.offload_share),
            "--workers", str(self.workers),
            "--chunk-timeout", str(CHUNK_TIMEOUT_S),
            "--output", str(output),
        ]  # fmt: skip
        for spec in faults:
            args += ["--inject", spec.text()]
        return [*args, "--resume"] if resume else args

    def replay(self) -> str:
        return (
            f"sponge chaos {self.query} --schedules 1 --seed {{seed}} --events {self.events} "
            f"--batch-events {self.batch_events} --offload-share {self.offload_share} "
            f"--workers {self.workers}"
        )


def schedule(run: ChaosRun, seed: int) -> tuple[FaultSpec, ...]:
    return random_schedule(seed, epochs=run.epochs, chunks=4, kinds=tuple(KINDS))


def resumed(faults: tuple[FaultSpec, ...]) -> tuple[FaultSpec, ...]:
    """The faults a resumed run keeps: those that count no epochs or chunks, which would all fire again
    at once (a resumed run's epochs go on counting)."""
    return tuple(f for f in faults if not any(f.get(c) is not None for c in COUNTS))


def run_schedule(
    run: ChaosRun, seed: int, reference: pa.Table, work: Path, say: Callable[[str], None]
) -> ScheduleOutcome:
    """One schedule: run (and resume after a driver kill), then check the output; a passing
    schedule's output is removed, a failing one's kept in `work` for a look."""
    started = time.monotonic()
    faults = schedule(run, seed)
    texts = tuple(f.text() for f in faults)
    out = work / f"seed-{seed}"
    error = ""
    done = _sponge(run.argv(out, faults))
    if done.returncode == SIGKILLED and any(f.kind == DRIVER_KILL for f in faults):
        say(f"  seed {seed}: the driver was killed; resuming from its checkpoint")
        done = _sponge(run.argv(out, resumed(faults), resume=True))
    if done.returncode != 0:
        error = f"sponge run exited with {done.returncode}: {_tail(done.stderr)}"
    try:
        actual = read_results(out, reference.schema) if not error else reference.schema.empty_table()
        check = check_records(actual.cast(reference.schema), reference)
    except Exception as e:  # an output that cannot be read is a failed schedule, not a crash of chaos
        error = error or f"cannot read the output: {type(e).__name__}: {e}"
        check = check_records(reference.schema.empty_table(), reference)
    outcome = ScheduleOutcome.checked(seed, texts, check, time.monotonic() - started, error)
    if outcome.ok:
        shutil.rmtree(out, ignore_errors=True)
    return outcome


def _sponge(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as e:
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return subprocess.CompletedProcess(argv, 124, "", f"timed out after {RUN_TIMEOUT_S:g} s; {stderr}")


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)[-600:]
