"""Monitoring for the policy loop: one Observation per second of the VM side.

Why these signals (Sponge 4.3 and its code, DESIGN.md 2 and 7): CPU utilisation of the Spark
processes says whether the VMs have headroom; the input rate, processed rate and backlog (source
offsets released but not yet committed) say how much work is queued and how fast it grows, which
CPU alone cannot (a saturated core reads 100 % whether the queue grows slowly or fast). Epoch
durations tell how long a record waits once it is in a micro-batch.

Each observation measures what it cost to take (`cost_ms`), because the paper budgets < 10 ms per
observation and ours must stay far below that.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class Observation:
    """What the VM side looked like over the last interval (rates are per second)."""

    t: float  # seconds since the trace started
    cpu: float | None  # utilisation (0..1) of the VM cores by the Spark processes; None on the first sample
    input_rate: float  # events released by the source per second
    processed_rate: float  # events committed per second
    backlog: int  # events released but not committed
    epoch_s: float | None  # duration of the last finished epoch
    vm_cores: int
    cost_ms: float  # what taking this observation cost
    utilisation: float | None = None  # share of the last epoch spent on records, 1 - F / T (see `load`)
    recent_input_rate: float | None = None  # input rate over the interval's last fraction (`arrival_rate`)
    # Per operator, in topological order (upstream first): its share of the VMs' busy time or its queue,
    # for the skewness rule (policy/skew.py). None when the monitor cannot tell operators apart.
    operator_loads: tuple[tuple[str, float], ...] | None = None

    def __post_init__(self) -> None:
        """A decision log stores the loads as JSON lists (or an object): read back, they compare equal
        to the tuples the live monitor made, so a replayed observation is the logged one."""
        loads = self.operator_loads
        if loads is not None:
            pairs = loads.items() if isinstance(loads, Mapping) else loads
            object.__setattr__(self, "operator_loads", tuple((str(n), float(v)) for n, v in pairs))

    @property
    def arrival_rate(self) -> float:
        """The input rate a burst is sized on: the second's rate, or its last fraction's when higher.

        A burst that starts inside a second fills only part of that second's rate; sized on it, the
        first burst epochs get a share that is too small and are the slowest of the burst. The last
        fraction shows the new rate at once; the higher of the two keeps the fall of a burst from
        reading as an early calm (the scale-down waits out its hold anyway).
        """
        return max(self.input_rate, self.recent_input_rate or 0.0)

    @property
    def load(self) -> float | None:
        """The VM's load as the policy reads it: the epoch utilisation when the fixed epoch cost F is
        known, else the CPU. A micro-batch engine with back-to-back triggers spends F per epoch whatever
        the rate, so its CPU reads busy at a fraction of its capacity (core/drill/calibrate.py)."""
        return self.utilisation if self.utilisation is not None else self.cpu

    @property
    def queue_delay_s(self) -> float:
        """Seconds the backlog needs at the current processing rate (the Sponge code's trigger)."""
        rate = max(self.processed_rate, self.input_rate, 1.0)
        return self.backlog / rate

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


class ProcessTreeCpu:
    """CPU seconds of a process and all its descendants (the Spark JVM and its Python workers).

    Walking the process tree reads every entry of /proc, which costs milliseconds on a busy host, so
    the tree is walked only every `rescan_every` samples (or when a known process has exited) and the
    samples in between read the CPU times of the processes already known. A process is counted from
    the walk that finds it: its CPU time before that is its own start-up, and adding it at once would
    put seconds of CPU into one sample. Spark's Python workers are long-lived, so what a worker forked
    between two walks spends before it is found is small; a process that exits keeps what it was
    counted for up to its last reading.
    """

    def __init__(self, root_pids: Callable[[], Sequence[int]], rescan_every: int = 5) -> None:
        self._root_pids = root_pids
        self._rescan_every = rescan_every
        self._procs: dict[int, psutil.Process] = {}
        self._base: dict[int, float] = {}  # CPU time of each process when it was found
        self._last: dict[int, float] = {}  # ... and at its last reading
        self._gone = 0.0  # what processes that exited were counted for
        self._samples = 0

    def seconds(self) -> float:
        if self._samples % self._rescan_every == 0 or not self._procs:
            self._rescan()
        self._samples += 1
        total = self._gone
        for pid, proc in list(self._procs.items()):
            try:
                t = _cpu(proc)
            except psutil.Error:
                self._forget(pid)
                self._samples = 0  # walk the tree again at the next sample
                continue
            self._last[pid] = t
            total += t - self._base[pid]
        return total

    def _rescan(self) -> None:
        found: dict[int, psutil.Process] = {}
        for pid in self._root_pids():
            try:
                root = self._procs.get(pid) or psutil.Process(pid)
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            for p in tree:
                found.setdefault(p.pid, self._procs.get(p.pid, p))
        for pid in [pid for pid in self._procs if pid not in found]:
            self._forget(pid)
        for pid, proc in found.items():
            if pid not in self._procs:
                try:
                    self._base[pid] = self._last[pid] = _cpu(proc)
                except psutil.Error:
                    continue
                self._procs[pid] = proc

    def _forget(self, pid: int) -> None:
        self._gone += self._last.pop(pid, 0.0) - self._base.pop(pid, 0.0)
        self._procs.pop(pid, None)


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


class Monitor:
    """Turns counters into an Observation each time `observe()` is called (the loop calls it each second,
    and `mark()` a fraction of a second before, for the recent input rate).

    `released()` and `committed()` are source offsets in events (released by the source's pace and
    committed by finished epochs); `last_epoch_s()` the duration of the last finished epoch.
    """

    def __init__(
        self,
        *,
        cpu: ProcessTreeCpu,
        vm_cores: Callable[[], int],
        released: Callable[[], int],
        committed: Callable[[], int],
        last_epoch_s: Callable[[], float | None],
        origin: float,
        clock: Callable[[], float] = time.time,
        epoch_fixed_s: float | None = None,
    ) -> None:
        self._cpu = cpu
        self._vm_cores = vm_cores
        self._released = released
        self._committed = committed
        self._last_epoch_s = last_epoch_s
        self._origin = origin
        self._clock = clock
        self._epoch_fixed_s = epoch_fixed_s  # F of the calibration: turns epoch durations into a load
        self._last: tuple[float, float, int, int] | None = None  # time, cpu seconds, released, committed
        self._mark: tuple[float, int] | None = None  # time and released offsets at `mark()`

    def mark(self) -> None:
        """Start the recent window: the next observation also reports the input rate since now."""
        released = self._released()
        self._mark = (self._clock(), released)

    def observe(self) -> Observation:
        """Why the reads come in this order: a rate is offsets over seconds, so the clock is read right
        after the offsets, and the process tree's CPU (slow on a loaded machine) only after both. Read
        the other way, a 0.3 s CPU read on a slow machine made a 10,000 events/s input look like
        110,000 over a recent window of a fraction of a second, and fired the input-rate trigger."""
        started = time.perf_counter()
        released, committed = self._released(), self._committed()
        now = self._clock()
        cpu_s = self._cpu.seconds()
        cores = self._vm_cores()
        cpu = None
        input_rate = processed_rate = 0.0
        if self._last is not None:
            t0, cpu0, rel0, com0 = self._last
            dt = max(now - t0, 1e-6)
            cpu = min(max((cpu_s - cpu0) / dt / max(cores, 1), 0.0), 1.0)
            input_rate = (released - rel0) / dt
            processed_rate = (committed - com0) / dt
        self._last = (now, cpu_s, released, committed)
        recent = None
        if self._mark is not None:
            t0, rel0 = self._mark
            recent = (released - rel0) / max(now - t0, 1e-6)
            self._mark = None
        epoch_s = self._last_epoch_s()
        utilisation = None
        if self._epoch_fixed_s is not None and epoch_s:
            utilisation = min(max(1.0 - self._epoch_fixed_s / epoch_s, 0.0), 1.0)
        return Observation(
            t=now - self._origin,
            cpu=cpu,
            input_rate=input_rate,
            processed_rate=processed_rate,
            backlog=max(released - committed, 0),
            epoch_s=epoch_s,
            vm_cores=cores,
            cost_ms=(time.perf_counter() - started) * 1000.0,
            utilisation=utilisation,
            recent_input_rate=recent,
        )
