"""The monitor's CPU accounting covers a process tree, cheaply, and its observations add up."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from policy.monitor import Monitor, ProcessTreeCpu

# Bounded waits: each ends as soon as its event happens; the deadline only stops a test that hangs.
WAIT_S = 30.0

# Waits for a go file, burns 0.4 s of CPU, writes a done file, then sleeps: the test decides when it burns.
BURN = (
    "import os, sys, time\n"
    "go, done = sys.argv[1], sys.argv[2]\n"
    "while not os.path.exists(go): time.sleep(0.01)\n"
    "t = time.process_time()\n"
    "while time.process_time() - t < 0.4: pass\n"
    "open(done, 'w').close()\n"
    "time.sleep(60)\n"
)


def _wait(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"{what} did not happen within {WAIT_S:g} s"
        time.sleep(0.02)


def _asleep(proc: psutil.Process) -> bool:
    return proc.status() == psutil.STATUS_SLEEPING


def test_the_cpu_of_descendants_is_counted_and_walking_the_tree_is_rare(tmp_path: Path) -> None:
    go, done = tmp_path / "go", tmp_path / "done"
    burner = [BURN, str(go), str(done)]
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', *{burner!r}])"
    parent = subprocess.Popen([sys.executable, "-c", child])
    walks = []

    def roots() -> list[int]:
        walks.append(time.time())
        return [parent.pid]

    try:
        _wait(lambda: bool(psutil.Process(parent.pid).children()), "the grandchild's start")
        cpu = ProcessTreeCpu(roots, rescan_every=10)
        cpu.seconds()  # the walk finds the grandchild while it waits: it is counted from here
        walked = len(walks)
        go.touch()
        _wait(done.exists, "the grandchild's 0.4 s burn")
        assert cpu.seconds() >= 0.35
        for _ in range(4):  # between walks only the known processes are read
            cpu.seconds()
        assert len(walks) == walked
    finally:
        with contextlib.suppress(psutil.Error):  # the grandchild first, while it is still the parent's
            for proc in psutil.Process(parent.pid).children(recursive=True):
                proc.kill()
        parent.kill()
        parent.wait()


def test_an_observation_turns_counters_into_rates() -> None:
    clock = iter([100.0, 101.0, 102.0])
    released, committed = iter([0, 10_000, 22_000]), iter([0, 8_000, 15_000])
    monitor = Monitor(
        cpu=ProcessTreeCpu(lambda: [os.getpid()]),
        vm_cores=lambda: 1,
        released=lambda: next(released),
        committed=lambda: next(committed),
        last_epoch_s=lambda: 1.5,
        origin=100.0,
        clock=lambda: next(clock),
    )
    first, second = monitor.observe(), monitor.observe()
    assert first.cpu is None and first.input_rate == 0.0
    assert (second.t, second.input_rate, second.processed_rate, second.backlog) == (1.0, 10_000, 8_000, 2_000)
    third = monitor.observe()
    assert third.backlog == 7_000 and third.queue_delay_s == 7_000 / 12_000


def test_a_process_counts_from_when_it_is_found_not_with_its_history() -> None:
    burn = (
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n"
        "print('burnt', flush=True)\ntime.sleep(60)\n"
    )
    busy = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline() == "burnt\n"
        proc = psutil.Process(busy.pid)
        _wait(lambda: _asleep(proc), "the burner's sleep")
        assert sum(proc.cpu_times()[:2]) >= 0.15  # its history: start-up and a 0.2 s burn
        cpu = ProcessTreeCpu(lambda: [busy.pid])
        assert cpu.seconds() == 0.0  # found now: nothing counted yet
    finally:
        busy.kill()
        busy.wait()


def test_the_epoch_utilisation_is_what_the_fixed_cost_leaves_of_an_epoch() -> None:
    """F = 0.3 s: a 1.2 s epoch spent 75 % of its time on records; a 0.2 s one (shorter than F, noise)
    reads 0."""
    epochs = iter([1.2, 0.2])
    monitor = Monitor(
        cpu=ProcessTreeCpu(lambda: [os.getpid()]),
        vm_cores=lambda: 1,
        released=lambda: 0,
        committed=lambda: 0,
        last_epoch_s=lambda: next(epochs),
        origin=0.0,
        epoch_fixed_s=0.3,
    )
    assert monitor.observe().utilisation == 0.75
    obs = monitor.observe()
    assert obs.utilisation == 0.0 and obs.load == 0.0


def test_a_mark_makes_the_next_observation_report_the_recent_input_rate() -> None:
    """Released offsets 0, then 10,000 at the 0.75 s mark, then 16,000 at 1 s: the second's rate is
    16,000/s, its last quarter's 24,000/s; an observation without a mark reports no recent rate."""
    clock = iter([0.0, 0.75, 1.0, 2.0])
    released = iter([0, 10_000, 16_000, 30_000])
    monitor = Monitor(
        cpu=ProcessTreeCpu(lambda: [os.getpid()]),
        vm_cores=lambda: 1,
        released=lambda: next(released),
        committed=lambda: 0,
        last_epoch_s=lambda: 1.0,
        origin=0.0,
        clock=lambda: next(clock),
    )
    monitor.observe()
    monitor.mark()
    obs = monitor.observe()
    assert (obs.input_rate, obs.recent_input_rate, obs.arrival_rate) == (16_000, 24_000, 24_000)
    assert monitor.observe().recent_input_rate is None


def test_a_slow_cpu_read_does_not_inflate_the_input_rate() -> None:
    """A paced source releases 10,000 events/s by the clock; reading the process tree's CPU takes 0.3 s
    (a loaded machine). The rates pair each offset with the clock read beside it, so both the second's
    rate and the recent quarter-second's stay 10,000/s."""
    now = [0.0]

    class SlowCpu(ProcessTreeCpu):
        def seconds(self) -> float:
            now[0] += 0.3
            return 0.0

    monitor = Monitor(
        cpu=SlowCpu(lambda: [os.getpid()]),
        vm_cores=lambda: 1,
        released=lambda: int(10_000 * now[0]),
        committed=lambda: 0,
        last_epoch_s=lambda: 1.0,
        origin=0.0,
        clock=lambda: now[0],
    )
    monitor.observe()
    now[0] = 1.0
    monitor.mark()
    now[0] = 1.25
    obs = monitor.observe()
    assert obs.input_rate == pytest.approx(10_000) and obs.recent_input_rate == pytest.approx(10_000)
