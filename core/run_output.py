"""A run's output directory: claimed by a new run, continued by `--resume`, never anyone else's.

Why a marker: the output holds the run's checkpoint (Spark's offsets and state, the routing log, the
agent's stashed records and key-group states), so it is the only thing a crashed run can be resumed
from, and it sits wherever the user pointed `--output`. A run therefore never deletes or writes into
a directory it did not create: it claims an empty or new one by writing `MARKER` first, and a later
run finds the marker and either resumes (`--resume`, checking it is the same run) or refuses.
Callers that own a directory of their own runs (a drill's per-policy outputs, a bench's work dir)
may replace a marked one; an unmarked one is refused there too.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from core import atomic_write
from core.errors import ConfigError

MARKER = "_sponge_run.json"  # a leading underscore: Spark's Parquet readers skip it


class Existing(StrEnum):
    """What a run does with an output that already holds a sponge run."""

    REFUSE = "refuse"  # `sponge run` without --resume
    RESUME = "resume"  # continue it from its checkpoint
    REPLACE = "replace"  # a caller's own scratch run (drills, benches): start it over


def claim(out: Path, identity: Mapping[str, Any], existing: Existing) -> bool:
    """Make `out` this run's output; True when it continues the run already there.

    `identity` is what fixes the run's results (query, events, seed, windows, input, offloading): a
    resumed run must match it, or its checkpoint would be replayed against another job.
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"the output {out} is a file", hint="pass a new or empty directory as --output")
    marker = out / MARKER
    occupied = out.is_dir() and any(out.iterdir())
    if occupied and not marker.is_file():
        raise ConfigError(
            f"the output {out} holds files sponge did not write; a run never writes into or deletes them",
            hint="pass a new or empty directory as --output",
        )
    if not occupied:
        if existing is Existing.RESUME:
            raise ConfigError(f"there is no run to resume at {out}", hint="drop --resume to start one there")
        _write_marker(out, identity)
        return False
    recorded = _read_marker(marker)
    if existing is Existing.REPLACE:
        shutil.rmtree(out)
        _write_marker(out, identity)
        return False
    if existing is Existing.REFUSE:
        raise ConfigError(
            f"the output {out} holds a sponge run of {recorded.get('query', '?')} "
            f"(started {recorded.get('started', '?')}); a run never overwrites another",
            hint="pass --resume to continue it from its checkpoint, or another --output",
        )
    differ = [
        f"{k} {recorded['identity'].get(k)!r} there, {v!r} here"
        for k, v in _plain(identity).items()
        if recorded["identity"].get(k) != v
    ]
    if differ:
        raise ConfigError(
            f"the run at {out} is another job than this one: {'; '.join(differ)}",
            hint="resume it with the flags it was started with, or pass another --output",
        )
    return True


def _plain(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The identity as it reads back from JSON (tuples become lists, paths strings)."""
    return json.loads(json.dumps(dict(identity), default=str))


def _write_marker(out: Path, identity: Mapping[str, Any]) -> None:
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
    body = {"query": identity.get("query"), "started": started, "identity": _plain(identity)}
    atomic_write.write_text(out / MARKER, json.dumps(body, indent=2))


def _read_marker(marker: Path) -> dict[str, Any]:
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
        if not isinstance(recorded, dict) or not isinstance(recorded.get("identity"), dict):
            raise ValueError("no identity")
        return recorded
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"the run marker {marker} is malformed ({e})",
            hint="sponge writes it whole when a run starts; restore it, or pass another --output",
        ) from None
