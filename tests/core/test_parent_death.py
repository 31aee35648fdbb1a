"""core/parent_death.py: a child that armed the signal dies with its parent; one that did not survives.

The parent under test is a middle Python process that starts `sleep` and then is SIGKILLed, as an agent
or a test run killed mid-way would be. Its orphan is checked with psutil; an exited orphan may stay a
zombie for a while (whoever adopts it may be slow to reap it), so a zombie counts as gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# The middle process: starts `sleep 60` (armed or not), prints its pid, then waits to be killed.
MIDDLE = """
import subprocess, sys, time
from core import parent_death
armed = sys.argv[1] == "armed"
child = subprocess.Popen(["sleep", "60"], preexec_fn=parent_death.preexec_fn() if armed else None)
print(child.pid, flush=True)
time.sleep(60)
"""


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False


def _kill_pending(pid: int) -> bool:
    """True when a SIGKILL has been sent to `pid` and it has not acted on it yet."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
    return bool(pending & (1 << (signal.SIGKILL - 1)))


def _orphan_after_parent_killed(mode: str) -> int:
    """Start the middle process in `mode`, SIGKILL it once its `sleep` runs, reap it; the sleep's pid.

    The kernel sends a child's death signal while its parent exits, before the parent can be reaped: once
    `wait` returns, an armed child has been sent SIGKILL and the orphan has a new parent.
    """
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, mode], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert middle.stdout is not None
        pid = int(middle.stdout.readline())
        assert _running(pid)
    finally:
        middle.kill()
        middle.wait(10)
    return pid


@linux_only
def test_an_armed_child_is_killed_when_its_parent_dies() -> None:
    pid = _orphan_after_parent_killed("armed")
    deadline = time.monotonic() + 10  # a bounded wait: it ends when the orphan is gone
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


@linux_only
def test_an_unarmed_child_outlives_its_parent() -> None:
    """The control: without the request the orphan lives on, so the test above measures the request."""
    pid = _orphan_after_parent_killed("unarmed")
    try:
        # No waiting needed: the parent is reaped, so a death signal would have been sent by now.
        assert _running(pid) and not _kill_pending(pid)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()


@linux_only
def test_arm_reports_the_request_and_exits_when_the_parent_is_already_gone() -> None:
    def run(parent_pid: str) -> subprocess.CompletedProcess[str]:
        code = "import sys; from core import parent_death; print(parent_death.arm(int(sys.argv[1])))"
        return subprocess.run(
            [sys.executable, "-c", code, parent_pid], cwd=PROJECT_ROOT, capture_output=True, text=True,
            timeout=30, check=False,
        )

    ours = run(str(os.getpid()))
    assert ours.returncode == 0 and ours.stdout.strip() == "True"
    # A parent pid that is not ours stands for a parent that died before the request was made.
    gone = run(str(os.getpid() + 10_000_000))
    assert gone.returncode == 1 and gone.stdout == ""


def test_importing_it_loads_nothing_heavy() -> None:
    """The Lambda execution environment imports it before the handler, on every cold start."""
    code = "import sys; from core import parent_death; print(*(m in sys.modules for m in sys.argv[1:]))"
    p = subprocess.run(
        [sys.executable, "-c", code, "ctypes", "psutil"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=30, check=True,
    )
    assert p.stdout.split() == ["False", "False"]

