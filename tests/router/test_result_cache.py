"""The result cache: one computation per chunk key, however often and concurrently it is asked for."""

from __future__ import annotations

import pytest

from router.result_cache import ChunkKey, ResultCache

pytestmark = pytest.mark.timeout(10)


def test_single_flight_then_cached() -> None:
    cache = ResultCache(100, len)
    key = ChunkKey(1, 0, 0, "p")
    fut, claimed = cache.lookup_or_claim(key)
    again, claimed_again = cache.lookup_or_claim(key)
    assert claimed and not claimed_again and again is fut  # a concurrent retry joins the running one
    fut.set_result(b"abc")
    done, claimed3 = cache.lookup_or_claim(key)
    assert not claimed3 and done.result() == b"abc" and cache.nbytes == 3


def test_failures_are_not_cached() -> None:
    cache = ResultCache(100, len)
    key = ChunkKey(1, 0, 0, "p")
    fut, _ = cache.lookup_or_claim(key)
    fut.set_exception(RuntimeError("boom"))
    _, claimed = cache.lookup_or_claim(key)
    assert claimed


def test_least_recently_used_entries_are_evicted_beyond_the_budget() -> None:
    cache = ResultCache(10, len)
    keys = [ChunkKey(1, 0, i, "p") for i in range(3)]
    for k in keys:
        fut, _ = cache.lookup_or_claim(k)
        fut.set_result(b"xxxx")  # the budget holds two
        if k.chunk_seq == 1:
            cache.lookup_or_claim(keys[0])  # touch 0: 1 is now the least recently used
    assert cache.contains(keys[0]) and cache.contains(keys[2]) and not cache.contains(keys[1])
    assert cache.nbytes <= 10
    big, _ = cache.lookup_or_claim(ChunkKey(2, 0, 0, "p"))
    big.set_result(b"y" * 11)  # larger than the whole budget: answered, not kept
    assert not cache.contains(ChunkKey(2, 0, 0, "p"))
