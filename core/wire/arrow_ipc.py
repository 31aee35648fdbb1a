"""Arrow IPC payloads: how record batches and partial states cross process boundaries.

Why the IPC stream format with buffer compression: it is Arrow's own wire format (no per-row
encoding), the reader needs nothing but pyarrow, and zstd/lz4 compression of the buffers is done by
Arrow's C++ code. A CRC-32 over the payload lets the receiver reject a damaged result instead of
merging it.
"""

from __future__ import annotations

import zlib

import pyarrow as pa

from core.errors import InputError

COMPRESSIONS = ("zstd", "lz4", "none")


def encode(data: pa.Table | pa.RecordBatch, compression: str = "zstd") -> bytes:
    """One Arrow IPC stream holding `data`, its buffers compressed with `compression`."""
    if compression not in COMPRESSIONS:
        raise InputError(
            f"unknown IPC compression {compression!r}", hint=f"use one of {', '.join(COMPRESSIONS)}"
        )
    options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema, options=options) as writer:
        if isinstance(data, pa.RecordBatch):
            writer.write_batch(data)
        else:
            writer.write_table(data)
    return sink.getvalue().to_pybytes()


_NOT_A_STREAM_HINT = (
    "the sender does not write Arrow IPC streams (a different build?) or damaged the bytes; "
    "send what core/wire/arrow_ipc.encode writes"
)


def decode(payload: bytes) -> pa.Table:
    """The table held by an IPC stream payload (decompressed transparently); InputError if it holds none.

    Why OSError is caught too: pyarrow reports some malformed streams (random bytes, a cut body) as
    OSError, not ArrowInvalid, and a bad payload must read as such, not as a failing disk or socket.
    """
    try:
        with pa.ipc.open_stream(pa.py_buffer(payload)) as reader:
            return reader.read_all()
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"payload is not an Arrow IPC stream: {e}", hint=_NOT_A_STREAM_HINT) from None


def read_schema(payload: bytes) -> pa.Schema:
    """The schema an IPC stream payload starts with, its batches left unread (and undecompressed).

    Why: a cheap first check of a payload about to be queued, so bytes that are not Arrow at all are
    refused at the door instead of failing on a worker and again in the agent's local run.
    """
    try:
        with pa.ipc.open_stream(pa.py_buffer(payload)) as reader:
            return reader.schema
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"payload is not an Arrow IPC stream: {e}", hint=_NOT_A_STREAM_HINT) from None


def checksum(payload: bytes) -> int:
    """CRC-32 of a payload, carried next to it so that corruption is caught before merging."""
    return zlib.crc32(payload) & 0xFFFFFFFF
