"""An in-memory stand-in for the few Kinesis calls core/kinesis.py makes, for the unit tests of the
code that talks to Kinesis (the integration tests use LocalStack's)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError


class MemoryStream:
    """Kinesis's ListShards, GetShardIterator and GetRecords over records held in memory; `put` adds
    records to a shard, and `expire` makes every iterator handed out so far expire."""

    def __init__(self, shards: dict[str, list[bytes]]) -> None:
        self.shards: dict[str, list[tuple[str, bytes]]] = {}
        self.expired_before = 0
        self.handed_out = 0
        for shard, records in shards.items():
            self.put(shard, records)

    def put(self, shard: str, records: list[bytes]) -> None:
        held = self.shards.setdefault(shard, [])
        held.extend((str(1000 + 7 * (len(held) + i)), data) for i, data in enumerate(records))

    def expire(self) -> None:
        self.expired_before = self.handed_out

    def list_shards(self, **_: Any) -> dict:
        return {"Shards": [{"ShardId": s} for s in self.shards]}

    def get_shard_iterator(self, ShardId: str, ShardIteratorType: str, **kw: Any) -> dict:
        records = self.shards[ShardId]
        at = 0
        if ShardIteratorType == "AFTER_SEQUENCE_NUMBER":
            at = 1 + next(i for i, (seq, _) in enumerate(records) if seq == kw["StartingSequenceNumber"])
        return {"ShardIterator": self._iterator(ShardId, at)}

    def _iterator(self, shard: str, at: int) -> str:
        self.handed_out += 1
        return f"{shard}|{at}|{self.handed_out}"

    def get_records(self, ShardIterator: str, Limit: int) -> dict:
        shard, at, number = ShardIterator.split("|")
        if int(number) <= self.expired_before:
            raise ClientError({"Error": {"Code": "ExpiredIteratorException"}}, "GetRecords")
        page = self.shards[shard][int(at) : int(at) + min(Limit, 3)]  # short pages, as Kinesis gives
        behind = len(self.shards[shard]) - int(at) - len(page)
        return {
            "Records": [{"SequenceNumber": seq, "Data": data} for seq, data in page],
            "NextShardIterator": self._iterator(shard, int(at) + len(page)),
            "MillisBehindLatest": 1000 if behind else 0,
        }
