"""The offload plan: validation, JSON round trips, and a routing function that is pure and stable."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ConfigError
from core.offload_plan import (
    KEY_GROUPS,
    RECORD_SALT,
    OffloadPlan,
    key_groups_of,
    key_hash,
    offloaded_mask,
    record_units,
    share_scale,
    splitmix64_int,
)
from core.xxhash64 import SEED, xxh64_int

plans = st.builds(
    OffloadPlan,
    version=st.integers(0, 2**40),
    share=st.floats(0.0, 1.0, allow_nan=False),
    key_groups=st.frozensets(st.integers(0, KEY_GROUPS - 1), max_size=20),
    workers=st.integers(1, 200),
)
id_arrays = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=200).map(lambda v: np.array(v, np.int64))


# ---- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"version": -1}, "version"),
        ({"version": 1.5}, "version"),
        ({"version": True}, "version"),
        ({"version": 0, "share": 1.5, "workers": 1}, "[0, 1]"),
        ({"version": 0, "share": -0.1, "workers": 1}, "[0, 1]"),
        ({"version": 0, "share": float("nan"), "workers": 1}, "[0, 1]"),
        ({"version": 0, "share": "0.5", "workers": 1}, "number"),
        ({"version": 0, "key_groups": frozenset({KEY_GROUPS}), "workers": 1}, "out of range"),
        ({"version": 0, "key_groups": frozenset({-1}), "workers": 1}, "out of range"),
        ({"version": 0, "key_groups": "12", "workers": 1}, "set of integers"),
        ({"version": 0, "workers": -1}, "workers"),
        ({"version": 0, "share": 0.5}, "names no workers"),
    ],
)
def test_invalid_plans_are_rejected_with_a_clear_message(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        OffloadPlan(**kwargs)
    assert needle in info.value.one_line()


def test_local_plan_offloads_nothing() -> None:
    plan = OffloadPlan.local(7)
    assert not plan.offloads
    assert not offloaded_mask(plan, None, np.arange(1000)).any()


@given(plans)
def test_json_round_trip_is_exact_and_canonical(plan: OffloadPlan) -> None:
    assert OffloadPlan.loads(plan.dumps()) == plan
    assert OffloadPlan.from_json(plan.to_json()).dumps() == plan.dumps()


def test_from_json_rejects_unknown_missing_and_future_fields() -> None:
    good = OffloadPlan(3, 0.25, frozenset({5}), 2).to_json()
    with pytest.raises(ConfigError, match="unknown"):
        OffloadPlan.from_json({**good, "sharee": 0.1})
    with pytest.raises(ConfigError, match="lacks"):
        OffloadPlan.from_json({k: v for k, v in good.items() if k != "workers"})
    with pytest.raises(ConfigError, match="format"):
        OffloadPlan.from_json({**good, "format": 99})
    with pytest.raises(ConfigError, match="JSON"):
        OffloadPlan.loads("{not json")


# ---- the routing function ----------------------------------------------------------------------


@given(id_arrays)
def test_share_zero_routes_nothing_and_share_one_routes_everything(ids: np.ndarray) -> None:
    assert not offloaded_mask(OffloadPlan(0, 0.0), ids, ids).any()
    assert offloaded_mask(OffloadPlan(0, 1.0, workers=1), ids, ids).all()


@given(plans, id_arrays)
def test_routing_is_deterministic(plan: OffloadPlan, ids: np.ndarray) -> None:
    keys = ids // 3
    a = offloaded_mask(plan, keys, ids)
    b = offloaded_mask(OffloadPlan.loads(plan.dumps()), keys.copy(), ids.copy())
    assert np.array_equal(a, b)


@given(plans, id_arrays)
def test_routing_of_a_record_does_not_depend_on_its_batch(plan: OffloadPlan, ids: np.ndarray) -> None:
    """A replayed epoch may be cut into different batches; each record must route the same way."""
    keys = ids % 1000
    whole = offloaded_mask(plan, keys, ids)
    half = len(ids) // 2
    parts = np.concatenate(
        [offloaded_mask(plan, keys[:half], ids[:half]), offloaded_mask(plan, keys[half:], ids[half:])]
    )
    assert np.array_equal(whole, parts)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 1.0), st.integers(0, 2**62))
def test_share_is_met_on_large_inputs(share: float, start: int) -> None:
    ids = np.arange(start, start + 200_000, dtype=np.int64)
    got = offloaded_mask(OffloadPlan(1, share, workers=1), None, ids).mean()
    assert abs(got - share) < 0.01


def test_share_grows_monotonically() -> None:
    """Raising the share only adds records to the offloaded set (a smooth scale-up)."""
    ids = np.arange(50_000)
    low = offloaded_mask(OffloadPlan(1, 0.2, workers=1), None, ids)
    high = offloaded_mask(OffloadPlan(2, 0.6, workers=1), None, ids)
    assert not (low & ~high).any()


def test_key_groups_route_whole_keys() -> None:
    keys = np.repeat(np.arange(500, dtype=np.int64), 20)
    ids = np.arange(len(keys))
    groups = frozenset(range(0, KEY_GROUPS, 4))
    mask = offloaded_mask(OffloadPlan(1, 0.0, groups, 1), keys, ids)
    by_key = mask.reshape(500, 20)
    assert (by_key.all(axis=1) | ~by_key.any(axis=1)).all()  # a key is wholly in or wholly out
    assert 0.15 < mask.mean() < 0.35
    assert np.array_equal(mask, np.isin(key_groups_of(keys), sorted(groups)))


def test_key_groups_are_spread_evenly() -> None:
    counts = np.bincount(key_groups_of(np.arange(128_000, dtype=np.int64)), minlength=KEY_GROUPS)
    assert counts.min() > 800 and counts.max() < 1200


def test_string_and_composite_keys_hash_by_value() -> None:
    a = pa.array(["abc", "", None, "héllo wörld", "abc"])
    h = key_hash(a)
    assert h[0] == h[4] and len(set(h[:4].tolist())) == 4
    assert np.array_equal(key_hash(a.cast(pa.large_string())), h)
    assert np.array_equal(key_hash(a.dictionary_encode()), h)
    assert np.array_equal(key_hash(pa.chunked_array([a[:2], a[2:]])), h)
    sliced = pa.array(["x", "abc", "", None])[1:]
    assert np.array_equal(key_hash(sliced), h[:3])
    composite = pa.table({"w": pa.array([1, 1, 2]), "s": pa.array(["a", "a", "a"])})
    hc = key_hash(composite)
    assert hc[0] == hc[1] != hc[2]
    struct = pa.StructArray.from_arrays(
        [composite["w"].combine_chunks(), composite["s"].combine_chunks()], ["w", "s"]
    )
    assert np.array_equal(key_hash(struct), hc)


def test_integer_and_timestamp_keys_agree_with_numpy_keys() -> None:
    values = [0, -1, 7, 2**62, -(2**63)]
    expected = key_hash(np.array(values, dtype=np.int64))
    assert np.array_equal(key_hash(pa.array(values, pa.int64())), expected)
    assert np.array_equal(key_hash(pa.array(values, pa.timestamp("us", tz="UTC"))), expected)
    # An int hashes its 4 bytes, as Spark's hashInt does: the same value as a long is another key.
    assert key_hash(pa.array([7], pa.int32())).tolist() == [xxh64_int((7).to_bytes(4, "little"), SEED)]


def test_unsupported_inputs_fail_clearly() -> None:
    with pytest.raises(ConfigError, match="type"):
        key_hash(pa.array([1.5]))
    with pytest.raises(ConfigError, match="integers"):
        key_hash(np.array([1.5]))
    with pytest.raises(ConfigError, match="integers"):
        record_units(np.array([0.5]))
    with pytest.raises(ConfigError, match="keys for"):
        offloaded_mask(OffloadPlan(1, 0.5, frozenset({1}), 1), np.arange(3), np.arange(4))
    with pytest.raises(ConfigError, match="no keys"):
        offloaded_mask(OffloadPlan(1, 0.5, frozenset({1}), 1), None, np.arange(4))


# ---- the hash is the documented function, in every process ------------------------------------


def _spec_key_hash(value: int | str | None) -> int:
    """Spark's xxhash64 of one value, from XXH64's plain definition (a null keeps the seed)."""
    if value is None:
        return SEED
    if isinstance(value, str):
        return xxh64_int(value.encode(), SEED)
    return xxh64_int(value.to_bytes(8, "little", signed=True), SEED)


@given(st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1)), max_size=50))
def test_vectorised_int_hash_matches_the_specification(values: list[int]) -> None:
    got = key_hash(pa.array(values, pa.int64())).tolist()
    assert got == [_spec_key_hash(v) for v in values]


@given(st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=50))
def test_vectorised_string_hash_matches_the_specification(values: list[str | None]) -> None:
    got = key_hash(pa.array(values, pa.string())).tolist()
    assert got == [_spec_key_hash(v) for v in values]


def test_record_units_match_the_specification() -> None:
    ids = [0, 1, -5, 2**63 - 1]
    expected = [(splitmix64_int((i & ((1 << 64) - 1)) ^ RECORD_SALT) >> 11) / 2**53 for i in ids]
    assert record_units(np.array(ids, np.int64)).tolist() == expected


def test_hashes_are_identical_in_a_fresh_interpreter_with_another_hash_seed() -> None:
    code = (
        "import json, numpy as np, pyarrow as pa;"
        "from core.offload_plan import key_hash, record_units;"
        "print(json.dumps([key_hash(pa.array(['abc', 'xyz', None])).tolist(),"
        " key_hash(np.arange(5)).tolist(), record_units(np.arange(5)).tolist()]))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
            timeout=60,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    here = [
        key_hash(pa.array(["abc", "xyz", None])).tolist(),
        key_hash(np.arange(5)).tolist(),
        record_units(np.arange(5)).tolist(),
    ]
    assert len(outs) == 1
    assert json.loads(outs.pop()) == here


def test_xxh64_matches_its_published_test_vectors() -> None:
    assert xxh64_int(b"", 0) == 0xEF46DB3751D8E999
    assert xxh64_int(b"a", 0) == 0xD24EC4F1A98C6E5B
    assert xxh64_int(b"abc", 0) == 0x44BC2CF5AD770999


@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.one_of(st.none(), st.text(max_size=40)))))
def test_a_composite_key_chains_each_columns_hash_as_the_next_seed(
    rows: list[tuple[int, str | None]],
) -> None:
    table = pa.table(
        {"a": pa.array([r[0] for r in rows], pa.int64()), "b": pa.array([r[1] for r in rows], pa.string())}
    )
    want = []
    for a, b in rows:
        h = xxh64_int(a.to_bytes(8, "little", signed=True), SEED)
        want.append(h if b is None else xxh64_int(b.encode(), h))
    assert key_hash(table).tolist() == want


def test_known_answers_pin_the_hash_across_versions() -> None:
    """Changing the hash silently would re-route replayed epochs: these values must never change."""
    assert splitmix64_int(0) == 0xE220A8397B1DCDAF
    assert key_groups_of(np.array([0, 1, 42, -1], np.int64)).tolist() == [108, 50, 94, 82]
    assert key_groups_of(pa.array(["abc", "person-1000"])).tolist() == [102, 61]
    assert record_units(np.array([0, 1, 42])).tolist() == [
        0.23323492084809794,
        0.39928102316741754,
        0.3267679977730469,
    ]


def test_an_offloaded_share_lets_an_epoch_cover_more_offsets_at_the_floors_offload_cost() -> None:
    """At share 0.8 an offset costs the VM 0.2 + 0.8 x 0.1 = 0.28 of a kept one, so the epoch may cover
    1 / 0.28 the offsets; nothing offloaded, nothing changes; everything offloaded, 10x."""
    assert share_scale(0.0) == 1.0
    assert share_scale(0.8) == pytest.approx(1 / 0.28)
    assert share_scale(1.0) == pytest.approx(10.0)
    assert all(share_scale(s / 100) < share_scale((s + 1) / 100) for s in range(100))
