"""The monitor's CPU accounting covers a process tree, cheaply, and its observations add up."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from policy.monitor import Monitor, ProcessTreeCpu

BURN = (
    "import time\ntime.sleep(1)\nt = time.process_time()\n"
    "while time.process_time() - t < {s}: pass\ntime.sleep(30)"
)


def test_the_cpu_of_descendants_is_counted_and_walking_the_tree_is_rare() -> None:
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN.format(s=0.4)!r}])"
    parent = subprocess.Popen([sys.executable, "-c", child])
    walks = []

    def roots() -> list[int]:
        walks.append(time.time())
        return [parent.pid]

    try:
        cpu = ProcessTreeCpu(roots, rescan_every=10)
        deadline = time.time() + 20
        while cpu.seconds() < 0.35 and time.time() < deadline:  # found asleep, it then burns 0.4 s
            time.sleep(0.1)
            cpu._samples = 0  # walk again: the grandchild may not exist yet
        assert cpu.seconds() >= 0.35
        walked = len(walks)
        for _ in range(4):  # between walks only the known processes are read
            cpu.seconds()
        assert len(walks) == walked
    finally:
        parent.kill()
        os.system(f"pkill -P {parent.pid} >/dev/null 2>&1")


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
    assert third.cost_ms < 50


def test_a_process_counts_from_when_it_is_found_not_with_its_history() -> None:
    busy = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.0).replace("time.sleep(1)", "") + "\n"])
    try:
        time.sleep(0.5)  # it has spent its start-up CPU
        cpu = ProcessTreeCpu(lambda: [busy.pid])
        assert cpu.seconds() == 0.0  # found now: nothing counted yet
    finally:
        busy.kill()


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
