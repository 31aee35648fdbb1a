"""Counter-based randomness for the NEXMark generator: independent draws per (seed, field, event index).

Why counter-based: the Spark source, the Parquet export and the batch reference each generate
arbitrary ranges of the one global event sequence, in any order and on different processes, and
must agree byte for byte. So every draw for event n is a splitmix64 hash of (seed, field salt, n),
never a sequential RNG, computed for whole arrays of indices at once with numpy. The salts and the
hash constants fix the event sequence: changing any of them changes every generated event.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

MASK64 = (1 << 64) - 1  # Python ints do not wrap: masked to the 64 bits the uint64 arrays wrap at
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB

# Field salts: distinct constants so that each field draws independent bits for the same event. A
# salt is its position here, so new fields go at the end: reordering would change every event.
_SALTS = {
    name: i + 1
    for i, name in enumerate(
        (
            "name",
            "email_user",
            "email_user_len",
            "email_domain",
            "email_domain_len",
            "credit_card",
            "city",
            "state",
            "extra",
            "extra_len",
            "item_name",
            "item_name_len",
            "description",
            "description_len",
            "initial_bid",
            "reserve",
            "expires",
            "seller_hot",
            "seller",
            "category",
            "auction_hot",
            "auction",
            "bidder_hot",
            "bidder",
            "price",
            "channel_hot",
            "channel",
        )
    )
}


def mix_int(x: int) -> int:
    """splitmix64's finaliser on a Python int: used for the per-(seed, field) keys."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * _MUL1) & MASK64
    x = ((x ^ (x >> 27)) * _MUL2) & MASK64
    return x ^ (x >> 31)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on a uint64 array (array arithmetic wraps modulo 2^64)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_MUL1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_MUL2)
    z ^= z >> np.uint64(31)
    return z


_LETTERS = (97 + (np.arange(256, dtype=np.uint16) * 26 >> 8)).astype(np.uint8)
"""Random byte -> lowercase letter, near-uniformly (each letter takes 9 or 10 of the 256 values)."""
DIGITS = (48 + (np.arange(256, dtype=np.uint16) * 10 >> 8)).astype(np.uint8)
"""Random byte -> decimal digit."""
_SPACE_BYTES = 20
"""Bytes below this become a blank inside words: 20/256, about one character in 13 as in NEXMark."""


class Draw:
    """Independent pseudo-random draws for a set of event indices, one stream per field salt."""

    def __init__(self, seed: int, n: np.ndarray) -> None:
        self.seed = seed
        self.n = n
        self._counter = n.astype(np.uint64) * np.uint64(_GOLDEN)

    def _key(self, salt: str) -> np.uint64:
        return np.uint64(mix_int(mix_int(self.seed * _GOLDEN + _SALTS[salt]) + _SALTS[salt]))

    def bits(self, salt: str) -> np.ndarray:
        """64 random bits per event."""
        return _mix(self._counter + self._key(salt))

    def unit(self, salt: str) -> np.ndarray:
        """Uniform doubles in [0, 1)."""
        return (self.bits(salt) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

    def below(self, salt: str, bound: np.ndarray | int) -> np.ndarray:
        """Uniform int64 in [0, bound) (bound may vary per event)."""
        return (self.unit(salt) * bound).astype(np.int64)

    def chance(self, salt: str, share: float) -> np.ndarray:
        """True with probability `share`."""
        return self.unit(salt) < share

    def price(self, salt: str) -> np.ndarray:
        """NEXMark's log-uniform price in cents: round(10^(6u) * 100), from 100 to 100,000,000."""
        return np.floor(np.power(10.0, self.unit(salt) * 6.0) * 100.0 + 0.5).astype(np.int64)

    def byte_matrix(self, salt: str, width: int) -> np.ndarray:
        """`width` random bytes per event, as a (events, width) uint8 matrix.

        Eight bytes come from each 64-bit hash of (n, word); reading them through a uint8 view makes
        the byte order the machine's, which is little-endian on every platform we run on.
        """
        words = -(-width // 8)
        cells = self.n.astype(np.uint64)[:, None] * np.uint64(words) + np.arange(words, dtype=np.uint64)
        z = _mix(cells * np.uint64(_GOLDEN) + self._key(salt))
        return z.view(np.uint8).reshape(len(self.n), words * 8)[:, :width]

    def text(self, salt: str, min_len: int, max_len: int, spaces: bool = False) -> pa.StringArray:
        """Random lowercase words of min_len..max_len characters, one per event.

        With `spaces`, about one interior character in 13 is a blank, as in the standard generator's
        strings, but never the first or last, so nothing needs trimming. The bytes past each length
        are dropped before the letter lookup, which halves the cost for short strings.
        """
        raw = self.byte_matrix(salt, max_len)
        length = min_len + self.below(salt + "_len", max_len - min_len + 1)
        col = np.arange(max_len)[None, :]
        keep = col < length[:, None]
        if spaces:
            interior = (col > 0) & (col < length[:, None] - 1)
            data = np.where(interior & (raw < _SPACE_BYTES), np.uint8(ord(" ")), _LETTERS[raw])[keep]
        else:
            data = _LETTERS[raw[keep]]
        return pack_strings(data, length)


def pack_strings(data: np.ndarray, lengths: np.ndarray) -> pa.StringArray:
    """An Arrow string array from the concatenated UTF-8 bytes and each string's length."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.StringArray.from_buffers(
        len(lengths), pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data, dtype=np.uint8))
    )
