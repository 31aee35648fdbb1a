"""The agent's part in keyed stages (ADR 0024): keep stashed records, run a group's batch as a chunk,
keep the group's state between batches, hand it back.

Why the agent: it lives beside the VM, outlives a Spark task, and already turns a request into a chunk
a worker runs (with redispatch, the result cache and the local fallback). A seal is such a chunk: its
payload is the group's state, the stashed records of the batch and the rows the VM sends along, and
its key is (program, group, version), so a replayed batch asking again gets the cached answer, or the
same one recomputed from the stored version. The new state is stored before the seal is answered, so
the version a committed batch names always exists (router/handoff_store.py keeps the last two).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any

import polars as pl

from core.wire.arrow_ipc import decode, encode
from lambda_worker.program import ProgramSpec
from merge.frames import pack, unpack
from merge.keyed_groups import read_answer, seal_answer, seal_request
from router.handoff_store import ChunkRef, HandoffStore
from router.result_cache import ChunkKey

SEAL_SEQ = -1  # the chunk_seq of a seal's key: no source chunk has a negative number

Offload = Callable[[ChunkKey, str, bytes], tuple[futures.Future[Any], bool]]


class KeyedAgent:
    def __init__(self, store: HandoffStore, offload: Offload, compression: str) -> None:
        self.store = store
        self.offload = offload
        self.compression = compression

    def stash(self, ref: ChunkRef, payload: bytes) -> None:
        self.store.stash(ref, decode(payload))

    def seal(
        self,
        program_json: str,
        group: int,
        version: int,
        parts: Sequence[ChunkRef],
        moved: bytes,
        forwarded: bytes,
        watermark_ms: int,
    ) -> futures.Future[Any]:
        """Submit the group's batch; the future's outcome carries the seal's answer (the outputs and the
        next due time) once the new state is stored."""
        spec = ProgramSpec.loads(program_json)
        op = spec.node_ids[0]
        state = self._state(op, group, version) if not moved else unpack(decode(moved))[0]
        records: dict[str, list[pl.DataFrame]] = {}
        for ref in parts:
            table = pl.from_arrow(self.store.records(ref, group))
            assert isinstance(table, pl.DataFrame)
            records.setdefault(ref.entity, []).append(table)
        by_entity = {e: pl.concat(fs, how="vertical_relaxed") for e, fs in records.items()}
        rows = pl.from_arrow(decode(forwarded)) if forwarded else None
        request = seal_request(
            state, by_entity, rows if isinstance(rows, pl.DataFrame) else None, watermark_ms
        )
        key = ChunkKey(version, group, SEAL_SEQ, spec.program_id)
        fut, _ = self.offload(key, program_json, encode(request, self.compression))
        done: futures.Future[Any] = futures.Future()

        def stored(f: futures.Future[Any]) -> None:
            try:
                outcome = f.result()
                new_state, out, due = read_answer(decode(outcome.payload))
                self.store.put_state(op, group, version + 1, pack(new_state, {}))
                answer = encode(seal_answer({}, out, due), self.compression)
                done.set_result((answer, outcome))
            except BaseException as e:
                done.set_exception(e)

        fut.add_done_callback(stored)
        return done

    def hand_back(self, program_json: str, group: int, version: int) -> bytes:
        """The group's state at `version`, packed (an empty state when none was ever stored)."""
        op = ProgramSpec.loads(program_json).node_ids[0]
        return encode(pack(self._state(op, group, version), {}), self.compression)

    def _state(self, op: str, group: int, version: int) -> dict[str, pl.DataFrame | None]:
        stored = self.store.state(op, group, version)
        return unpack(stored)[0] if stored is not None else {}
