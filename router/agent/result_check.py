"""What the agent accepts from a worker: a result the chunk's program could have made.

Why check: a result is cached and handed to every caller of its chunk, merged into Spark's state or
written to the sink, so one that is wrong must be caught before anyone reads it. A worker is code
the agent did not run, on a machine it does not own: it may be from another build, broken, or not
ours. The checks cost the agent one decode of the result (which it needed anyway to know the result
is whole) and, per program and input schema, one run of the program on zero rows.

A check returns None for a result to accept, or a `Refusal` (router/dispatcher.py): corrupt (it
does not even read as Arrow) or wrong (it reads, but is not what the chunk's program makes). The
dispatcher redoes the chunk either way and never caches what it refused; a worker that answered
wrongly is drained and given nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import pyarrow as pa

from core.errors import InputError
from core.wire.arrow_ipc import decode
from lambda_worker.keyed import KeyedProgram
from merge.keyed_groups import groups_of, read_answer
from router.dispatcher import Refusal

Check = Callable[[bytes, int], Refusal | None]


def _decoded(payload: bytes) -> pa.Table | Refusal:
    try:
        return decode(payload)
    except InputError as e:
        return Refusal(f"not an Arrow IPC stream ({e.message})", corrupt=True)


def readable(payload: bytes, rows_in: int) -> Refusal | None:
    """Any result must at least read as a whole Arrow stream."""
    table = _decoded(payload)
    return table if isinstance(table, Refusal) else None


def transient(expected: pa.Schema, rows: int | None) -> Check:
    """A transient chunk's result: the schema its program makes of the chunk's input, and as many
    records read as the chunk holds (`rows`, when its caller counted them)."""

    def check(payload: bytes, rows_in: int) -> Refusal | None:
        table = _decoded(payload)
        if isinstance(table, Refusal):
            return table
        if not table.schema.equals(expected, check_metadata=False):
            return Refusal(f"columns {table.schema.names} {table.schema.types}, not the program's {expected}")
        if rows is not None and rows_in != rows:
            return Refusal(f"it says it read {rows_in} records of a chunk of {rows}")
        return None

    return check


def sealed(program: KeyedProgram, groups: Collection[int]) -> Check:
    """A seal's answer: a state and outputs, the state only of the key groups the seal named."""
    named = set(groups)

    def check(payload: bytes, rows_in: int) -> Refusal | None:
        table = _decoded(payload)
        if isinstance(table, Refusal):
            return table
        try:
            state, _, _ = read_answer(table)
        except (InputError, KeyError, ValueError) as e:
            return Refusal(f"not a seal's answer ({e})")
        for name, frame in state.items():
            if frame is not None and frame.height:
                stray = set(groups_of(frame, program.spec.keys).unique().to_list()) - named
                if stray:
                    return Refusal(
                        f"state {name!r} holds key groups {sorted(stray)[:5]} the seal did not name"
                    )
        return None

    return check
