"""The fold rules in Spark's spelling against the same brute force as the polars ones: every kind,
tumbling and sliding, over the VM's records alone (the plain aggregate) and over the VM's records
merged with workers' partials (the merge operator). Batch frames, so one Spark session serves all."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from core.plan import AggCall, WindowAggregate, WindowSpec
from core.spark.lower import apply_operator, merge_aggregate, sink_frame
from merge.partials import partial_aggregate
from tests.merge.test_algebra_properties import (
    CALLS,
    SLIDING,
    TUMBLING,
    Row,
    _part,
    _table,
    assert_same,
    expected,
)

pytestmark = pytest.mark.spark

S = 1_000_000


def _rows(n: int = 80, seed: int = 7) -> list[Row]:
    rnd = random.Random(seed)
    maybe = lambda value: None if rnd.random() < 0.2 else value  # noqa: E731
    rows = [
        {
            "t": rnd.randint(-13 * S, 13 * S),
            "k": rnd.randint(0, 2),
            "v": maybe(rnd.randint(-5, 5)),
            "s": maybe(rnd.choice(["a", "b", "cc"])),
            "f": maybe(round(rnd.uniform(-1e3, 1e3), 3)),
        }
        for _ in range(n)
    ]
    # A group whose arguments are all null: sum, min, max and avg are null there, count is not.
    rows += [{"t": 20 * S, "k": 9, "v": None, "s": None, "f": None}] * 2
    return rows


ROWS = _rows()
# The all-null group's two records: one the VM's, one a worker's (whose avg sum is 0.0 over 0 values).
PARTS = [random.Random(3).randint(0, 3) for _ in ROWS[:-2]] + [0, 1]


def _collected(op: WindowAggregate, df: Any) -> dict[tuple, dict[str, Any]]:
    out = {}
    for r in sink_frame(df).collect():
        d = r.asDict(recursive=True)
        group = (round(d["window_start"].timestamp() * S), round(d["window_end"].timestamp() * S))
        values = {c.out: d[c.out] for c in op.aggs}
        out[(*group, *[d[k] for k in op.keys])] = values
    return out


def _frame(spark: Any, table: pa.Table) -> Any:
    return spark.createDataFrame(table)


CASES = [
    pytest.param(fn, window, id=f"{fn}-{name}")
    for fn in CALLS
    for name, window in (("tumbling", TUMBLING), ("sliding", SLIDING))
    if window.tumbling or fn not in ("max_with_ties", "latest_n")
]


@pytest.mark.parametrize(("fn", "window"), CASES)
def test_spark_folds_equal_the_brute_force(spark: Any, fn: str, window: WindowSpec) -> None:
    call: AggCall = CALLS[fn]
    op = WindowAggregate(("k",), window, (call,))
    want = expected(op, ROWS)
    local = _frame(spark, _table(ROWS))
    assert_same(_collected(op, apply_operator(op, [local], None)), want)  # type: ignore[arg-type]

    vm = _frame(spark, _table(_part(ROWS, PARTS, 0)))
    partials = pa.concat_tables([partial_aggregate(op, _table(_part(ROWS, PARTS, i))) for i in (1, 2, 3)])
    workers = _frame(spark, partials).drop("window_end")
    assert_same(_collected(op, merge_aggregate(vm, workers, op)), want)
