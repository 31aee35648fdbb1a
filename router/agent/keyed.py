"""The agent's part in keyed stages (ADRs 0024, 0025): keep stashed records, name the keys they are of,
run a batch of key groups as a chunk, keep each group's state between batches, hand it back.

Why the agent: it lives beside the VM, outlives a Spark task, and already turns a request into a chunk
a worker runs (with redispatch, the result cache and the local fallback). A seal is such a chunk: its
payload is what the batch reads of its groups' state, the stashed records of the batch and the rows
the VM sends along, and its key is (program, each group and its version), so a replayed batch asking
again gets the cached answer, or the same one recomputed from the stored versions. The new versions
are stored before the seal is answered, so the version a committed batch names always exists
(router/handoff_store.py keeps the last two).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import polars as pl

from core.errors import ConfigError
from core.offload_plan import KEY_GROUPS
from core.wire.arrow_ipc import decode, encode
from lambda_worker.keyed import KeyedProgram
from lambda_worker.program import ProgramSpec
from merge.frames import pack, unpack
from merge.keyed_groups import Frames, groups_answer, read_answer, seal_request
from router import stats
from router.agent import result_check
from router.handoff_store import ChunkRef, HandoffStore
from router.result_cache import ChunkKey

SEAL_SEQ = -1  # the chunk_seq of a seal's key: no source chunk has a negative number

# The agent's submit: (key, program, payload, records counted, result check) -> (outcome, cached)
Offload = Callable[[ChunkKey, str, bytes, int | None, Any], tuple[futures.Future[Any], bool]]


@dataclass(frozen=True)
class GroupVersion:
    group: int
    version: int
    fresh: bool = False


def _seal_key(spec: ProgramSpec, groups: Sequence[GroupVersion]) -> ChunkKey:
    """A seal's chunk key: its groups and their versions, so a replayed batch asking the same seal
    meets the result cache, and no two different seals share a key."""
    named = ",".join(f"{gv.group}@{gv.version}" for gv in sorted(groups, key=lambda gv: gv.group))
    digest = int.from_bytes(hashlib.blake2b(named.encode(), digest_size=8).digest(), "big") >> 1
    return ChunkKey(digest, groups[0].group, SEAL_SEQ, spec.program_id)


class KeyedAgent:
    def __init__(
        self, store: HandoffStore, offload: Offload, compression: str, counters: stats.Counters
    ) -> None:
        self.store = store
        self.offload = offload
        self.compression = compression
        self.counters = counters
        self._programs: dict[str, tuple[ProgramSpec, KeyedProgram]] = {}
        self._latest: dict[tuple[str, int], tuple[int, _Sealed]] = {}  # each group's newest version
        self._lock = threading.Lock()
        self._writer = futures.ThreadPoolExecutor(4, thread_name_prefix="state-writer")

    def _program(self, program_json: str) -> tuple[ProgramSpec, KeyedProgram]:
        """Compiled once per operator: every group of every batch asks with the same JSON."""
        known = self._programs.get(program_json)
        if known is None:
            spec = ProgramSpec.loads(program_json)
            program = spec.compile()
            if not isinstance(program, KeyedProgram):
                raise ConfigError(f"program {spec.node_ids} is not a keyed operator's step")
            known = self._programs[program_json] = (spec, program)
        return known

    def warm(self, program_json: str) -> ProgramSpec:
        """Compile a keyed program and run this agent's part of a seal once over made-up rows (its cut of
        the state, the worker's step as the local fallback runs it, the join, the due times, packing),
        storing and counting nothing: the first seals after a switch then cost what later ones do
        (ADR 0045). The spec, for the warm-ups of the workers."""
        spec, program = self._program(program_json)
        state, parts, rows, watermark_ms = program.warm_batch()
        needed, rest = program.select(state, program.touched(parts, rows), watermark_ms)
        joined = program.joined(program.warm((needed, parts, rows, watermark_ms)), rest)
        program.next_due_by_group(joined, range(KEY_GROUPS))
        encode(pack(joined, {}), self.compression)
        return spec

    def stash(self, ref: ChunkRef, payload: bytes) -> None:
        self.store.stash(ref, decode(payload))

    def _records(self, groups: Collection[int], parts: Sequence[ChunkRef]) -> dict[str, pl.DataFrame]:
        records: dict[str, list[pl.DataFrame]] = {}
        for ref in parts:
            table = pl.from_arrow(self.store.records(ref, groups))
            assert isinstance(table, pl.DataFrame)
            records.setdefault(ref.entity, []).append(table)
        return {e: pl.concat(fs, how="vertical_relaxed") for e, fs in records.items()}

    def touched(self, program_json: str, groups: Collection[int], parts: Sequence[ChunkRef]) -> bytes:
        """The keys the stashed records of `groups` in `parts` are of: what a lazy fetch takes from the
        VM's state before the seal (ADR 0025)."""
        _, program = self._program(program_json)
        keys = program.touched(self._records(groups, parts), None)
        return encode(keys.to_arrow(), self.compression)

    def seal(
        self,
        program_json: str,
        groups: Sequence[GroupVersion],
        parts: Sequence[ChunkRef],
        moved: bytes,
        forwarded: bytes,
        watermark_ms: int,
    ) -> futures.Future[Any]:
        """Submit a batch of key groups as one chunk; the future's outcome carries the answer (the
        outputs and when each group is next due) once every group's new state is stored.

        Each group starts from its stored version (from nothing when fresh: it moves in now), the keys
        `moved` from the VM join them, and the worker gets only what this batch reads (merge/winner.py
        `select`); its answer is joined with the rest and stored group by group. The step is key-local,
        so groups sealed together decide what each would alone."""
        spec, program = self._program(program_json)
        op = spec.node_ids[0]
        states = self._states(op, program, [gv for gv in groups if not gv.fresh])
        if moved:
            arrived = unpack(decode(moved))[0]
            states.append(arrived)
            self.counters.add(stats.handoff_counter("keys_fetched", op), program.key_count(arrived))
            self.counters.add(stats.handoff_counter("state_bytes_moved", op), len(moved))
        state = program.joined(*states)
        by_entity = self._records([gv.group for gv in groups], parts)
        decoded = pl.from_arrow(decode(forwarded)) if forwarded else None
        rows = decoded if isinstance(decoded, pl.DataFrame) else None
        needed, rest = program.select(state, program.touched(by_entity, rows), watermark_ms)
        request = seal_request(needed, by_entity, rows, watermark_ms)
        check = result_check.sealed(program, [gv.group for gv in groups])
        fut, _ = self.offload(
            _seal_key(spec, groups), program_json, encode(request, self.compression), None, check
        )
        done: futures.Future[Any] = futures.Future()

        def stored(f: futures.Future[Any]) -> None:
            try:
                outcome = f.result()
                new_state, out, _ = read_answer(decode(outcome.payload))
                sealed = _Sealed(frozenset(gv.group for gv in groups), program.joined(new_state, rest))
                versions = {gv.group: gv.version + 1 for gv in groups}
                # The write waits mostly on Arrow's encoder and the disk, the dues on polars: side by side.
                written = self._writer.submit(self.store.put_states, op, versions, pack(sealed.state, {}))
                dues = program.next_due_by_group(sealed.state, sealed.groups)
                written.result()
                with self._lock:
                    self._latest.update({(op, g): (v, sealed) for g, v in versions.items()})
                done.set_result((encode(groups_answer(out, dues), self.compression), outcome))
            except BaseException as e:
                done.set_exception(e)

        fut.add_done_callback(stored)
        return done

    def hand_back(self, program_json: str, group: int, version: int) -> bytes:
        """The group's state at `version`, packed (an empty state when none was ever stored)."""
        spec, program = self._program(program_json)
        op = spec.node_ids[0]
        state = self._state(op, program, group, version)
        payload = encode(pack(state, {}), self.compression)
        self.counters.add(stats.handoff_counter("keys_returned", op), program.key_count(state))
        self.counters.add(stats.handoff_counter("state_bytes_moved", op), len(payload))
        return payload

    def _states(self, op: str, program: KeyedProgram, groups: Sequence[GroupVersion]) -> list[Frames]:
        """The stored state of `groups` at their versions: a seal's state whole when it asks again for
        exactly the groups sealed together last time (the common case: one seal's groups stay together
        from batch to batch), else each sealed state cut to the groups asked of it."""
        wanted: dict[int, tuple[_Sealed, set[int]]] = {}
        for gv in groups:
            sealed = self._sealed(op, gv.group, gv.version)
            wanted.setdefault(id(sealed), (sealed, set()))[1].add(gv.group)
        return [
            sealed.state if gs == sealed.groups else program.of_groups(sealed.state, gs)
            for sealed, gs in wanted.values()
        ]

    def _state(self, op: str, program: KeyedProgram, group: int, version: int) -> Frames:
        return self._states(op, program, [GroupVersion(group, version)])[0]

    def _sealed(self, op: str, group: int, version: int) -> _Sealed:
        with self._lock:
            latest = self._latest.get((op, group))
        if latest is not None and latest[0] == version:
            return latest[1]
        stored = self.store.state(op, group, version)
        return _Sealed(frozenset({group}), {}) if stored is None else _Sealed(frozenset(), unpack(stored)[0])


@dataclass(frozen=True)
class _Sealed:
    """The state a seal left for its groups, kept whole: the next seal of the same groups starts from
    it as it is, with no cut and no join (an empty `groups`: read back from disk, cut it to use it)."""

    groups: frozenset[int]
    state: Frames
