"""A Kinesis stream of records, read and written over boto3: the one module of the Kinesis source
(core/spark/kinesis_source.py) and of `sponge produce` that talks to Kinesis.

Why one module: boto3 is kept to a few places (tests/test_layers.py); the source's Spark side and the
producer share what a record looks like and how a shard is read, so they cannot drift apart.

Records are JSON objects, one per record. A stream of NEXMark events holds all three entities, each
record tagged with its entity under "type" (`{"type": "bid", "auction": ..., ...}`, the columns of
docs/queries.md, timestamps as the file source takes them); a user's source has a stream of its own
and its records are its rows. A writer that has finished puts END_OF_STREAM into every shard: a
bounded read ends once it has read that marker in every shard.

Sequence numbers order the records of one shard (they are decimal integers, compared as such), and
the reading positions here are always "after sequence number s" (or the shard's start, s = None), so
a range (after `start`, up to and including `end`) names the same records on every read, as long as
the stream's retention keeps them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from core.errors import ConfigError, InputError, SpongeError

TYPE_KEY = "type"
END_OF_STREAM = {"sponge": "end-of-stream"}
END_OF_STREAM_BYTES = json.dumps(END_OF_STREAM).encode()
GET_LIMIT = 10_000  # Kinesis's most records per GetRecords
PUT_LIMIT = 500  # ... and per PutRecords
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


class KinesisError(SpongeError):
    """Kinesis could not be reached, or answered with an error."""


@dataclass(frozen=True)
class KinesisEndpoint:
    """Where a stream lives. `endpoint_url` points at LocalStack (or another emulator); without it
    boto3's own endpoint and credential chain apply. An emulator without credentials in the
    environment gets LocalStack's test ones, which it accepts."""

    stream: str
    endpoint_url: str | None = None
    region: str = "us-east-1"

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        kwargs: dict[str, Any] = {"region_name": self.region}
        if self.endpoint_url:
            kwargs["endpoint_url"] = self.endpoint_url
            if not os.environ.get("AWS_ACCESS_KEY_ID"):
                kwargs.update(aws_access_key_id="test", aws_secret_access_key="test")
        config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30)
        return boto3.client("kinesis", config=config, **kwargs)


def call(what: str, endpoint: KinesisEndpoint, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """`fn(**kwargs)`, with boto3's errors turned into a KinesisError that says where and what to do."""
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

    try:
        return fn(**kwargs)
    except EndpointConnectionError:
        raise KinesisError(
            f"cannot reach Kinesis at {endpoint.endpoint_url or 'its AWS endpoint'} ({what})",
            hint="start LocalStack (make localstack) and pass its --endpoint-url, e.g. http://127.0.0.1:4566",
        ) from None
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            raise KinesisError(
                f"no Kinesis stream {endpoint.stream!r} at {endpoint.endpoint_url or endpoint.region}",
                hint="write it first with `sponge produce --stream NAME`, or check --stream",
            ) from None
        raise KinesisError(f"Kinesis {what} failed: {err}") from None
    except BotoCoreError as err:
        raise KinesisError(f"Kinesis {what} failed: {err}") from None


def shard_ids(client: Any, endpoint: KinesisEndpoint) -> list[str]:
    """The stream's shards, sorted (their ids sort in creation order)."""
    shards: list[str] = []
    kwargs: dict[str, Any] = {"StreamName": endpoint.stream}
    while True:
        page = call("ListShards", endpoint, client.list_shards, **kwargs)
        shards.extend(s["ShardId"] for s in page["Shards"])
        if not page.get("NextToken"):
            return sorted(shards)
        kwargs = {"NextToken": page["NextToken"]}


def is_end_marker(data: bytes) -> bool:
    return data == END_OF_STREAM_BYTES


def shard_records(
    client: Any, endpoint: KinesisEndpoint, shard: str, after: str | None, limit: int | None = None
) -> Iterator[dict]:
    """The records of `shard` after sequence number `after` (from its start if None), in order, up to
    the shard's present end (or `limit` records); each as boto3 gives it (SequenceNumber, Data, ...)."""
    if after is None:
        start = {"ShardIteratorType": "TRIM_HORIZON"}
    else:
        start = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": after}
    iterator = call(
        "GetShardIterator",
        endpoint,
        client.get_shard_iterator,
        StreamName=endpoint.stream,
        ShardId=shard,
        **start,
    )["ShardIterator"]
    taken = 0
    while iterator:
        want = GET_LIMIT if limit is None else min(GET_LIMIT, limit - taken)
        if want <= 0:
            return
        page = call("GetRecords", endpoint, client.get_records, ShardIterator=iterator, Limit=want)
        yield from page["Records"]
        taken += len(page["Records"])
        if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
            return  # at the shard's present end
        iterator = page.get("NextShardIterator")


def records_between(
    client: Any, endpoint: KinesisEndpoint, shard: str, after: str | None, until: str
) -> Iterator[dict]:
    """The records after `after` up to and including sequence number `until`: a micro-batch's share of
    one shard, the same records on every replay. Fails if `until` is no longer there (trimmed)."""
    last = int(until)
    for record in shard_records(client, endpoint, shard, after):
        seq = int(record["SequenceNumber"])
        if seq > last:
            return
        yield record
        if seq == last:
            return
    raise InputError(
        f"Kinesis stream {endpoint.stream!r}, shard {shard}: record {until} is gone "
        "(past the stream's retention, or the stream was recreated)",
        hint="a checkpoint needs its records kept; start from a new --output",
    )


def start_position() -> dict:
    """A shard's position before its first record: nothing read, no event time seen, 0 records."""
    return {"seq": None, "time": None, "ended": False, "n": 0}


class StreamTail:
    """How many records a stream's shards hold now (markers included, as the offsets' `n` counts),
    kept up to date by reading only what arrived since the last look: a live policy's released
    records (core/spark/live_policy.py `KinesisBacklog`).

    Why read records to count them: Kinesis has no count, and sequence numbers are not dense. The
    tail keeps one iterator per shard (GetShardIterator is rationed at 5 calls a second per shard),
    so each look is one GetRecords per shard when nothing arrived. It is a third reader of the
    stream, beside the VM's and the workers' reads, and shares their read throughput.
    """

    LIST_EVERY_S = 10.0  # how often to look for shards added by a reshard

    def __init__(self, endpoint: KinesisEndpoint, client: Any = None) -> None:
        self.endpoint = endpoint
        self._client = client
        self._counts: dict[str, int] = {}
        self._last: dict[str, str | None] = {}  # the last sequence number counted, per shard
        self._iterators: dict[str, str | None] = {}
        self._listed = float("-inf")

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.endpoint.client()
        return self._client

    def count(self) -> int:
        """The records the stream's shards hold, as far as Kinesis shows them now."""
        import time

        if time.monotonic() - self._listed >= self.LIST_EVERY_S:
            for shard in shard_ids(self.client, self.endpoint):
                self._counts.setdefault(shard, 0)
                self._last.setdefault(shard, None)
            self._listed = time.monotonic()
        for shard in self._counts:
            call("GetRecords", self.endpoint, self._catch_up, shard=shard)
        return sum(self._counts.values())

    def _catch_up(self, shard: str) -> None:
        from botocore.exceptions import ClientError

        for _ in range(1000):  # pages; a tail this far behind is caught up at the next look
            iterator = self._iterators.get(shard) or self._iterator(shard)
            try:
                page = self.client.get_records(ShardIterator=iterator, Limit=GET_LIMIT)
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
                    raise
                self._iterators[shard] = None  # iterators live five minutes: take a new one
                continue
            records = page["Records"]
            if records:
                self._counts[shard] += len(records)
                self._last[shard] = records[-1]["SequenceNumber"]
            self._iterators[shard] = page.get("NextShardIterator")
            if not records or page.get("MillisBehindLatest", 0) == 0 or not self._iterators[shard]:
                return

    def _iterator(self, shard: str) -> str:
        last = self._last[shard]
        start = (
            {"ShardIteratorType": "TRIM_HORIZON"}
            if last is None
            else {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": last}
        )
        return call(
            "GetShardIterator",
            self.endpoint,
            self.client.get_shard_iterator,
            StreamName=self.endpoint.stream,
            ShardId=shard,
            **start,
        )["ShardIterator"]


# ---------------------------------------------------------------------------------------------
# Naming records for routing

SHARD_SHIFT = 40  # a shard's records are units [k << 40, (k + 1) << 40): 10^12 records per shard
_SHARD_NUMBER = re.compile(r"^shardId-(\d+)$")


def shard_number(shard: str) -> int:
    """The shard's number: `shardId-000000000007` is 7 (how Kinesis and LocalStack name shards); any
    other name gets a stable 22-bit hash, so units stay within an int64."""
    m = _SHARD_NUMBER.match(shard)
    if m and int(m[1]) < 1 << 22:
        return int(m[1])
    return int.from_bytes(hashlib.sha256(shard.encode()).digest()[:3], "little") >> 2


def shard_units(shard: str, first: int, count: int) -> range:
    """The routing units of a shard's records with ordinals [first, first + count): one offset space
    for all shards of a stream, like the generator's events or a source's files (ADR 0050)."""
    base = shard_number(shard) << SHARD_SHIFT
    return range(base + first, base + first + count)


def shard_of_unit(unit: int) -> int:
    """The shard number a routing unit belongs to (0 for the generator's and the file source's)."""
    return unit >> SHARD_SHIFT


# ---------------------------------------------------------------------------------------------
# Choosing a micro-batch's end


def event_time_us(data: bytes, column: str) -> int | None:
    """A record's event time in epoch microseconds, or None if it has none that parses (such a record
    becomes a dead letter when read; it does not hold the other shards back)."""
    try:
        value = json.loads(data).get(column)
    except (ValueError, AttributeError):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return None if parsed.tzinfo is None else (parsed - _EPOCH) // _ONE_US
    return None


@dataclass(frozen=True)
class Seen:
    """One record met while looking ahead in a shard: its sequence number, event time, end marker."""

    seq: str
    time_us: int | None
    end: bool = False


def scan(
    client: Any,
    endpoint: KinesisEndpoint,
    shard: str,
    after: str | None,
    limit: int,
    time_column: str,
    bounded: bool = True,
) -> list[Seen]:
    """Up to `limit` records of `shard` after `after`, as far as its end-of-stream marker; unbounded,
    a marker is a record like any other (it has no event time and becomes no row)."""
    seen = []
    for record in shard_records(client, endpoint, shard, after, limit):
        data = record["Data"]
        if is_end_marker(data):
            seen.append(Seen(record["SequenceNumber"], None, end=bounded))
            if bounded:
                break
            continue
        seen.append(Seen(record["SequenceNumber"], event_time_us(data, time_column)))
    return seen


def next_shards(shards: dict[str, dict], ahead: dict[str, Sequence[Seen]]) -> dict[str, dict]:
    """The shard positions that end a micro-batch, from where it starts (`shards`: shard ->
    {"seq", "time", "ended", "n"}) and the records seen ahead in each shard. `n` counts the shard's
    records up to and including `seq` (markers too): a record's ordinal, which names it in a routed
    read (`shard_units`), is the same for every reader of the stream.

    Why not simply everything seen: Spark's watermark is the largest event time of a batch, and a
    record read later with an earlier time is late and dropped. Records come in event-time order
    within a shard (the producer writes so), not across shards: so every shard is cut before the
    first record at or after `horizon`, the smallest of the shards' latest event times (an ended
    shard holds nothing back). Every record left for later is then at or after every time read now.
    """
    state = {s: dict(v) for s, v in shards.items()}
    for s in ahead:
        state.setdefault(s, start_position())
    latest: list[int | None] = []
    for s, v in state.items():
        if v["ended"]:
            continue
        seen = ahead.get(s, ())
        if any(r.end for r in seen):
            continue
        times = [r.time_us for r in seen if r.time_us is not None]
        latest.append(times[-1] if times else v["time"])
    # A shard that has shown no event time yet holds everything back: nothing is known to be safe.
    horizon = None if not latest or any(t is None for t in latest) else min(latest)
    everything = not latest  # every shard ends within what was seen
    for s, v in state.items():
        for r in ahead.get(s, ()):
            if not everything and (horizon is None or (r.time_us is not None and r.time_us >= horizon)):
                break
            if r.end:
                if not everything:
                    break
                v.update(seq=r.seq, ended=True, n=v.get("n", 0) + 1)
                break
            v.update(seq=r.seq, n=v.get("n", 0) + 1)
            if r.time_us is not None:
                v["time"] = r.time_us
    return state


# ---------------------------------------------------------------------------------------------
# Writing


def ensure_stream(client: Any, endpoint: KinesisEndpoint, shards: int, wait_s: float = 60.0) -> int:
    """Create the stream with `shards` shards unless it exists; wait until it is active; return its
    shard count."""
    import time

    from botocore.exceptions import ClientError

    if shards < 1:
        raise ConfigError(f"a stream needs at least one shard, got {shards}", hint="pass --shards 1 or more")
    try:
        call(
            "DescribeStreamSummary",
            endpoint,
            client.describe_stream_summary,
            StreamName=endpoint.stream,
        )
    except KinesisError as err:
        if "no Kinesis stream" not in str(err):
            raise
        try:
            client.create_stream(StreamName=endpoint.stream, ShardCount=shards)
        except ClientError as create_err:  # a concurrent creator won the race: fine
            if create_err.response.get("Error", {}).get("Code") != "ResourceInUseException":
                raise KinesisError(f"Kinesis CreateStream failed: {create_err}") from None
    deadline = time.monotonic() + wait_s
    while True:
        summary = call(
            "DescribeStreamSummary", endpoint, client.describe_stream_summary, StreamName=endpoint.stream
        )["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE":
            return int(summary["OpenShardCount"])
        if time.monotonic() > deadline:
            raise KinesisError(f"stream {endpoint.stream!r} did not become active within {wait_s:.0f} s")
        time.sleep(0.1)


def put_records(client: Any, endpoint: KinesisEndpoint, records: Sequence[tuple[str, bytes]]) -> None:
    """Put (partition key, data) records, PUT_LIMIT per call, in order; failed ones are put again at
    once (a throttled record may then follow later ones of its shard: a live stream's records are
    ordered per shard only as far as Kinesis accepts them)."""
    import time

    for i in range(0, len(records), PUT_LIMIT):
        pending = [{"PartitionKey": k, "Data": d} for k, d in records[i : i + PUT_LIMIT]]
        for attempt in range(8):
            answer = call(
                "PutRecords", endpoint, client.put_records, StreamName=endpoint.stream, Records=pending
            )
            if not answer.get("FailedRecordCount"):
                break
            pending = [p for p, r in zip(pending, answer["Records"], strict=True) if "ErrorCode" in r]
            time.sleep(0.05 * 2**attempt)
        else:
            raise KinesisError(f"Kinesis kept refusing {len(pending)} records (throttled?)")


def put_end_markers(client: Any, endpoint: KinesisEndpoint) -> None:
    """Put END_OF_STREAM into every open shard (aimed by each shard's first hash key)."""
    shards = call("ListShards", endpoint, client.list_shards, StreamName=endpoint.stream)["Shards"]
    for shard in shards:
        if shard.get("SequenceNumberRange", {}).get("EndingSequenceNumber"):
            continue  # closed by a reshard
        call(
            "PutRecord",
            endpoint,
            client.put_record,
            StreamName=endpoint.stream,
            Data=END_OF_STREAM_BYTES,
            PartitionKey="end-of-stream",
            ExplicitHashKey=shard["HashKeyRange"]["StartingHashKey"],
        )
