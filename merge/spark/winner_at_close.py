"""The best right row of each left entity, decided at the entity's close, on transformWithState.

Why an operator of its own (ADR 0020): NEXMark's winning bid of an auction is only known once the
auction closes, and until then any bid with open <= bid time < expires may still win. A windowed join
cannot say that (it cuts an auction's bids at a window boundary and emits before the close), and an
unwindowed stream-stream join keeps every bid forever. Here the state holds, per open entity, its row
and the best right row so far (one row), plus the right rows a later entity could still take (those
not yet behind the watermark); an entity's row is emitted and dropped when the watermark passes its
close. So the state is bounded by the open entities, whatever the run's length.

The operator runs on the keyed processor (merge/spark/keyed_processor.py), which lets key groups run
on workers during a burst; its step is merge/winner.py's. The best of the already-best row and a
candidate is idempotent, so a right row offered twice changes nothing.

Rows that Spark's watermark calls late are dropped, as every Spark stateful operator does: an entity
whose close is already behind the watermark when it arrives, a right row no open entity can take and
that no later one could (its time is behind the watermark).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from core.plan import WindowAggregate, WinnerAtClose
from merge.keyed_batch import SealService
from merge.partials import latest_partial_schema
from merge.spark.keyed_processor import KeyedOperator, keyed_operator, timestamp_columns
from merge.winner import WinnerSpec


def winner_at_close(
    left: DataFrame,
    right: DataFrame,
    op: WinnerAtClose,
    receipts: Mapping[str, DataFrame] | None = None,
    service: SealService | None = None,
    then: WindowAggregate | None = None,
) -> DataFrame:
    """`op` over its two inputs: one row per entity that has a winner, its columns then the winner's;
    with `then` (core/fusions.py `closed_aggregates`), those rows in `then`'s partial form instead.
    With `receipts` (by entity) and `service`, the key groups workers hold run there (ADR 0024)."""
    spec = WinnerSpec.of(op, left.columns, right.columns, timestamp_columns(left, right), then)
    out = StructType([*left.schema.fields, *right.schema.fields])
    if then is not None:
        rows = to_arrow_schema(out, timezone="UTC")  # the zone is only a label on UTC micros
        out = from_arrow_schema(latest_partial_schema(then, rows), prefer_timestamp_ntz=False)
    keyed = KeyedOperator(spec, op.left_keys, op.right_keys, out, True, op.closes)
    return keyed_operator(left, right, keyed, receipts, service)
