"""The offload plan of one epoch and the pure routing function that applies it.

Why a frozen, versioned value: the plan is the paper's offload message M (section 4.5, Fig. 7).
It is fixed per epoch and recorded with the epoch, so a replayed micro-batch must route every record
exactly as the first attempt did: every record of an epoch is processed either locally or by
transient operators, never both, never neither. That only holds if routing is a pure function of
(plan, key, record id) that gives the same answer in every process, on every run and on every
machine, so nothing here may use Python's salted `hash()`, a random generator or iteration order.

Two functions decide, and the module says exactly what they are:

* key group = Spark's ``pmod(xxhash64(key columns), KEY_GROUPS)`` (core/xxhash64.py), so the VM's
  Spark operators compute the same group for a key as the router does in the source read;
* record unit = ``(splitmix64(record_id ^ RECORD_SALT) >> 11) / 2**53`` in [0, 1), where
  ``splitmix64(x)`` is ``z = x + 0x9E3779B97F4A7C15``, then ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
  z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31``, all modulo 2**64; the record is in the
  record share when its unit is below ``share``.

They are different functions, so which key groups a plan offloads and which records its share takes
are independent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from core.errors import ConfigError
from core.xxhash64 import xxhash64

DEFAULT_OFFLOAD_COST = 0.25  # VM work of an offloaded record, in kept records, when not measured (ADR 0008)
OFFLOAD_COST_FLOOR = 0.1  # the least an offloaded record is taken to cost the VM, in kept records


def share_scale(share: float) -> float:
    """How many more offsets an epoch may cover while `share` of them is offloaded (ADR 0008, 0062).

    The source's batch cap bounds the VM's work per epoch. An offloaded event costs the VM a fraction k
    of a kept one, so the same work covers 1 / ((1 - share) + share x k) times the offsets. The cap
    takes k at its floor, not at the probe's reading: at a drill's epoch sizes k is a ratio of two
    slopes lost in the epochs' fixed cost, and a reading too high held sponge's burst epochs at a cap
    it could have doubled, its VM a quarter idle, while one too low only lengthens its epochs.
    """
    return 1.0 / ((1.0 - share) + share * OFFLOAD_COST_FLOOR)


KEY_GROUPS = 128
"""Number of key groups: the unit in which keyed state can be offloaded (and, later, migrated)."""

PLAN_FORMAT = 1
"""Version of the JSON layout of an OffloadPlan (not the plan's own epoch-scoped `version`)."""

_MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
RECORD_SALT = 0x13198A2E03707344

_U64 = np.uint64


# ---- the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffloadPlan:
    """Which records of an epoch go to Lambda workers, and how many workers take them.

    `version` increases every time the policy changes the plan; a routing log keyed by source
    offsets records which version an epoch used. `share` is the fraction of records (by a stable
    hash of the record id) to offload; `key_groups` are whole key groups to offload (for state that
    cannot be split into mergeable partials); `workers` is the number of Lambda workers to use.
    """

    version: int
    share: float = 0.0
    key_groups: frozenset[int] = frozenset()
    workers: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.version, bool) or not isinstance(self.version, int | np.integer):
            raise ConfigError(f"offload plan version must be an integer, got {self.version!r}")
        if self.version < 0:
            raise ConfigError(f"offload plan version must be >= 0, got {self.version}")
        object.__setattr__(self, "version", int(self.version))
        share = self.share
        if isinstance(share, bool) or not isinstance(share, int | float | np.integer | np.floating):
            raise ConfigError(f"offload share must be a number in [0, 1], got {share!r}")
        share = float(share)
        if not math.isfinite(share) or not 0.0 <= share <= 1.0:
            raise ConfigError(
                f"offload share must be in [0, 1], got {share}", hint="0 keeps every record on the VMs"
            )
        object.__setattr__(self, "share", share)
        groups = self.key_groups
        if isinstance(groups, str | bytes) or not isinstance(groups, Iterable):
            raise ConfigError(f"key_groups must be a set of integers, got {groups!r}")
        checked = set()
        for g in groups:
            if isinstance(g, bool) or not isinstance(g, int | np.integer) or not 0 <= g < KEY_GROUPS:
                raise ConfigError(
                    f"key group {g!r} is out of range", hint=f"key groups are integers in [0, {KEY_GROUPS})"
                )
            checked.add(int(g))
        object.__setattr__(self, "key_groups", frozenset(checked))
        if (
            isinstance(self.workers, bool)
            or not isinstance(self.workers, int | np.integer)
            or self.workers < 0
        ):
            raise ConfigError(f"workers must be a non-negative integer, got {self.workers!r}")
        object.__setattr__(self, "workers", int(self.workers))
        if self.offloads and self.workers == 0:
            raise ConfigError(
                f"offload plan v{self.version} offloads records but names no workers",
                hint="set workers >= 1, or share=0 and no key groups to keep everything local",
            )

    @classmethod
    def of_share(cls, version: int, share: float, workers: int) -> OffloadPlan:
        """The plan that offloads `share`: that share of the records of streams routed by record, and
        the first ceil(share x KEY_GROUPS) key groups of streams that feed a keyed stage."""
        groups = frozenset(range(math.ceil(float(share) * KEY_GROUPS))) if 0 <= share <= 1 else frozenset()
        return cls(version=version, share=share, key_groups=groups, workers=workers)

    @classmethod
    def local(cls, version: int = 0) -> OffloadPlan:
        """The plan of an epoch that offloads nothing (non-scaling periods)."""
        return cls(version=version)

    @property
    def offloads(self) -> bool:
        return self.share > 0.0 or bool(self.key_groups)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "version": self.version,
            "share": self.share,
            "key_groups": sorted(self.key_groups),
            "workers": self.workers,
        }

    def dumps(self) -> str:
        """Canonical JSON (sorted keys, no spaces): equal plans serialise to equal strings."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OffloadPlan:
        if not isinstance(data, Mapping):
            raise ConfigError(f"an offload plan is a JSON object, got {type(data).__name__}")
        fields = {"format", "version", "share", "key_groups", "workers"}
        unknown = set(data) - fields
        if unknown:
            raise ConfigError(
                f"unknown offload plan fields {sorted(unknown)}", hint=f"known: {sorted(fields)}"
            )
        missing = fields - set(data)
        if missing:
            raise ConfigError(f"offload plan lacks fields {sorted(missing)}")
        if data["format"] != PLAN_FORMAT:
            raise ConfigError(
                f"offload plan format {data['format']!r} is not supported",
                hint=f"this build reads format {PLAN_FORMAT}; upgrade the component that wrote it",
            )
        groups = data["key_groups"]
        if not isinstance(groups, list):
            raise ConfigError(f"key_groups must be a JSON list, got {groups!r}")
        return cls(
            version=data["version"],
            share=data["share"],
            key_groups=frozenset(groups),
            workers=data["workers"],
        )

    @classmethod
    def loads(cls, text: str) -> OffloadPlan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"offload plan is not valid JSON: {e}") from None
        return cls.from_json(data)


# ---- stable hashes -----------------------------------------------------------------------------


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 of a uint64 array (a new array; uint64 array arithmetic wraps modulo 2**64)."""
    z = np.asarray(x, dtype=_U64) + _U64(GOLDEN)
    z ^= z >> _U64(30)
    z *= _U64(_MUL1)
    z ^= z >> _U64(27)
    z *= _U64(_MUL2)
    z ^= z >> _U64(31)
    return z


def splitmix64_int(x: int) -> int:
    """The same function on one Python int: the executable specification the tests compare against."""
    z = (x + GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MUL1) & _MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & _MASK64
    return z ^ (z >> 31)


def key_hash(keys: pa.Array | pa.ChunkedArray | pa.Table | np.ndarray) -> np.ndarray:
    """Spark's xxhash64 of every key (uint64): one column, a struct of columns, or a table of them."""
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind not in "iub":
            raise ConfigError(
                f"numpy keys must be integers, got dtype {keys.dtype}", hint="pass strings as a pyarrow array"
            )
        keys = pa.array(keys.astype(np.int64))
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if isinstance(keys, pa.Table):
        return xxhash64([c.combine_chunks() for c in keys.columns])
    if isinstance(keys, pa.StructArray):
        return xxhash64([keys.field(i) for i in range(keys.type.num_fields)])
    if isinstance(keys, pa.Array):
        return xxhash64([keys])
    raise ConfigError(f"keys must be a pyarrow array, table or numpy array, got {type(keys).__name__}")


def key_groups_of(keys: pa.Array | pa.ChunkedArray | pa.Table | np.ndarray) -> np.ndarray:
    """Key group in [0, KEY_GROUPS) of every key (int16): Spark's pmod(xxhash64(keys), KEY_GROUPS),
    which for a power of two is the hash's low bits."""
    return (key_hash(keys) % _U64(KEY_GROUPS)).astype(np.int16)


def record_units(record_ids: np.ndarray) -> np.ndarray:
    """A stable pseudo-uniform number in [0, 1) per record id (float64, 53 bits)."""
    ids = np.asarray(record_ids)
    if ids.dtype.kind not in "iu":
        raise ConfigError(
            f"record ids must be integers, got dtype {ids.dtype}",
            hint="use the source offset or event id of each record",
        )
    h = splitmix64(ids.astype(np.int64).view(_U64) ^ _U64(RECORD_SALT))
    return (h >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))


def expected_offloaded_share(plan: OffloadPlan) -> float:
    """The share of a stream's records `plan` sends to the workers, in expectation: a stream is routed
    by the record share or, if it feeds a keyed stage, by the key groups (uniform), never by both."""
    return max(plan.share, len(plan.key_groups) / KEY_GROUPS)


def offloaded_mask(
    plan: OffloadPlan,
    keys: pa.Array | pa.ChunkedArray | pa.Table | np.ndarray | None,
    record_ids: np.ndarray,
) -> np.ndarray:
    """True for each record that goes to the Lambda workers under `plan`, False for the VM path.

    A record is offloaded when its key group is one of `plan.key_groups`, or when its record unit
    is below `plan.share`. Pure: the same (plan, keys, record_ids) give the same mask in any process.
    `keys` may be None when the plan offloads no key groups (a global aggregate has no key).
    """
    ids = np.asarray(record_ids)
    if ids.ndim != 1:
        raise ConfigError(f"record_ids must be one-dimensional, got shape {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise ConfigError(
            f"record ids must be integers, got dtype {ids.dtype}",
            hint="use the source offset or event id of each record",
        )
    n = len(ids)
    if keys is not None and len(keys) != n:
        raise ConfigError(f"{len(keys)} keys for {n} record ids", hint="pass one key per record")
    mask = np.zeros(n, dtype=bool)
    if plan.share >= 1.0:
        mask[:] = True
        return mask
    if plan.share > 0.0:
        mask |= record_units(ids) < plan.share
    if plan.key_groups:
        if keys is None:
            raise ConfigError(
                f"offload plan v{plan.version} offloads key groups but no keys were given",
                hint="pass the key column(s) of the records",
            )
        selected = np.zeros(KEY_GROUPS, dtype=bool)
        selected[sorted(plan.key_groups)] = True
        mask |= selected[key_groups_of(keys)]
    return mask
