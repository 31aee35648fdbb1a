"""The offload route of a stream that feeds a keyed stage: stash the records, yield receipts (ADR 0024).

Why receipts and not results: a keyed operator's batch for a key group needs every record of the group
from every input, and only the operator's processor on the VM, after Spark's shuffle, sees them all
together. So a source task sends its records of worker-held groups to the agent (persisted there
before the reply), and its stream yields one small row per (chunk, group): which stashed chunk holds
records of which group, and the chunk's last event time, which moves the stream's watermark. The
shuffle carries these receipts, never the records.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.nexmark.schema import TIMESTAMP
from merge.keyed_groups import GROUP, RECEIPT, RECEIPT_TIME

_, START, END, SEQ = RECEIPT
TIME = RECEIPT_TIME
RECEIPT_FIELDS = (
    pa.field(GROUP, pa.int32()),
    pa.field(START, pa.int64()),
    pa.field(END, pa.int64()),
    pa.field(SEQ, pa.int64()),
    pa.field(TIME, TIMESTAMP),
)

Stash = Callable[[int, pa.Table], None]  # (seq, chunk): keep the chunk at the agent


def with_groups(records: pa.Table, groups: np.ndarray) -> pa.Table:
    return records.append_column(GROUP, pa.array(groups.astype(np.int32)))


def stash_chunks(
    records: pa.Table, start: int, end: int, chunk_rows: int, lanes: int, stash: Stash, time_column: str
) -> pa.Table:
    """Stash `records` (with `GROUP`) in chunks of `chunk_rows`, `lanes` at a time; the receipts."""
    chunks = [records.slice(i, chunk_rows) for i in range(0, records.num_rows, chunk_rows)]
    with ThreadPoolExecutor(max(1, min(lanes, len(chunks))), thread_name_prefix="stash") as pool:
        list(pool.map(lambda i: stash(i, chunks[i]), range(len(chunks))))
    receipts = []
    for seq, chunk in enumerate(chunks):
        groups = pc.unique(chunk[GROUP]).to_numpy()
        last = pc.max(chunk[time_column]).cast(TIMESTAMP)
        n = len(groups)
        receipts.append(
            pa.table(
                [
                    pa.array(groups, pa.int32()),
                    pa.array(np.full(n, start), pa.int64()),
                    pa.array(np.full(n, end), pa.int64()),
                    pa.array(np.full(n, seq), pa.int64()),
                    pa.array([last.as_py()] * n, TIMESTAMP),
                ],
                schema=pa.schema(RECEIPT_FIELDS),
            )
        )
    return pa.concat_tables(receipts) if receipts else pa.schema(RECEIPT_FIELDS).empty_table()
