"""Spark's `xxhash64` over Arrow key columns, vectorised with numpy.

Why Spark's function: a key's group must be the same wherever it is computed. The router computes it
in Python in the source read; the VM's operators compute it in Spark, which has `xxhash64` built in
(`F.xxhash64`) and cannot run a hash of its own without overflowing long arithmetic under ANSI mode.
So the router reproduces Spark's definition bit for bit (tests/core/spark/test_key_group_parity.py
holds the two side by side):

* XXH64 (Yann Collet's) of each value with the previous column's hash as seed, starting at 42;
* a long or timestamp (microseconds) hashes its 8 little-endian bytes, an int, date or boolean its
  4 bytes (Spark's `hashInt`, which XXH64 of 4 bytes equals), a string its UTF-8 bytes;
* a null leaves the hash as it was.

Neither hashlib nor the xxhash package vectorises over a column; strings are hashed per length, as a
matrix of rows by bytes, so a column costs a few numpy passes per distinct length.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.errors import ConfigError

SEED = 42
_U64 = np.uint64
P1 = 0x9E3779B185EBCA87
P2 = 0xC2B2AE3D27D4EB4F
P3 = 0x165667B19E3779F9
P4 = 0x85EBCA77C2B2AE63
P5 = 0x27D4EB2F165667C5
_MASK = (1 << 64) - 1


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U64(r)) | (x >> _U64(64 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _U64(33))
    h = h * _U64(P2)
    h = h ^ (h >> _U64(29))
    h = h * _U64(P3)
    return h ^ (h >> _U64(32))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    return _rotl(acc + lane * _U64(P2), 31) * _U64(P1)


def _merge(h: np.ndarray, v: np.ndarray) -> np.ndarray:
    return (h ^ _round(np.zeros_like(v), v)) * _U64(P1) + _U64(P4)


def _words(data: np.ndarray, width: int) -> np.ndarray:
    """Little-endian words of `width` bytes from the columns of a uint8 matrix (rows x width)."""
    out = np.zeros(data.shape[0], dtype=_U64)
    for i in range(width):
        out |= data[:, i].astype(_U64) << _U64(8 * i)
    return out


def xxh64_bytes(data: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64 of each row of a uint8 matrix (every row the same length), each with its own seed."""
    n, length = data.shape
    seed = seed.astype(_U64)
    at = 0
    if length >= 32:
        v1 = seed + _U64(P1) + _U64(P2)
        v2 = seed + _U64(P2)
        v3 = seed.copy()
        v4 = seed - _U64(P1)
        while at + 32 <= length:
            v1 = _round(v1, _words(data[:, at : at + 8], 8))
            v2 = _round(v2, _words(data[:, at + 8 : at + 16], 8))
            v3 = _round(v3, _words(data[:, at + 16 : at + 24], 8))
            v4 = _round(v4, _words(data[:, at + 24 : at + 32], 8))
            at += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = seed + _U64(P5)
    h = h + _U64(length)
    while at + 8 <= length:
        h = _rotl(h ^ _round(np.zeros(n, dtype=_U64), _words(data[:, at : at + 8], 8)), 27) * _U64(P1) + _U64(
            P4
        )
        at += 8
    if at + 4 <= length:
        h = _rotl(h ^ (_words(data[:, at : at + 4], 4) * _U64(P1)), 23) * _U64(P2) + _U64(P3)
        at += 4
    while at < length:
        h = _rotl(h ^ (data[:, at].astype(_U64) * _U64(P5)), 11) * _U64(P1)
        at += 1
    return _fmix(h)


def _fixed(values: np.ndarray, width: int, seed: np.ndarray) -> np.ndarray:
    """XXH64 of each integer's `width` little-endian bytes."""
    as_bytes = values.astype("<i8").view(np.uint8).reshape(-1, 8)[:, :width]
    return xxh64_bytes(as_bytes, seed)


def _strings(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """XXH64 of each string's UTF-8 bytes, the rows grouped by length."""
    arr = arr.cast(pa.large_string())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=len(arr) + 1 + arr.offset)[arr.offset :]
    buf = arr.buffers()[2]
    data = np.frombuffer(buf, dtype=np.uint8) if buf is not None else np.empty(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    out = np.empty(len(arr), dtype=_U64)
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        at = starts[rows, None] + np.arange(int(length))
        matrix = data[at] if length else np.empty((len(rows), 0), np.uint8)
        out[rows] = xxh64_bytes(matrix, seed[rows])
    return out


def _column(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
        t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        hashed = _strings(arr, seed)
    elif pa.types.is_int64(t) or pa.types.is_timestamp(t):
        hashed = _fixed(arr.view(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), 8, seed)
    elif pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_boolean(t):
        ints = (arr.cast(pa.int32()) if not pa.types.is_date32(t) else arr.view(pa.int32())).fill_null(0)
        hashed = _fixed(ints.to_numpy(zero_copy_only=False), 4, seed)
    else:
        raise ConfigError(
            f"cannot route by a key of type {t}",
            hint="route by integer, timestamp, date or string key columns",
        )
    if arr.null_count:
        hashed = np.where(pc.is_null(arr).to_numpy(zero_copy_only=False), seed, hashed)
    return hashed


def xxhash64(columns: list[pa.Array]) -> np.ndarray:
    """Spark's `xxhash64(c1, c2, ...)` of each row, as uint64 (Spark's long, two's complement)."""
    if not columns:
        raise ConfigError("a key needs at least one column")
    h = np.full(len(columns[0]), SEED, dtype=_U64)
    for c in columns:
        h = _column(c, h)
    return h


def xxh64_int(data: bytes, seed: int = SEED) -> int:
    """XXH64 of one byte string: the plain specification the vectorised code is tested against."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (64 - r))) & _MASK

    def round_(acc: int, lane: int) -> int:
        return (rotl((acc + lane * P2) & _MASK, 31) * P1) & _MASK

    n, at = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & _MASK, (seed + P2) & _MASK, seed, (seed - P1) & _MASK]
        while at + 32 <= n:
            v = [round_(v[i], int.from_bytes(data[at + 8 * i : at + 8 * i + 8], "little")) for i in range(4)]
            at += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & _MASK
        for x in v:
            h = ((h ^ round_(0, x)) * P1 + P4) & _MASK
    else:
        h = (seed + P5) & _MASK
    h = (h + n) & _MASK
    while at + 8 <= n:
        h = (rotl(h ^ round_(0, int.from_bytes(data[at : at + 8], "little")), 27) * P1 + P4) & _MASK
        at += 8
    if at + 4 <= n:
        h = (rotl(h ^ ((int.from_bytes(data[at : at + 4], "little") * P1) & _MASK), 23) * P2 + P3) & _MASK
        at += 4
    while at < n:
        h = (rotl(h ^ ((data[at] * P5) & _MASK), 11) * P1) & _MASK
        at += 1
    h ^= h >> 33
    h = (h * P2) & _MASK
    h ^= h >> 29
    h = (h * P3) & _MASK
    return h ^ (h >> 32)
