"""The fused windowed join and count: its processor against a brute force over the same rows, driven
through a fake state handle (the Spark runs of Q8 are in test_queries and test_offload_run)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from merge.join_count import JoinCount
from merge.spark.window_join_count import JoinCountProcessor
from tests.merge.spark.state_fakes import FakeHandle, run_epochs

S = 1000  # ms
SIZE = 10 * S
SPEC = JoinCount(SIZE, ("id",), ("name",), (), ("id", "name"), ("auctions",))

# (side, window index, id, name index or None, lag in epochs)
Row = tuple[int, int, int | None, int, int]


def as_input(rows: list[tuple[int, int, int | None, int]]) -> pd.DataFrame:
    """The operator's input columns in order: side, window start (µs), key, left column, count, group."""
    return pd.DataFrame(
        {
            "side": pd.Series([r[0] for r in rows], dtype="int32"),
            "w": pd.Series([r[1] * SIZE * S for r in rows], dtype="int64"),
            "id": pd.Series([r[2] for r in rows], dtype="Int64"),
            "name": pd.Series([f"n{r[3]}" if r[0] == 0 else None for r in rows], dtype="object"),
            "n": pd.Series([1] * len(rows), dtype="int64"),
            "g": pd.Series([0] * len(rows), dtype="int32"),
        }
    )


def brute_force(rows: list[Row]) -> set[tuple[int, int, str, int]]:
    """(window end, id, name, pairs): every left row paired with every right row of its window and id."""
    left: dict[tuple[int, int], Counter] = defaultdict(Counter)
    right: Counter = Counter()
    for side, w, key, name, _ in rows:
        if key is None:
            continue
        if side == 0:
            left[(w, key)][f"n{name}"] += 1
        else:
            right[(w, key)] += 1
    return {
        ((w + 1) * SIZE, key, name, n * right[(w, key)])
        for (w, key), names in left.items()
        for name, n in names.items()
        if right[(w, key)]
    }


def drive(rows: list[Row], epoch_windows: int) -> tuple[set, FakeHandle]:
    """Rows arrive up to `lag` epochs before the watermark passes their window's start."""
    step = epoch_windows * SIZE
    arrivals: dict[int, list] = defaultdict(list)
    for side, w, key, name, lag in rows:
        arrivals[max(w * SIZE // step - lag, 0)].append((side, w, key, name))
    handle = FakeHandle()
    processor = JoinCountProcessor(SPEC)
    processor.init(handle)  # type: ignore[arg-type]
    epochs = [(i * step, as_input(arrivals[i])) for i in range(6 * SIZE // step + 1)]
    epochs.append((10**9, as_input([])))
    out = run_epochs(processor, handle, epochs)
    got = pd.concat(out) if out else pd.DataFrame(columns=["window_end", "id", "name", "auctions"])
    counted = {
        (int(r.window_end.timestamp() * S), int(r.id), r.name, int(r.auctions))
        for r in got.itertuples(index=False)
    }
    assert len(counted) == len(got), "a group was counted twice"
    return counted, handle


rows_strategy = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.integers(0, 5),
        st.one_of(st.none(), st.integers(1, 4)),
        st.integers(0, 2),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, epoch_windows=st.integers(1, 3))
def test_the_processor_counts_each_windows_pairs_once_as_the_brute_force_does(
    rows: list[Row], epoch_windows: int
) -> None:
    counted, handle = drive(rows, epoch_windows)
    assert counted == brute_force(rows)
    assert not handle.map.d, "windows outlive their count"


def test_rows_of_a_counted_window_are_late_and_dropped() -> None:
    handle = FakeHandle()
    processor = JoinCountProcessor(SPEC)
    processor.init(handle)  # type: ignore[arg-type]
    epochs = [
        (0, as_input([(0, 0, 7, 1), (1, 0, 7, 0)])),
        (SIZE, as_input([])),  # the watermark passes window 0's end: it is counted
        (SIZE, as_input([(1, 0, 7, 0)])),  # a late auction for window 0
        (10**9, as_input([])),
    ]
    out = pd.concat(run_epochs(processor, handle, epochs))
    assert out[["id", "name", "auctions"]].values.tolist() == [[7, "n1", 1]]
