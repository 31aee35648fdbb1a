"""Pinning running processes to CPUs, every thread of them.

Why every thread: Linux keeps CPU affinity per thread, and a thread takes its starter's. Pinning a
process's main thread after the fact leaves its JVM's or Python's other threads where they were.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from core.spark.cluster import descendants


def pin_process(pid: int, cpus: frozenset[int]) -> None:
    """Pin every thread of `pid` to `cpus`; a process that has exited is left alone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return
    for tid in tids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.sched_setaffinity(int(tid), cpus)


def pin_tree(pid: int, cpus: frozenset[int]) -> None:
    """Pin `pid` and everything it has started (an executor JVM, its Python daemon and workers): those
    it starts later inherit the pinning."""
    for p in [pid, *descendants(pid)]:
        pin_process(p, cpus)


@contextlib.contextmanager
def thread_cpus(cpus: frozenset[int]) -> Iterator[None]:
    """Let the calling thread use `cpus` too for a moment.

    The drill's child pins itself to the VM cores, but a new VM is pinned to other cores, and
    `StandaloneCluster.add_worker` only accepts CPUs the calling thread may use. Widening this thread
    (Linux affinity is per thread) for the call keeps the driver pinned and lets the worker be started.
    """
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, before | cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
