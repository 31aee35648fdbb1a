"""Event-rate schedules: when event n happens, as seconds after the first event.

Sponge's experiments drive the stream with bursts ("10k/s, then 20k/s for 10 s, then 10k/s"), so the
event time of event n cannot simply be n / R. A schedule is a list of segments whose rate changes
linearly from `rate_start` to `rate_end`; after the last one its end rate holds forever. The event
count N(t) is the integral of the rate, and event n happens at N^-1(n), so event 0 is at t = 0.
Both directions are closed-form (a quadratic per ramp), which keeps every timestamp a pure function
of n: any range of events can be timed on its own.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from core.errors import ConfigError

_HINT = (
    'write a constant rate like "10000", or comma-separated "seconds:rate" segments such as '
    '"30:10000,10:20000,30:10000"; "20:10000-50000" ramps the rate linearly within a segment'
)


@dataclass(frozen=True)
class Segment:
    """`duration_s` seconds in which the rate moves linearly from `rate_start` to `rate_end` (events/s)."""

    duration_s: float
    rate_start: float
    rate_end: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.duration_s) or self.duration_s < 0:
            raise ConfigError(
                f"segment duration must be a finite number of seconds >= 0, got {self.duration_s}", hint=_HINT
            )
        for rate in (self.rate_start, self.rate_end):
            if not math.isfinite(rate) or rate <= 0:
                raise ConfigError(f"event rates must be positive and finite, got {rate}", hint=_HINT)

    @property
    def events(self) -> float:
        """Events (fractional) that fall into this segment: the area under the linear rate."""
        return 0.5 * (self.rate_start + self.rate_end) * self.duration_s


@dataclass(frozen=True)
class RateSchedule:
    """A piecewise-linear event rate; the last segment's end rate continues forever."""

    segments: tuple[Segment, ...]
    # Per-piece tables, the last entry being the endless tail; derived, so excluded from eq/hash/repr.
    _t0: np.ndarray = field(init=False, repr=False, compare=False)
    _c0: np.ndarray = field(init=False, repr=False, compare=False)
    _c1: np.ndarray = field(init=False, repr=False, compare=False)
    _r0: np.ndarray = field(init=False, repr=False, compare=False)
    _accel: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        segments = tuple(self.segments)
        if not segments:
            raise ConfigError("a rate schedule needs at least one segment", hint=_HINT)
        object.__setattr__(self, "segments", segments)
        t0, c0, c1, r0, accel = [], [], [], [], []
        time, count = 0.0, 0.0
        for seg in segments:
            t0.append(time)
            c0.append(count)
            r0.append(seg.rate_start)
            accel.append((seg.rate_end - seg.rate_start) / seg.duration_s if seg.duration_s > 0 else 0.0)
            time += seg.duration_s
            count += seg.events
            c1.append(count)
        t0.append(time)
        c0.append(count)
        c1.append(math.inf)
        r0.append(segments[-1].rate_end)
        accel.append(0.0)
        for name, values in (("_t0", t0), ("_c0", c0), ("_c1", c1), ("_r0", r0), ("_accel", accel)):
            object.__setattr__(self, name, np.asarray(values, dtype=np.float64))

    @classmethod
    def constant(cls, rate: float) -> RateSchedule:
        """A fixed rate of `rate` events/s from the first event on."""
        return cls((Segment(0.0, float(rate), float(rate)),))

    @classmethod
    def parse(cls, text: str) -> RateSchedule:
        """Parse "10000", "30:10000,10:20000,30:10000" or "20:10000-50000" (see the module docstring)."""
        source = str(text).strip()
        if not source:
            raise ConfigError("empty rate schedule", hint=_HINT)
        if ":" not in source and "," not in source:
            return cls.constant(_number(source, "rate"))
        segments = []
        for piece in source.split(","):
            duration_text, sep, rates_text = piece.partition(":")
            if not sep:
                raise ConfigError(
                    f"rate schedule segment {piece.strip()!r} has no 'seconds:' prefix", hint=_HINT
                )
            rates = re.split(r"(?<![eE])-", rates_text.strip())
            if len(rates) > 2:
                raise ConfigError(
                    f"rate schedule segment {piece.strip()!r} has more than two rates", hint=_HINT
                )
            duration = _number(duration_text, "duration")
            if duration <= 0:
                raise ConfigError(f"segment duration must be positive, got {piece.strip()!r}", hint=_HINT)
            start = _number(rates[0], "rate")
            end = _number(rates[-1], "rate")
            segments.append(Segment(duration, start, end))
        return cls(tuple(segments))

    def text(self) -> str:
        """The schedule in `parse` syntax, so it can travel as a string option (e.g. to the Spark source)."""
        if len(self.segments) == 1 and self.segments[0].duration_s == 0:
            seg = self.segments[0]
            if seg.rate_start == seg.rate_end:
                return _format(seg.rate_end)
        parts = []
        for seg in self.segments:
            rates = _format(seg.rate_start)
            if seg.rate_end != seg.rate_start:
                rates += "-" + _format(seg.rate_end)
            parts.append(f"{_format(seg.duration_s)}:{rates}")
        return ",".join(parts)

    def offset_s(self, n: np.ndarray) -> np.ndarray:
        """Seconds from the first event to event `n` (vectorised): the inverse of the cumulative count.

        Within a ramp, N(t0 + tau) = c0 + r0*tau + accel*tau^2/2; solving for tau with the
        cancellation-free form 2m / (r0 + sqrt(r0^2 + 2*accel*m)) keeps it monotone and exact
        (m / r0) for constant pieces.
        """
        m = np.asarray(n, dtype=np.float64)
        piece = np.searchsorted(self._c1, m, side="right")
        dm = m - self._c0[piece]
        r0 = self._r0[piece]
        accel = self._accel[piece]
        if not self._accel.any():  # piecewise-constant rates: skip the square roots
            return self._t0[piece] + dm / r0
        disc = np.sqrt(np.maximum(r0 * r0 + 2.0 * accel * dm, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            tau = np.where(accel == 0.0, dm / r0, 2.0 * dm / (r0 + disc))
        return self._t0[piece] + tau

    def events_by(self, t_s: float) -> int:
        """Number of events whose offset_s is <= `t_s` (0 before the first event).

        The closed-form count is corrected against `offset_s` itself, so the two functions agree
        exactly even where floating point rounding would put them one event apart.
        """
        if t_s < 0:
            return 0
        # The last start time is the tail's; "right" skips zero-length pieces, which share a start.
        piece = int(np.searchsorted(self._t0, t_s, side="right")) - 1
        tau = t_s - float(self._t0[piece])
        count = (
            float(self._c0[piece])
            + float(self._r0[piece]) * tau
            + 0.5 * float(self._accel[piece]) * tau * tau
        )
        k = max(math.floor(count) + 1, 1)
        while float(self.offset_s(np.array([k]))[0]) <= t_s:
            k += 1
        while k > 0 and float(self.offset_s(np.array([k - 1]))[0]) > t_s:
            k -= 1
        return k


def _number(text: str, what: str) -> float:
    """Parse one number of a schedule, turning Python's ValueError into an actionable ConfigError."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError(f"rate schedule {what} {text.strip()!r} is not a number", hint=_HINT) from None
    if not math.isfinite(value):
        raise ConfigError(f"rate schedule {what} {text.strip()!r} is not finite", hint=_HINT)
    if what == "rate" and value <= 0:
        raise ConfigError(f"event rates must be positive, got {text.strip()!r}", hint=_HINT)
    return value


def _format(value: float) -> str:
    """Shortest text that parses back to `value`."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))
