"""Deterministic, vectorised NEXMark event generator.

Why counter-based: the Spark source, the Parquet export and the batch reference each generate
arbitrary ranges of the one global event sequence, in any order and on different processes, and
must agree byte for byte. So every field of event n is a pure function of (seed, n): a splitmix64
hash of (seed, field salt, n), never a sequential RNG (core/nexmark/draw.py). Whole ranges are
generated with numpy array arithmetic (no per-row Python), which keeps a 1M-event pass well under a
second.

The model follows the standard NEXMark generator (Beam's GeneratorConfig / PersonGenerator /
AuctionGenerator / BidGenerator): event n is a person, auction or bid by n % 50 (1:3:46); ids are
dense and base 1000; auctions choose a seller among the recently active people (most often a "hot"
one), bids choose an auction among the ones in flight (half of them the hot one) and a bidder among
the active people. Unlike Beam, no id ever refers to an entity that does not exist yet, so the
reference joins are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.errors import ConfigError
from core.nexmark.draw import DIGITS, MASK64, Draw, mix_int, pack_strings
from core.nexmark.schedule import RateSchedule
from core.nexmark.schema import TIMESTAMP, check_entity, schema_for

FIRST_EVENT_TIME_US = 1_767_225_600_000_000
"""2026-01-01T00:00:00Z in microseconds: the event time of event 0 (docs/queries.md)."""

PROPORTION_DENOMINATOR = 50
PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
ACTIVE_PEOPLE = 1000
"""Sellers and bidders are drawn from the most recent people, so per-person density stays flat."""
IN_FLIGHT_AUCTIONS = 100
"""Bids go to one of the most recent auctions, the ones still open."""
HOT_STRIDE = 100
"""The hot seller/auction/bidder is the first of the last block of this many ids."""
HOT_AUCTION_SHARE = 1 / 2
HOT_SELLER_SHARE = 3 / 4
HOT_BIDDER_SHARE = 3 / 4
HOT_CHANNEL_SHARE = 1 / 2
NUM_CHANNELS = 10_000
MIN_AUCTION_MS = 2_000
MAX_AUCTION_MS = 20_000
MAX_EXTRA_CHARS = 16

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
)
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")

_ENTITY_SLOTS = {"person": (0, 1), "auction": (1, 4), "bid": (4, PROPORTION_DENOMINATOR)}
"""Per entity, the half-open range of n % 50 that it occupies."""


@dataclass(frozen=True)
class GeneratorConfig:
    """Everything that fixes the event sequence: `events` events in all, keyed by `seed`, timed by `schedule`.

    Frozen and picklable, so the same value can travel to Spark's Python workers.
    """

    seed: int
    events: int
    schedule: RateSchedule = field(default_factory=lambda: RateSchedule.constant(10_000))
    first_event_time_us: int = FIRST_EVENT_TIME_US

    def __post_init__(self) -> None:
        for name in ("seed", "events", "first_event_time_us"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ConfigError(
                    f"generator {name} must be an integer, got {value!r}",
                    hint=f"pass --{name.replace('_', '-')} as a whole number",
                )
            object.__setattr__(self, name, int(value))
        if self.seed < 0 or self.seed > MASK64:
            raise ConfigError(
                f"seed must be in [0, 2^64), got {self.seed}", hint="pass --seed as a non-negative integer"
            )
        if self.events < 0:
            raise ConfigError(
                f"events must be >= 0, got {self.events}", hint="pass --events as a non-negative integer"
            )
        if not isinstance(self.schedule, RateSchedule):
            raise ConfigError(
                f"schedule must be a RateSchedule, got {type(self.schedule).__name__}",
                hint="build it with RateSchedule.parse(text) or RateSchedule.constant(rate)",
            )


def entity_share(entity: str) -> float:
    """The share of all event indices that are of `entity` (person 1/50, auction 3/50, bid 46/50)."""
    lo, hi = _ENTITY_SLOTS[check_entity(entity)]
    return (hi - lo) / PROPORTION_DENOMINATOR


def event_ids(entity: str, start: int, end: int) -> np.ndarray:
    """Global indices n in [start, end) whose event is of `entity`, ascending (int64)."""
    lo, hi = _ENTITY_SLOTS[check_entity(entity)]
    start, end = max(int(start), 0), max(int(end), 0)
    if end <= start:
        return np.empty(0, dtype=np.int64)
    if entity == "person":
        first = -(-start // PROPORTION_DENOMINATOR) * PROPORTION_DENOMINATOR
        return np.arange(first, end, PROPORTION_DENOMINATOR, dtype=np.int64)
    n = np.arange(start, end, dtype=np.int64)
    slot = n % PROPORTION_DENOMINATOR
    return n[(slot >= lo) & (slot < hi)]


def generate(config: GeneratorConfig, entity: str, start: int, end: int) -> pa.RecordBatch:
    """The `entity` rows among events [start, end) ∩ [0, config.events), ascending by event index."""
    return generate_ids(config, entity, event_ids(entity, start, min(int(end), config.events)))


def generate_ids(
    config: GeneratorConfig, entity: str, n: np.ndarray, columns: Collection[str] | None = None
) -> pa.RecordBatch:
    """The rows of the `entity` events with global indices `n` (ascending, all of that entity); only
    `columns` of them when given (in the schema's order).

    Every column is a pure function of the event index and its own random stream, so a router can
    build only the records its route keeps, and only the columns their consumer reads: a subset equals
    the same rows and columns cut out of the whole range.
    """
    schema = schema_for(entity)
    if columns is not None:
        unknown = set(columns) - set(schema.names)
        if unknown:
            raise ConfigError(f"{entity} has no columns {sorted(unknown)}", hint=f"columns: {schema.names}")
        schema = pa.schema([f for f in schema if f.name in columns])
    build = _BUILDERS[entity](Draw(config.seed, n), date_time_us(config, n))
    return pa.RecordBatch.from_arrays([build[f.name]() for f in schema], schema=schema)


def iter_batches(
    config: GeneratorConfig, entity: str, batch_events: int = 200_000
) -> Iterator[pa.RecordBatch]:
    """All `entity` rows of the configuration, in non-empty batches covering `batch_events` events each."""
    if batch_events <= 0:
        raise ConfigError(f"batch_events must be positive, got {batch_events}", hint="use e.g. 200000")
    check_entity(entity)
    for start in range(0, config.events, batch_events):
        batch = generate(config, entity, start, start + batch_events)
        if batch.num_rows:
            yield batch


def date_time_us(config: GeneratorConfig, n: np.ndarray) -> np.ndarray:
    """Event time of events `n` in microseconds since the epoch (int64), rounded to the microsecond."""
    offset_us = np.rint(config.schedule.offset_s(n) * 1e6).astype(np.int64)
    return offset_us + np.int64(config.first_event_time_us)


# --------------------------------------------------------------------------------------------------
# Arrow assembly


def _int64(values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _timestamps(values_us: np.ndarray) -> pa.Array:
    values_us = np.ascontiguousarray(values_us, dtype=np.int64)
    return pa.Array.from_buffers(TIMESTAMP, len(values_us), [None, pa.py_buffer(values_us)])


@cache
def _table(values: tuple[str, ...]) -> pa.StringArray:
    return pa.array(values, type=pa.string())


@lru_cache(maxsize=1)
def _channel_tables() -> tuple[pa.StringArray, pa.StringArray]:
    """Channel names and their URLs: the hot channels first, then NUM_CHANNELS numbered ones.

    A fixed table (independent of the seed) that bids index into, so a bid's channel and URL always
    agree and building them costs one Arrow `take`.
    """
    names = list(HOT_CHANNELS)
    urls = [f"https://www.nexmark.com/{name.lower()}/item.htm?query=1" for name in HOT_CHANNELS]
    for k in range(NUM_CHANNELS):
        word = "".join(chr(97 + (mix_int(k * 7 + j) % 26)) for j in range(3 + mix_int(k) % 4))
        names.append(f"channel-{k}")
        urls.append(f"https://www.nexmark.com/{word}/item.htm?query=1&channel_id={k}")
    return pa.array(names, type=pa.string()), pa.array(urls, type=pa.string())


def _cold_person(draw: Draw, salt: str, last_person: np.ndarray) -> np.ndarray:
    """A base-0 person id among the ACTIVE_PEOPLE most recent ones (all of which exist)."""
    active = np.minimum(last_person + 1, ACTIVE_PEOPLE)
    return last_person + 1 - active + draw.below(salt, active)


#: An entity's columns by name, each built only when asked for.
Columns = dict[str, Callable[[], pa.Array]]


def _persons(draw: Draw, date_time: np.ndarray) -> Columns:
    n, rows = draw.n, len(draw.n)

    def name() -> pa.Array:
        full_names = tuple(f"{first} {last}" for first in FIRST_NAMES for last in LAST_NAMES)
        return _table(full_names).take(draw.below("name", len(full_names)))

    def email() -> pa.Array:
        domain = pc.binary_join_element_wise(draw.text("email_domain", 3, 5), ".com", "")
        return pc.binary_join_element_wise(draw.text("email_user", 3, 7), domain, "@")

    def credit_card() -> pa.Array:
        # Four blocks of four digits separated by blanks: a fixed 19-byte layout.
        card = np.full((rows, 19), ord(" "), dtype=np.uint8)
        digits = DIGITS[draw.byte_matrix("credit_card", 16)]
        for group in range(4):
            card[:, group * 5 : group * 5 + 4] = digits[:, group * 4 : group * 4 + 4]
        return pack_strings(card.reshape(-1), np.full(rows, 19))

    return {
        "id": lambda: _int64(FIRST_PERSON_ID + n // PROPORTION_DENOMINATOR),
        "name": name,
        "email_address": email,
        "credit_card": credit_card,
        "city": lambda: _table(US_CITIES).take(draw.below("city", len(US_CITIES))),
        "state": lambda: _table(US_STATES).take(draw.below("state", len(US_STATES))),
        "date_time": lambda: _timestamps(date_time),
        "extra": lambda: draw.text("extra", 0, MAX_EXTRA_CHARS),
    }


def _auctions(draw: Draw, date_time: np.ndarray) -> Columns:
    epoch, slot = np.divmod(draw.n, PROPORTION_DENOMINATOR)

    def seller() -> pa.Array:
        last_person = epoch * PERSON_PROPORTION + (PERSON_PROPORTION - 1)
        hot_seller = (last_person // HOT_STRIDE) * HOT_STRIDE
        cold = _cold_person(draw, "seller", last_person)
        return _int64(
            FIRST_PERSON_ID + np.where(draw.chance("seller_hot", HOT_SELLER_SHARE), hot_seller, cold)
        )

    @cache
    def initial_bid() -> np.ndarray:  # read by initial_bid and reserve
        return draw.price("initial_bid")

    def expires() -> pa.Array:
        duration_ms = MIN_AUCTION_MS + draw.below("expires", MAX_AUCTION_MS - MIN_AUCTION_MS + 1)
        return _timestamps(date_time + duration_ms * 1000)

    return {
        "id": lambda: _int64(FIRST_AUCTION_ID + epoch * AUCTION_PROPORTION + (slot - PERSON_PROPORTION)),
        "item_name": lambda: draw.text("item_name", 3, 20, spaces=True),
        "description": lambda: draw.text("description", 3, 100, spaces=True),
        "initial_bid": lambda: _int64(initial_bid()),
        "reserve": lambda: _int64(initial_bid() + draw.price("reserve")),
        "date_time": lambda: _timestamps(date_time),
        "expires": expires,
        "seller": seller,
        "category": lambda: _int64(FIRST_CATEGORY_ID + draw.below("category", NUM_CATEGORIES)),
        "extra": lambda: draw.text("extra", 0, MAX_EXTRA_CHARS),
    }


def _bids(draw: Draw, date_time: np.ndarray) -> Columns:
    epoch = draw.n // PROPORTION_DENOMINATOR

    def auction() -> pa.Array:
        last_auction = epoch * AUCTION_PROPORTION + (AUCTION_PROPORTION - 1)
        first_open = np.maximum(last_auction - IN_FLIGHT_AUCTIONS, 0)
        cold_auction = first_open + draw.below("auction", last_auction - first_open + 1)
        hot = draw.chance("auction_hot", HOT_AUCTION_SHARE)
        return _int64(
            FIRST_AUCTION_ID + np.where(hot, (last_auction // HOT_STRIDE) * HOT_STRIDE, cold_auction)
        )

    def bidder() -> pa.Array:
        last_person = epoch * PERSON_PROPORTION + (PERSON_PROPORTION - 1)
        # The hot bidder is the second person of the block, so it differs from the hot seller.
        hot_bidder = np.minimum((last_person // HOT_STRIDE) * HOT_STRIDE + 1, last_person)
        cold = _cold_person(draw, "bidder", last_person)
        return _int64(
            FIRST_PERSON_ID + np.where(draw.chance("bidder_hot", HOT_BIDDER_SHARE), hot_bidder, cold)
        )

    @cache
    def channel_index() -> pa.Array:  # read by channel and url
        channel = np.where(
            draw.chance("channel_hot", HOT_CHANNEL_SHARE),
            draw.below("channel", len(HOT_CHANNELS)),
            len(HOT_CHANNELS) + draw.below("channel", NUM_CHANNELS),
        )
        return pa.array(channel.astype(np.int32))

    return {
        "auction": auction,
        "bidder": bidder,
        "price": lambda: _int64(draw.price("price")),
        "channel": lambda: _channel_tables()[0].take(channel_index()),
        "url": lambda: _channel_tables()[1].take(channel_index()),
        "date_time": lambda: _timestamps(date_time),
        "extra": lambda: draw.text("extra", 0, MAX_EXTRA_CHARS),
    }


_BUILDERS: dict[str, Callable[[Draw, np.ndarray], Columns]] = {
    "person": _persons,
    "auction": _auctions,
    "bid": _bids,
}
