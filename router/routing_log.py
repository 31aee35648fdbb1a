"""The routing log: which offload plan each source offset was routed by, fixed once and for all.

Why a log keyed by offsets: a micro-batch that Spark replays (a retried task, a restarted query)
must split its records exactly as the first attempt did, or a record would be counted twice or not
at all. The controller (the pinned `--offload-share`, later the policy loop) only writes the
*current* plan; a reader that plans a range of offsets asks the log, which hands out the plan that
already covers those offsets, and appends the current plan only for offsets nobody has planned yet
(at the high-water mark). Two readers of one stream (the VM share and the offloaded share, separate
processes) therefore agree on every record, and so does any replay.

Layout under the offload directory (beside the query's checkpoint, so it lives as long as it):
`plan.json` (the current plan), `routing-<stream>.jsonl` (lines {"from": offset, "plan": {...}}),
`routing-<stream>.hwm` (the high-water mark) and `routing-<stream>.lock`.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core import atomic_write
from core.errors import ConfigError
from core.offload_plan import OffloadPlan, offloaded_mask

PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class Segment:
    """`plan` routes every offset from `start` up to the next segment's start."""

    start: int
    plan: OffloadPlan


def write_current_plan(directory: Path, plan: OffloadPlan) -> None:
    """Publish the plan readers take for offsets not yet routed (atomic: readers never see half a file)."""
    atomic_write.write_text(directory / PLAN_FILE, plan.dumps())


def read_current_plan(directory: Path) -> OffloadPlan:
    path = directory / PLAN_FILE
    try:
        return OffloadPlan.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"no offload plan at {path}", hint="the runner writes it before the query starts"
        ) from None


class RoutingLog:
    """The log of one stream (one source entity of one query run)."""

    def __init__(self, directory: Path, stream: str) -> None:
        self.directory = directory
        self.stream = stream
        directory.mkdir(parents=True, exist_ok=True)
        self._log = directory / f"routing-{stream}.jsonl"
        self._hwm = directory / f"routing-{stream}.hwm"
        self._lock = directory / f"routing-{stream}.lock"

    @staticmethod
    def streams(directory: Path) -> list[str]:
        """The streams with a routing log under `directory`."""
        return sorted(p.name[len("routing-") : -len(".jsonl")] for p in directory.glob("routing-*.jsonl"))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def segments(self) -> list[Segment]:
        if not self._log.exists():
            return []
        out = []
        for line in self._log.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                out.append(Segment(int(entry["from"]), OffloadPlan.from_json(entry["plan"])))
        return out

    def high_water_mark(self) -> int:
        return int(self._hwm.read_text()) if self._hwm.exists() else 0

    def plan_range(self, start: int, end: int, current: OffloadPlan) -> tuple[Segment, ...]:
        """The segments routing offsets [start, end), recording `current` for offsets not yet routed."""
        if end < start:
            raise ConfigError(f"offset range [{start}, {end}) is reversed")
        with self._locked():
            segments = self.segments()
            hwm = self.high_water_mark()
            if end > hwm:
                if not segments or segments[-1].plan != current:
                    segment = Segment(hwm, current)
                    with open(self._log, "a") as f:
                        f.write(json.dumps({"from": segment.start, "plan": current.to_json()}) + "\n")
                        f.flush()
                        os.fsync(f.fileno())
                    segments.append(segment)
                atomic_write.write_text(self._hwm, str(end))
        return covering(segments, start, end)


def covering(segments: Sequence[Segment], start: int, end: int) -> tuple[Segment, ...]:
    """The segments that route some offset of [start, end)."""
    out = []
    for i, seg in enumerate(segments):
        stop = segments[i + 1].start if i + 1 < len(segments) else None
        if seg.start < end and (stop is None or stop > start):
            out.append(seg)
    return tuple(out)


def routed_mask(segments: Sequence[Segment], record_ids: np.ndarray) -> np.ndarray:
    """True for each record (by its source offset) that its segment's plan sends to the workers.

    Routing is by record share; a plan that offloads key groups is refused by `offloaded_mask`
    until the readers hand it the key column.
    """
    ids = np.asarray(record_ids, dtype=np.int64)
    mask = np.zeros(len(ids), dtype=bool)
    for i, seg in enumerate(segments):
        if not seg.plan.offloads:
            continue
        stop = segments[i + 1].start if i + 1 < len(segments) else np.iinfo(np.int64).max
        sel = (ids >= seg.start) & (ids < stop)
        if sel.any():
            mask[sel] = offloaded_mask(seg.plan, None, ids[sel])
    return mask
