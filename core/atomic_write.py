"""Replace a file so that readers, and a machine that loses power, see the old file or the new one
whole, never a torn one.

The bytes go to a temporary name beside the target (same directory, so the rename stays on one file
system; a unique name, so two attempts of the same task cannot interleave; a leading dot, so Spark's
file readers skip it), are flushed to disk, and are renamed over the target; the directory is then
flushed so the rename itself survives a crash.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path


def write_atomically(target: Path, write: Callable[[Path], None], durable: bool = True) -> None:
    """Call `write(tmp)` to fill a temporary file, then put it in place of `target`: durably, or with
    `durable=False` only whole (readers and a crashed process still never see a torn file, but a
    machine that loses power may come back with the old one)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        if durable:
            _fsync(tmp, os.O_RDONLY)
        os.replace(tmp, target)
        if durable:
            _fsync(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(target: Path, data: bytes) -> None:
    write_atomically(target, lambda tmp: tmp.write_bytes(data))


def write_text(target: Path, text: str, durable: bool = True) -> None:
    write_atomically(target, lambda tmp: tmp.write_text(text, encoding="utf-8"), durable)


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
