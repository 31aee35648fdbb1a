"""The attempt number of the Spark task a data source is reading in: injected task failures fail a
task's first attempt only, so that its retry shows the agent's result cache at work."""

from __future__ import annotations


def task_attempt() -> int | None:
    """The running task's attempt (0 for the first), or None outside a Spark task."""
    from pyspark import TaskContext

    task = TaskContext.get()
    return task.attemptNumber() if task is not None else None
