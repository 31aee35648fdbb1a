"""Pinning a running process tree: every thread of the process and of what it started moves, and what
it starts afterwards inherits the pinning. Fast: plain Python processes, no Spark."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from core.spark.affinity import pin_process, pin_tree
from core.spark.cluster import descendants

CPUS = sorted(os.sched_getaffinity(0))

# A parent with a second thread and a child process, both alive until killed.
TREE = """
import subprocess, sys, threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("ready", flush=True)
time.sleep(600)
"""


def _threads(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]


def test_a_tree_s_every_thread_and_process_is_pinned() -> None:
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while not descendants(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = descendants(proc.pid)
        one = frozenset(CPUS[:1])
        pin_tree(proc.pid, one)
        assert len(_threads(proc.pid)) >= 2 and all(a == one for a in _threads(proc.pid))
        assert all(a == one for a in _threads(child))
        pin_process(proc.pid, frozenset(CPUS))  # the process alone: its child keeps its pinning
        assert all(a == set(CPUS) for a in _threads(proc.pid)) and all(a == one for a in _threads(child))
    finally:
        for pid in descendants(proc.pid):
            os.kill(pid, 9)
        proc.kill()
        proc.wait()
    pin_process(proc.pid, frozenset(CPUS))  # a process that has exited is left alone
