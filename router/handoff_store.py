"""What the agent keeps for the key groups workers hold: stashed records and state versions, on disk.

Why on disk, beside the query's checkpoint: a replayed batch (a retried task, a restarted query or
agent) must find exactly what the first attempt found (ADR 0024). A stashed chunk is written before
its receipt is returned, so a receipt always names records that exist; a state version is written
before the seal that made it is answered, so the version a processor's committed state names always
exists. Writes are atomic (core/atomic_write.py) and keyed by what they hold, so writing one twice
(a retried task, a repeated seal) leaves the same file.

State versions are kept one file per seal, holding each of its groups at its new version (ADR 0033).
Garbage: batches commit in order, so a seal from version v proves every version below v-1 of that
group is no longer named by any state Spark could restore; a file holding only such versions is
dropped then.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from core import atomic_write
from core.errors import InputError
from core.wire.arrow_ipc import decode, encode
from merge.keyed_groups import GROUP

_CACHED_FILES = 64
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
        self._tables: OrderedDict[Path, pa.Table] = OrderedDict()  # stashed chunks and seals' states
        self._indexes: dict[str, _StateIndex] = {}
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
        try:
            table = self._read(self.parts_dir / ref.name)
        except FileNotFoundError:
            raise KeyError(f"no stashed chunk {ref.name} under {self.parts_dir}") from None
        wanted = pa.array(sorted(groups), table.schema.field(GROUP).type)
        return table.filter(pc.is_in(table[GROUP], value_set=wanted))

    # ---- state versions ----

    def put_states(self, op: str, versions: Mapping[int, int], state: pa.Table) -> None:
        """Store one seal's new state: the key groups `versions` names, each at its version, in one file
        (one write and one flush per seal, not one per group: ADR 0025's measured cost).

        The file is named by its (group, version) list, so a repeated seal writes the same file. Once
        a group reaches version v, its versions below v-1 can no longer be named by a committed batch;
        a file none of whose groups is still at a version that can be named is dropped."""
        if not versions:
            return
        named = ",".join(f"{g}@{v}" for g, v in sorted(versions.items()))
        path = self.state_dir / op / f"{hashlib.blake2b(named.encode(), digest_size=12).hexdigest()}.arrow"
        meta = {**(state.schema.metadata or {}), _VERSIONS: json.dumps(sorted(versions.items())).encode()}
        atomic_write.write_bytes(path, encode(state.replace_schema_metadata(meta), "lz4"))
        with self._lock:
            index = self._index(op)
            index.add(path, dict(versions))
            for dead in index.dead(set(versions)):
                dead.unlink(missing_ok=True)

    def state(self, op: str, group: int, version: int) -> pa.Table | None:
        """The stored state holding version `version` of `group` (with the groups sealed beside it: the
        caller cuts its group out), or None for version 0 (a group that starts empty)."""
        with self._lock:
            path = self._index(op).path(group, version)
        if path is not None:
            return self._read(path)  # a seal's file names many groups: read once for all of them
        if version == 0:
            return None
        raise KeyError(f"state v{version} of {op} group {group} is gone (only the last two are kept)")

    def _read(self, path: Path) -> pa.Table:
        """A stored file's table, read once and kept a while: a batch asks for its groups in turn."""
        with self._lock:
            table = self._tables.get(path)
            if table is None:
                table = self._tables[path] = decode(path.read_bytes())
                while len(self._tables) > _CACHED_FILES:
                    self._tables.popitem(last=False)
            else:
                self._tables.move_to_end(path)
        return table

    def _index(self, op: str) -> _StateIndex:
        """The operator's index of stored versions, read off its files' headers the first time."""
        index = self._indexes.get(op)
        if index is None:
            index = self._indexes[op] = _StateIndex()
            for path in sorted((self.state_dir / op).glob("*.arrow")):
                index.add(path, _versions_of(path))
            for dead in index.dead(set(index.newest)):
                dead.unlink(missing_ok=True)
        return index


_VERSIONS = b"sponge.versions"


def _versions_of(path: Path) -> dict[int, int]:
    with pa.OSFile(str(path)) as f, pa.ipc.open_stream(f) as reader:
        return dict(json.loads((reader.schema.metadata or {})[_VERSIONS]))


@dataclass
class _StateIndex:
    """Which file holds which (group, version) of one operator's stored state."""

    where: dict[tuple[int, int], Path] = field(default_factory=dict)
    files: dict[Path, dict[int, int]] = field(default_factory=dict)
    by_group: dict[int, set[Path]] = field(default_factory=dict)
    newest: dict[int, int] = field(default_factory=dict)

    def add(self, path: Path, versions: dict[int, int]) -> None:
        self.files[path] = versions
        for g, v in versions.items():
            self.where[(g, v)] = path
            self.by_group.setdefault(g, set()).add(path)
            self.newest[g] = max(v, self.newest.get(g, v))

    def path(self, group: int, version: int) -> Path | None:
        return self.where.get((group, version))

    def dead(self, groups: set[int]) -> list[Path]:
        """Forget, and name, the files of `groups` that hold no version a committed batch can name."""
        candidates = set().union(*(self.by_group.get(g, set()) for g in groups))
        gone = [p for p in candidates if all(v < self.newest[g] - 1 for g, v in self.files[p].items())]
        for path in gone:
            for g, v in self.files.pop(path).items():
                self.by_group[g].discard(path)
                if self.where.get((g, v)) == path:
                    del self.where[(g, v)]
        return gone
