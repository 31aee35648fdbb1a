"""A LocalStack of the tests' own: its venv, a free 127.0.0.1 port, a temporary state directory.

Why not the developer's `make localstack` instance: tests must not deploy into, or stop, what a person
is using, and must start from nothing. Why no skip: LocalStack's virtualenv is part of `make setup`,
so a missing one is a broken set-up, reported as a failure that says how to fix it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.localstack.launcher import LocalStackConfig, LocalStackHandle, start, stop
from router.agent_process import free_port

RUNTIME_SCRIPT = "sponge_executor/runtime.py"


@contextlib.contextmanager
def running_localstack(
    state_dir: Path, extra_env: tuple[tuple[str, str], ...] = ()
) -> Iterator[tuple[LocalStackConfig, LocalStackHandle]]:
    """`extra_env`: LocalStack settings of the test's own, e.g. LAMBDA_KEEPALIVE_MS for an idle lifetime
    of a few seconds."""
    config = LocalStackConfig(state_dir=state_dir, port=free_port(), extra_env=extra_env)
    if not config.python.exists():
        pytest.fail(
            f"LocalStack's virtualenv {config.venv} is missing: run make localstack-setup (or make setup)"
        )
    handle = start(config)
    try:
        yield config, handle
    finally:
        stop(config)


def runtime_pids(localstack_pid: int) -> list[int]:
    """The Lambda runtime processes (sponge_executor/runtime.py) that this LocalStack started."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == localstack_pid and RUNTIME_SCRIPT in cmdline:
            pids.append(int(entry.name))
    return pids


def kill(pids: list[int]) -> int:
    """SIGKILL these runtime processes (each leads its own process group); how many were alive."""
    killed = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
            killed += 1
    return killed


def zip_handler(path: Path, source: str) -> bytes:
    """A deployment zip holding one module, app.py."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("app.py", source)
    return path.read_bytes()
