"""Which code a worker runs: a digest of the worker's sources, which the agent compares at Hello.

Why: a worker's result is checked for what its program makes of the chunk (schema, records read,
router/agent/result_check.py), but a worker deployed from other sources (an older `sponge deploy`, a
local edit not deployed yet) can make a plausible wrong answer. The agent and every worker compute the
same digest over the sources a deployment packages (infra/deploy/code_package.py takes its file list
from here), and the agent refuses a worker whose digest differs. The generated gRPC modules are left
out: each machine makes them from agent.proto with its own grpcio-tools, and PROTOCOL_VERSION covers
the protocol itself.

Light on purpose (hashlib, pathlib): the worker computes it once per process, at its first Hello.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from pathlib import Path

CODE_PACKAGES = ("lambda_worker", "merge", "core")
CODE_SUFFIXES = (".py", ".pyi", ".properties")
GENERATED = "core/wire/_generated/"
ROOT = Path(__file__).resolve().parents[2]  # the directory holding the packages, here and on Lambda


def code_files(root: Path = ROOT) -> Iterator[tuple[Path, str]]:
    """The worker's source files under `root`, with their names relative to it, in a fixed order."""
    for package in CODE_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in CODE_SUFFIXES:
                yield path, path.relative_to(root).as_posix()


@functools.cache
def build_id(root: Path = ROOT) -> str:
    """The digest of the worker's sources under `root` (names and contents), generated modules aside."""
    digest = hashlib.sha256()
    for path, name in code_files(root):
        if not name.startswith(GENERATED):
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
