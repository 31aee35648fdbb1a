"""The record checker tells lost, duplicated and unexpected rows apart, floats within tolerance."""

from __future__ import annotations

import pyarrow as pa

from core.results import check_records


def test_lost_duplicated_and_unexpected_rows_are_told_apart() -> None:
    expected = pa.table({"k": [1, 2, 3, 3], "v": [1.0, 2.0, 3.0, 3.0]})
    actual = pa.table({"k": [1, 1, 3, 4], "v": [1.0, 1.0 + 1e-12, 3.0, 9.0]})
    check = check_records(actual, expected)
    assert sorted(check.lost) == [(2, 2.0), (3, 3.0)]
    assert check.duplicated == [(1, 1.0 + 1e-12)]  # a second copy, within the float tolerance
    assert check.unexpected == [(4, 9.0)]
    assert not check.ok


def test_the_same_multiset_in_another_order_is_ok() -> None:
    expected = pa.table({"k": [1, 2, 2], "s": ["a", None, None]})
    actual = pa.table({"k": [2, 1, 2], "s": [None, "a", None]})
    assert check_records(actual, expected).ok
