"""What the agent keeps for the key groups workers hold: stashed records and state versions, on disk.

Why on disk, beside the query's checkpoint: a replayed batch (a retried task, a restarted query or
agent) must find exactly what the first attempt found (ADR 0024). A stashed chunk is written before
its receipt is returned, so a receipt always names records that exist; a state version is written
before the seal that made it is answered, so the version a processor's committed state names always
exists. Writes are atomic (core/atomic_write.py) and keyed by what they hold, so writing one twice
(a retried task, a repeated seal) leaves the same file.

Garbage: batches commit in order, so a seal from version v proves every version below v-1 of that
group is no longer named by any state Spark could restore; those are dropped then.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from core import atomic_write
from core.errors import InputError
from core.wire.arrow_ipc import decode, encode
from merge.keyed_groups import GROUP

_CACHED_CHUNKS = 64
_ENTITY = re.compile(r"[a-z]{1,32}")


@dataclass(frozen=True)
class ChunkRef:
    """A stashed chunk: the records of one source task's offsets [start, end), part `seq`, of `entity`."""

    entity: str
    start: int
    end: int
    seq: int

    def __post_init__(self) -> None:
        """A chunk's name becomes a file name under the store: a request may not steer it elsewhere."""
        if not _ENTITY.fullmatch(self.entity):
            raise InputError(f"a stashed chunk's entity {self.entity[:60]!r} is not a source's name")
        if not 0 <= self.start <= self.end or self.seq < 0:
            raise InputError(
                f"a stashed chunk's offsets [{self.start}, {self.end}) part {self.seq} are malformed"
            )

    @property
    def name(self) -> str:
        return f"{self.entity}-{self.start}-{self.end}-{self.seq}.arrow"


class HandoffStore:
    def __init__(self, directory: Path) -> None:
        self.parts_dir = directory / "parts"
        self.state_dir = directory / "state"
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._chunks: OrderedDict[ChunkRef, pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    # ---- stashed records ----

    def stash(self, ref: ChunkRef, records: pa.Table) -> None:
        """Keep a chunk's records (with their key group in `GROUP`) until its groups' seals ran."""
        if GROUP not in records.column_names:
            raise ValueError(f"a stashed chunk needs its records' key group in column {GROUP!r}")
        target = self.parts_dir / ref.name
        if not target.exists():
            atomic_write.write_bytes(target, encode(records, "lz4"))

    def records(self, ref: ChunkRef, groups: Collection[int]) -> pa.Table:
        """The records of `groups` in a stashed chunk (the chunk is read once and kept a while: a batch
        asks for its groups in turn)."""
        with self._lock:
            table = self._chunks.get(ref)
            if table is None:
                path = self.parts_dir / ref.name
                if not path.exists():
                    raise KeyError(f"no stashed chunk {ref.name} under {self.parts_dir}")
                table = decode(path.read_bytes())
                self._chunks[ref] = table
                while len(self._chunks) > _CACHED_CHUNKS:
                    self._chunks.popitem(last=False)
            else:
                self._chunks.move_to_end(ref)
        wanted = pa.array(sorted(groups), table.schema.field(GROUP).type)
        return table.filter(pc.is_in(table[GROUP], value_set=wanted))

    # ---- state versions ----

    def _state_path(self, op: str, group: int, version: int) -> Path:
        return self.state_dir / op / str(group) / f"v{version}.arrow"

    def put_state(self, op: str, group: int, version: int, state: pa.Table) -> None:
        path = self._state_path(op, group, version)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write.write_bytes(path, encode(state, "lz4"))
        for old in path.parent.glob("v*.arrow"):
            if int(old.stem[1:]) < version - 1:
                old.unlink(missing_ok=True)

    def state(self, op: str, group: int, version: int) -> pa.Table | None:
        """Version `version` of a group's state, or None for version 0 (a group that starts empty)."""
        path = self._state_path(op, group, version)
        if path.exists():
            return decode(path.read_bytes())
        if version == 0:
            return None
        raise KeyError(f"state v{version} of {op} group {group} is gone (only the last two are kept)")
