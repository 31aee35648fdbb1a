"""The routing log: which offload plan each source offset was routed by, fixed once and for all.

Why a log keyed by offsets: a micro-batch that Spark replays (a retried task, a restarted query)
must split its records exactly as the first attempt did, or a record would be counted twice or not
at all. The controller (the pinned `--offload-share`, later the policy loop) only writes the
*current* plan; a reader that plans a range of offsets asks the log, which hands out the plan that
already covers those offsets, and appends the current plan only for offsets nobody has planned yet
(at the high-water mark). Two readers of one stream (the VM share and the offloaded share, separate
processes) therefore agree on every record, and so does any replay.

One log per query, not per source: the offsets are one event index that every entity's stream
shares, and a plan that offloads key groups must send an auction (offset 100) and its bids (offset
105) to the same side. With one high-water mark, every offset has one plan, whichever stream reads
it first.

Layout under the offload directory (beside the query's checkpoint, so it lives as long as it):
`plan.json` (the current plan), `routing.jsonl` (lines {"from": offset, "plan": {...}}),
`routing.hwm` (the mark kept on disk), `routing.at` (the high-water mark of this boot),
`epoch.end` (the end the streams agreed on for the epoch being planned) and `routing.lock`.

Crashes. A writer (under the lock) appends a line, flushes it to disk, and only then moves the
high-water mark (an atomic replace). The mark is therefore the commit point: an offset below it has
been handed out and its plan never changes; a line that starts at or beyond it was written by a
writer that died before handing anything out. So readers ignore such lines, the next writer drops
them (it rewrites the log without them, atomically, before appending its own), and a final line
without its newline (a torn write) is treated the same way. Any other line that does not parse is
corruption: which plan routed those offsets is lost, so the log raises instead of guessing, which
would re-route records a committed epoch already counted.

Power loss, and why two marks. Flushing the mark to disk in every epoch cost a routed query two
fsyncs per epoch, right after Spark's own checkpoint writes (docs/adr/0053). So the mark on disk,
`routing.hwm`, is a reservation: it is flushed whenever a line is appended and whenever the offsets
handed out reach it, and then set `reserve` offsets past them. The exact mark, `routing.at`, is
replaced whole but not flushed, and names the boot it was written in. A process that crashes leaves
it in place; a machine that loses power comes back in another boot, where it is ignored and the
reservation stands in for it. No offset at or beyond the reservation was ever handed out, so a plan
appended after a power loss routes only offsets nobody has read, at most `reserve` offsets later
than it would have. The reserve is the log's writer's to choose, in its units: the generator's
events are many and fine, a source's files few and coarse (reserve 0: every mark is flushed, as
before). Without a boot id (not Linux) every mark is flushed too.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from core import atomic_write
from core.errors import ConfigError, InputError
from core.offload_plan import KEY_GROUPS, OffloadPlan, offloaded_mask

PLAN_FILE = "plan.json"
LOG_FILE = "routing.jsonl"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_CORRUPT_HINT = (
    "the routing log fixes which plan routed each offset of the query's checkpointed epochs, so it "
    "cannot be repaired by guessing: restore the offload directory from a backup, or restart the "
    "query with a fresh checkpoint and offload directory"
)


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
        return OffloadPlan.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"no offload plan at {path}", hint="the runner writes it before the query starts"
        ) from None
    except (ConfigError, UnicodeDecodeError) as e:
        detail = e.message if isinstance(e, ConfigError) else str(e)
        raise ConfigError(
            f"the offload plan {path} is malformed: {detail}",
            hint=(
                "it is written whole by the runner or the policy loop (write_current_plan); if it was "
                'edited by hand, write a plan\'s JSON, e.g. {"format":1,"version":1,"share":0.5,'
                '"key_groups":[],"workers":2}'
            ),
        ) from None


@dataclass(frozen=True)
class _Entry:
    """One parsed line of the log and the byte offset it starts at (where a rewrite may cut)."""

    segment: Segment
    offset: int


@dataclass(frozen=True)
class _Contents:
    """The log as read: its bytes, its complete lines parsed, and where the last complete line ends."""

    data: bytes
    entries: list[_Entry]
    complete_end: int

    def committed(self, hwm: int) -> tuple[list[Segment], int]:
        """The segments of offsets below `hwm`, and the byte length of the log that holds them.

        Starts never decrease, so the committed lines are a prefix of the log. Two segments with the
        same start (a log written before crashed lines were dropped) route nothing by the first.
        """
        segments: list[Segment] = []
        cut = self.complete_end
        for entry in self.entries:
            if entry.segment.start >= hwm:
                cut = entry.offset
                break
            if segments and segments[-1].start == entry.segment.start:
                segments.pop()
            segments.append(entry.segment)
        return segments, cut


class RoutingLog:
    """The log of one query run: every routed stream of it plans its offsets here."""

    def __init__(self, directory: Path, reserve: int = 0) -> None:
        """`reserve`: how many offsets the mark on disk may run ahead of those handed out (see the
        module docstring); 0 flushes every mark."""
        self.directory = directory
        self.reserve = reserve
        directory.mkdir(parents=True, exist_ok=True)
        self._log = directory / LOG_FILE
        self._hwm = directory / "routing.hwm"
        self._at = directory / "routing.at"
        self._lock = directory / "routing.lock"
        self._epoch = directory / "epoch.end"

    def exists(self) -> bool:
        return self._log.exists()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def segments(self) -> list[Segment]:
        """The committed segments, in order of their starts; needs no lock.

        The mark is read before the log: every line below it was complete and flushed before the
        mark moved, and no writer ever drops such a line, so the pair is consistent even while a
        writer appends or drops a crashed writer's lines.
        """
        hwm = self.high_water_mark()
        return self._committed(self._read(), hwm)[0]

    def high_water_mark(self) -> int:
        """One past the last offset handed out (0 before the first): this boot's exact mark, or after a
        power loss the reservation on disk, which no offset handed out ever reached."""
        return self._mark(self._reserved())

    def _mark(self, reserved: int) -> int:
        exact = self._exact()
        return exact if exact is not None and exact <= reserved else reserved

    def _reserved(self) -> int:
        try:
            text = self._hwm.read_text(encoding="utf-8")
        except FileNotFoundError:
            return 0
        try:
            value = int(text.strip())
        except ValueError:
            value = -1
        if value < 0:
            raise InputError(
                f"routing log mark {self._hwm} holds {text[:40]!r}, not an offset", hint=_CORRUPT_HINT
            )
        return value

    def _exact(self) -> int | None:
        """The exact mark if this boot wrote it; None otherwise (the reservation then stands in)."""
        boot = _boot_id()
        if boot is None:
            return None
        try:
            written_in, value = self._at.read_text(encoding="utf-8").split()
            return int(value) if written_in == boot and int(value) >= 0 else None
        except (FileNotFoundError, ValueError):
            return None  # a mark it cannot read is one it does not need: the reservation is safe

    def _move_mark(self, end: int, appended: bool, reserved: int) -> None:
        """Hand out offsets below `end`: the reservation first, flushed, when a line was appended or
        `end` passes it; then this boot's exact mark, replaced whole without a flush."""
        boot = _boot_id()
        if boot is None or self.reserve <= 0:
            atomic_write.write_text(self._hwm, str(end))
            return
        if appended or end > reserved:
            atomic_write.write_text(self._hwm, str(end + self.reserve))
        atomic_write.write_text(self._at, f"{boot} {end}", durable=False)

    def plan_range(self, start: int, end: int, current: OffloadPlan) -> tuple[Segment, ...]:
        """The segments routing offsets [start, end), recording `current` for offsets not yet routed."""
        if end < start:
            raise ConfigError(f"offset range [{start}, {end}) is reversed")
        with self._locked():
            reserved = self._reserved()
            hwm = self._mark(reserved)
            contents = self._read()
            segments, cut = self._committed(contents, hwm)
            if cut < len(contents.data):
                # A writer died between its append and its mark: nobody was handed those lines.
                atomic_write.write_bytes(self._log, contents.data[:cut])
            if end > hwm:
                appended = not segments or segments[-1].plan != current
                if appended:
                    segment = Segment(hwm, current)
                    with open(self._log, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"from": segment.start, "plan": current.to_json()}) + "\n")
                        f.flush()
                        os.fsync(f.fileno())
                    segments.append(segment)
                self._move_mark(end, appended, reserved)
        return covering(segments, start, end)

    def agreed_end(self, start: int, end: int, last: str | None) -> tuple[int, str]:
        """The end of the micro-batch that starts at `start`, and the decision it came from (the caller
        passes that back as `last` next time): the first routed stream asked decides (`end`), every
        other stream of the query takes the same.

        Why: the workers' stream then covers exactly the offsets the VM's stream covers in every epoch,
        so its rows are never late against the VM's watermark and it needs no watermark of its own
        (docs/adr/0042). Spark asks every stream once per planning round, in the same order, so a
        stream asked again about the decision it took last is in a new round (the last one planned
        nothing) and decides afresh. A stream that starts behind the decided end (streams resumed
        from a checkpoint that did not align them) takes it too, which aligns them from then on. Not
        made durable: after a crash Spark asks every stream again, and a torn or missing file only
        means the first stream asked decides afresh.
        """
        with self._locked():
            try:
                recorded = self._epoch.read_text()
                recorded_start, recorded_end = (int(v) for v in recorded.split()[:2])
                if recorded != last and (recorded_start == start or recorded_end > start):
                    return recorded_end, recorded
            except (FileNotFoundError, ValueError):
                pass
            decision = f"{start} {end} {uuid.uuid4().hex}"
            self._epoch.write_text(decision)
        return end, decision

    def _committed(self, contents: _Contents, hwm: int) -> tuple[list[Segment], int]:
        segments, cut = contents.committed(hwm)
        if hwm > 0 and (not segments or segments[0].start != 0):
            raise InputError(
                f"routing log {self._log} has no plan for offset 0, but its mark {self._hwm} says "
                f"offsets below {hwm} were handed out",
                hint=_CORRUPT_HINT,
            )
        return segments, cut

    def _read(self) -> _Contents:
        """Parse every complete line; the bytes after the last newline are a torn write, left out."""
        try:
            data = self._log.read_bytes()
        except FileNotFoundError:
            return _Contents(b"", [], 0)
        entries: list[_Entry] = []
        offset = 0
        for number, line in enumerate(data.split(b"\n")[:-1], start=1):
            if line.strip():
                segment = self._parse(line, number)
                if entries and segment.start < entries[-1].segment.start:
                    raise InputError(
                        f"{self._log}:{number}: starts at offset {segment.start}, before the line above "
                        f"({entries[-1].segment.start})",
                        hint=_CORRUPT_HINT,
                    )
                entries.append(_Entry(segment, offset))
            offset += len(line) + 1
        return _Contents(data, entries, offset)

    def _parse(self, line: bytes, number: int) -> Segment:
        try:
            entry = json.loads(line.decode("utf-8"))
            if not isinstance(entry, dict) or set(entry) != {"from", "plan"}:
                raise ValueError('not an object with exactly "from" and "plan"')
            start = entry["from"]
            if isinstance(start, bool) or not isinstance(start, int) or start < 0:
                raise ValueError(f'"from" is {start!r}, not an offset')
            return Segment(start, OffloadPlan.from_json(entry["plan"]))
        except (ValueError, TypeError, ConfigError) as e:  # JSON and UTF-8 errors are ValueErrors
            detail = e.message if isinstance(e, ConfigError) else str(e)
            raise InputError(
                f"{self._log}:{number}: not a routing log line ({detail}): {line[:80]!r}", hint=_CORRUPT_HINT
            ) from None


def covering(segments: Sequence[Segment], start: int, end: int) -> tuple[Segment, ...]:
    """The segments that route some offset of [start, end)."""
    out = []
    for i, seg in enumerate(segments):
        stop = segments[i + 1].start if i + 1 < len(segments) else None
        if seg.start < end and (stop is None or stop > start):
            out.append(seg)
    return tuple(out)


def routed_mask(
    segments: Sequence[Segment], record_ids: np.ndarray, groups: np.ndarray | None = None
) -> np.ndarray:
    """True for each record (by its source offset) that its segment's plan sends to the workers.

    A stream that feeds a keyed stage passes each record's key group (`groups`) and is routed by the
    plan's key groups alone, so every record of a group goes one way (ADR 0024); any other stream is
    routed by the plan's record share alone.
    """
    ids = np.asarray(record_ids, dtype=np.int64)
    mask = np.zeros(len(ids), dtype=bool)
    for i, seg in enumerate(segments):
        if not seg.plan.offloads:
            continue
        stop = segments[i + 1].start if i + 1 < len(segments) else np.iinfo(np.int64).max
        sel = (ids >= seg.start) & (ids < stop)
        if not sel.any():
            continue
        if groups is None:
            mask[sel] = offloaded_mask(replace(seg.plan, key_groups=frozenset()), None, ids[sel])
        else:
            owned = np.zeros(KEY_GROUPS, dtype=bool)
            owned[sorted(seg.plan.key_groups)] = True
            mask[sel] = owned[np.asarray(groups)[sel]]
    return mask


@lru_cache(maxsize=1)
def _boot_id() -> str | None:
    """This boot's id (Linux), which tells a mark written before a power loss from one written since."""
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip() or None
    except OSError:
        return None
