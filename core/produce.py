"""Write generated NEXMark events into a Kinesis stream at the pace of their schedule (`sponge produce`).

Why: the Kinesis source (core/spark/kinesis_source.py) needs a stream whose contents are known, so a
run over it can be compared with the batch reference over the same events (same seed, events and
schedule), and a drill needs them to arrive as its burst says. Records are in global event order,
each the event's JSON line (core/nexmark/jsonl.py) tagged with its entity (core/kinesis.py); the
partition key is the event's index, so every entity's records spread over all shards. Once every
event is in, each shard gets the end-of-stream marker, unless asked not to (a stream that goes on).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.kinesis import KinesisEndpoint, ensure_stream, put_end_markers, put_records
from core.nexmark.generator import GeneratorConfig, event_ids, generate
from core.nexmark.jsonl import jsonl_bytes
from core.nexmark.schema import ENTITIES

CHUNK_EVENTS = 2_000  # events generated and put at a time (4 PutRecords calls)


@dataclass(frozen=True)
class ProduceConfig:
    generator: GeneratorConfig
    endpoint: KinesisEndpoint
    shards: int = 2
    pace: bool = True  # release events when the schedule says they happen; else as fast as Kinesis takes
    end: bool = True  # put the end-of-stream markers after the last event
    start: int = 0  # the first event to put (a stream written in parts: the rest of an earlier one's)


def event_records(config: GeneratorConfig, start: int, end: int) -> list[tuple[str, bytes]]:
    """Events [start, end) as (partition key, data) records, in event order."""
    keyed: list[tuple[int, bytes]] = []
    for entity in ENTITIES:
        lines = jsonl_bytes(generate(config, entity, start, end)).splitlines()
        ids = event_ids(entity, start, end)
        tag = b'{"type":"' + entity.encode() + b'",'
        keyed.extend((int(n), tag + line[1:]) for n, line in zip(ids, lines, strict=True))
    keyed.sort(key=lambda kv: kv[0])
    return [(str(n), data) for n, data in keyed]


def produce(config: ProduceConfig, progress: Callable[[int, int], None] | None = None) -> dict:
    """Put every event of `config.generator` into the stream (created if missing); return a summary."""
    gen, endpoint = config.generator, config.endpoint
    client = endpoint.client()
    shards = ensure_stream(client, endpoint, config.shards)
    started = time.monotonic()
    done = config.start
    origin = float(gen.schedule.offset_s(np.array([config.start]))[0]) if config.start else 0.0
    while done < gen.events:
        due = gen.events
        if config.pace:
            elapsed = origin + time.monotonic() - started
            due = min(gen.events, int(gen.schedule.events_by(elapsed)))
        if due <= done:
            time.sleep(0.01)
            continue
        stop = min(due, done + CHUNK_EVENTS)
        put_records(client, endpoint, event_records(gen, done, stop))
        done = stop
        if progress is not None:
            progress(done, gen.events)
    if config.end:
        put_end_markers(client, endpoint)
    wall = time.monotonic() - started
    return {
        "stream": endpoint.stream,
        "shards": shards,
        "events": gen.events - config.start,
        "seed": gen.seed,
        "schedule": gen.schedule.text(),
        "ended": config.end,
        "wall_s": round(wall, 3),
        "events_per_s": round((gen.events - config.start) / wall, 1) if wall > 0 else None,
    }
