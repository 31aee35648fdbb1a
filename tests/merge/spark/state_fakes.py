"""transformWithState's state API in memory, for unit tests of the fused operators' processors."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd


class FakeHandle:
    """transformWithState's state API for one grouping key, in memory."""

    class Map:
        def __init__(self) -> None:
            self.d: dict[tuple, tuple] = {}

        def containsKey(self, key: tuple) -> bool:  # the names are Spark's API
            return key in self.d

        def getValue(self, key: tuple) -> tuple:
            return self.d[key]

        def updateValue(self, key: tuple, value: tuple) -> None:
            self.d[key] = value

        def keys(self) -> Iterator[tuple]:
            return iter(list(self.d))

        def removeKey(self, key: tuple) -> None:
            del self.d[key]

    class Value:
        def __init__(self) -> None:
            self.v: tuple | None = None

        def exists(self) -> bool:
            return self.v is not None

        def get(self) -> tuple | None:
            return self.v

        def update(self, v: tuple) -> None:
            self.v = v

    def __init__(self) -> None:
        self.timers: set[int] = set()
        self.map = self.Map()
        self.value = self.Value()

    def getMapState(self, *_: object) -> Map:
        return self.map

    def getValueState(self, *_: object) -> Value:
        return self.value

    def registerTimer(self, ms: int) -> None:
        self.timers.add(ms)


class Timers:
    def __init__(self, watermark: int) -> None:
        self.watermark = watermark

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark

    def getExpiryTimeInMs(self) -> int:
        return self.watermark


def run_epochs(
    processor: object, handle: FakeHandle, epochs: list[tuple[int, pd.DataFrame]]
) -> list[pd.DataFrame]:
    """Run epochs as Spark would: input rows (if any), then the timers the watermark expired."""
    out: list[pd.DataFrame] = []
    for watermark, rows in epochs:
        if len(rows):
            out += list(processor.handleInputRows((0,), iter([rows]), Timers(watermark)))  # type: ignore[attr-defined]
        for t in sorted(t for t in handle.timers if t <= watermark):
            handle.timers.discard(t)
            out += list(processor.handleExpiredTimer((0,), Timers(watermark), Timers(t)))  # type: ignore[attr-defined]
    return out
