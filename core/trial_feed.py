"""Records for a trial of a job: every source of it fed with generated records at a rate, as files.

Why files and not a generator inside the run: a trial should exercise what production runs, which is
the file source (its listing, validation, routing log and dead letters) fed by a writer. So a trial's
input is written like a user's own, whole files renamed into place, and with `live` as the records
happen, so a followed run sees them arrive at their rate and a burst arrive as one.

What the values are: the event time advances at the rate (faster inside the burst); every int64
column draws from the same `keys` values, and strings are those keys as text, so a join of two sources
on any such columns finds partners and a keyed aggregate has `keys` groups. Floats are normal around
50, bools fair coins, other timestamps the event time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from core.errors import ConfigError
from core.file_schema import FileSchema

START = datetime(2026, 11, 26, tzinfo=UTC)  # event time of a trial's first record
BURST_S = 30.0  # seconds of records the burst compresses


def arrival_seconds(
    records: int, rate: float, burst_at: float = -1.0, burst_factor: float = 1.0, burst_s: float = BURST_S
) -> np.ndarray:
    """Each record's event time in seconds from the start: `rate` a second, and the `burst_s` seconds of
    records from second `burst_at` on come `burst_factor` times as fast (no burst when burst_at < 0)."""
    gaps = np.full(records, 1.0 / rate)
    if burst_at >= 0:
        t = np.cumsum(gaps)
        gaps[(t >= burst_at) & (t < burst_at + burst_s)] /= burst_factor
    return np.cumsum(gaps)


def wait_until_due(origin: float, seconds: float) -> None:
    """Sleep until `seconds` after `origin` (a wall-clock time): a live writer's file is due then."""
    time.sleep(max(0.0, origin + seconds - time.time()))


@dataclass(frozen=True)
class FeedConfig:
    """How much to write, how fast, and the burst."""

    records: int = 100_000  # per source
    rate: float = 1_000.0  # records per second of event time, per source
    files: int = 20  # per source
    keys: int = 1_000  # distinct values of every int64 and string column
    seed: int = 0
    burst_at: float = -1.0
    burst_factor: float = 10.0
    live: bool = False

    def __post_init__(self) -> None:
        for name in ("records", "files", "keys"):
            if getattr(self, name) < 1:
                raise ConfigError(
                    f"--{name} must be at least 1, got {getattr(self, name)}", hint="see `sponge feed --help`"
                )
        if not self.rate > 0 or not self.burst_factor > 0:
            raise ConfigError("--rate and --burst-factor must be positive", hint="see `sponge feed --help`")


def _values(source: FileSchema, config: FeedConfig, t: np.ndarray, rng: np.random.Generator) -> dict:
    n = len(t)
    at = [START + timedelta(seconds=float(s)) for s in t]
    columns: dict[str, list] = {}
    for name, kind in source.columns:
        if kind == "timestamp":
            columns[name] = at
        elif kind == "int64":
            columns[name] = rng.integers(0, config.keys, n).tolist()
        elif kind == "string":
            columns[name] = [f"k{k}" for k in rng.integers(0, config.keys, n)]
        elif kind == "float64":
            columns[name] = np.round(rng.normal(50.0, 15.0, n), 3).tolist()
        else:  # bool
            columns[name] = (rng.random(n) < 0.5).tolist()
    return columns


def feed(
    output: Path,
    sources: Mapping[str, FileSchema],
    config: FeedConfig,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, int]:
    """Write `config.records` records of each source under OUTPUT/<source>/ in `config.files` files (the
    sources' file i together); with `live`, each file once its last record is due. Returns the records
    written per source; `progress(files_written, files_in_all)` after each file."""
    from core.job import write_source_file

    t = arrival_seconds(config.records, config.rate, config.burst_at, config.burst_factor)
    per_file = -(-config.records // config.files)
    spans = [(lo, min(config.records, lo + per_file)) for lo in range(0, config.records, per_file)]
    total = len(spans) * len(sources)
    rngs = {name: np.random.default_rng([config.seed, i]) for i, name in enumerate(sources)}
    origin = time.time()
    done = 0
    for part, (lo, hi) in enumerate(spans):
        if config.live:
            wait_until_due(origin, float(t[hi - 1]))
        for name, source in sources.items():
            columns = _values(source, config, t[lo:hi], rngs[name])
            write_source_file(output, name, part, _rows(columns, hi - lo), format=source.format)
            done += 1
            if progress is not None:
                progress(done, total)
    return {name: config.records for name in sources}


def _rows(columns: Mapping[str, list], n: int) -> Iterator[dict]:
    names = list(columns)
    for i in range(n):
        yield {name: columns[name][i] for name in names}
