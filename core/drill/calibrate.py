"""The drill's stable rate and the policy's start-up profile, from the epochs of a probe run.

Why epochs and not CPU: a micro-batch engine pays a fixed cost F per epoch (planning, the Python
source's tasks, state-store commits, checkpoint and sink writes) and then c seconds per event, so an
epoch of n events lasts T = F + c n. With triggers back to back the fixed cost fills whatever time the
records leave, and the CPU of the Spark processes reads busy at a quarter of the VM's real capacity
(measured here: Q5 read 70 % CPU at 15,000 events/s on one core while an epoch spent 30 % of its
time on records). The quantity that behaves like the paper's CPU load on a record-at-a-time engine is
the utilisation U = c r: the share of each epoch spent on records at input rate r. Epochs then last
F / (1 - U), and at U >= 1 the backlog grows without bound, as a saturated CPU does. So the stable
rate is the one at U = 0.7 (the paper's 70 % target), the VM's per-core rate of Eq. 2 is 1 / c, and
a burst of k x the stable rate overloads the VM exactly when 0.7 k > 1.

The same fit over a probe that offloads a fixed share gives what an offloaded event still costs the
VM (its generation, routing and the merge of its partials), in units of a kept event: the policy's
`offload_cost`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import SpongeError
from core.latency import Epoch
from core.offload_plan import DEFAULT_OFFLOAD_COST, OFFLOAD_COST_FLOOR

TARGET_UTILISATION = 0.7
# A probe query's own first epoch pays for its planning. Its code is compiled by the warm-up before it
# in the same application (ADR 0059), so the second is a full epoch like the rest: 1.21 s against
# 1.13-1.25 s after it, where the first took 3.58 s (routed Q5, 2026-11-30).
TRACE_SKIP_EPOCHS = 1
# The last epochs of a run read the source's end (a few end markers): they skip most of an epoch's work,
# and at 0.6-0.8 s against 1.0 s they read as a smaller fixed cost (seen: they lowered F and so raised
# the per-event cost, c = 1.93 us where the full epochs gave ~1.2 us, and the offload cost with it).
MIN_EPOCH_EVENTS = 100


class UnfittedProbe(SpongeError):
    """A probe whose epochs were too few, or all of one size, to fit T = F + c n."""


@dataclass(frozen=True)
class EpochCost:
    """T = fixed_s + per_event_s x events, fitted over `epochs` epochs of a probe."""

    fixed_s: float
    per_event_s: float
    epochs: int

    def capacity(self, batch_cap: int) -> float:
        """Events/s the VM sustains: every epoch spent on records (U = 1), or full epochs of the
        source's `batch_cap` offsets back to back, whichever is lower. When the fixed cost dominates
        (Q5 here: ~1.5 s per epoch, well under a microsecond per event) the cap is the limit."""
        by_records = 1.0 / self.per_event_s if self.per_event_s > 0 else float("inf")
        return min(by_records, batch_cap / (self.fixed_s + self.per_event_s * batch_cap))

    def stable_rate(self, batch_cap: int, utilisation: float = TARGET_UTILISATION) -> float:
        return utilisation * self.capacity(batch_cap)

    def to_json(self) -> dict[str, float]:
        return {"fixed_s": self.fixed_s, "per_event_s": self.per_event_s, "epochs": self.epochs}


def fit_probe(warmup: Sequence[Epoch], trace: Sequence[Epoch]) -> EpochCost:
    """A probe's line through the medians of its two ends: the warm-up's small epochs, about F each
    (their later half), and the trace's full ones (after its first, which plans the new query).

    Why medians and not a line through every epoch (Theil-Sen until ADR 0060): the records add 0.2-0.3 s
    to an epoch of ~1 s that jitters by +-0.15 s, and pairs of full epochs of slightly different sizes
    (320,000 and 240,000 events) gave slopes of 0.3-2.3 us an event. The offload cost, a ratio of two
    such slopes, then read 0.53 and 0.81 on drills whose medians give the floor of 0.1, and sponge,
    sized on it, admitted too little in the burst.
    """
    ordered = sorted(trace, key=lambda e: e.started_t)
    small = [_point(e) for e in later_half(warmup) if e.covered - e.start >= MIN_EPOCH_EVENTS]
    full = [_point(e) for e in ordered[TRACE_SKIP_EPOCHS:] if e.covered - e.start >= MIN_EPOCH_EVENTS]
    if len(small) < 2 or len(full) < 2:
        raise UnfittedProbe(
            f"the probe produced {len(small)} small and {len(full)} full epochs, too few to fit the VM's "
            "epoch cost",
            hint="run the drill with --rate to set the stable rate by hand",
        )
    (n_small, t_small), (n_full, t_full) = np.median(small, axis=0), np.median(full, axis=0)
    per_event = (t_full - t_small) / (n_full - n_small) if n_full > n_small else 0.0
    epochs = len(small) + len(full)
    if per_event <= 0:
        # Measured here: plain Q5 epochs of 20,000 and of 200,000 events both took 1.4-2.2 s, so the
        # records' cost drowned in the fixed cost's jitter. The epochs are F alone, and the source's cap
        # sets the capacity.
        return EpochCost(
            fixed_s=float(np.median([t for _, t in small + full])), per_event_s=0.0, epochs=epochs
        )
    fixed = max(float(t_small - per_event * n_small), 0.0)
    return EpochCost(fixed_s=fixed, per_event_s=float(per_event), epochs=epochs)


def _point(e: Epoch) -> tuple[int, float]:
    return e.covered - e.start, e.commit_t - e.started_t


def later_half(epochs: Sequence[Epoch]) -> list[Epoch]:
    """A warm-up's epochs without its first half, which pays for planning and code generation."""
    ordered = sorted(epochs, key=lambda e: e.started_t)
    return ordered[len(ordered) // 2 :]


def fixed_from_small_epochs(epochs: Sequence[Epoch]) -> float | None:
    """The fixed epoch cost F from epochs too small for their records to count (a run's warm-up): the
    median duration of their later half, the first ones paying for planning and code generation.

    Why: without a probe (`--rate` given) the monitor would read the VM's load as its CPU, which a
    micro-batch engine keeps busy at any rate, so the policy fired on a steady run (seen: CPU 0.84 at
    the stable rate, offloading before the burst). With F the load is the epoch utilisation again.
    """
    later = [e.commit_t - e.started_t for e in later_half(epochs)]
    return float(np.median(later)) if later else None


def offload_cost(plain: EpochCost, routed: EpochCost, share: float) -> float:
    """What an offloaded event still costs the VM, in kept events, from a probe offloading `share`.

    Per event the routed probe costs (1 - share) c + share k c, so k = (c_routed / c - (1 - share)) /
    share. It is floored at 0.1 (a noisy probe must not make offloading look free) but not capped:
    k >= 1 says offloading this query adds no VM capacity (Q1 and Q8 here: only a stateless prefix is
    offloaded and its output rows come back through the VM), and the policy then does not offload.
    When the plain probe could not resolve a per-event cost there is nothing to compare with, and
    the default stands.
    """
    if not 0 < share <= 1:
        raise SpongeError(f"the offload probe's share must be in (0, 1], got {share}")
    if plain.per_event_s <= 0:
        return DEFAULT_OFFLOAD_COST
    k = (routed.per_event_s / plain.per_event_s - (1.0 - share)) / share
    return float(min(max(k, OFFLOAD_COST_FLOOR), MAX_OFFLOAD_COST))


MAX_OFFLOAD_COST = 10.0  # beyond it the number only says "much worse"
# A reading of k at or above this says offloading adds no VM capacity. Q5's probes read 0.10 four times and
# 1.11 and 1.22 twice in six pairs (bench.probe_spread, ADR 0061), while Q3 and Q8, whose offloading gives the
# VM nothing, read 2.06-6.69: a reading below this lies within the probe's scatter of paying.
NO_GAIN_READING = 1.5
SCATTER_COST = 0.9  # what the policy takes a reading in the scatter band for: paying, barely (docs/adr/0062)
# The probe's full epochs: 3 s at 400,000/s release 1.2 M events faster than one VM core admits them
# (its cap over an epoch's fixed cost), so every epoch after the first is full. The line's other end
# is the warm-up's small epochs (fit_probe). A first step of small paced epochs did that until the drill's
# runs shared one application (ADR 0059), and cost 14 s of every probe; a slow machine's routed probe
# once spent an 8-s first step in its first two epochs and left the fit no small epoch (ADR 0058).
PROBE_SCHEDULE = "3:400000"
# The routed probe offloads this share. At 0.8 the workers' one core, not the VM, set the routed epochs'
# length: 400,000 offloaded events an epoch took 2.6 s on the workers while the VM needed ~1.7 s, which
# read as an offload cost of 0.88 where the drill's routed epochs showed ~0.15, and sponge, sized on
# 0.88, admitted too little in the burst (ADR 0058). At half, the VM's share is the longer one.
PROBE_SHARE = 0.5
# In the cache key: bump when the probes change (2: routed warm-up; 3: C1 JIT, fused Q5; 4: the ramp
# rises until it passes the capacity, and the offload cost is no longer capped at 0.9; 5: one shuffle
# partition per VM core; 6: Q5's fused operator folds its own panes; 7: a source task holds ~100,000
# of its entity's records, not 100,000 offsets; 8: every run on the standalone cluster, two partitions;
# 9: the workers' stream of a generated source has no watermark and no task while idle; 10: two steps,
# small epochs then full ones, instead of a ramp; 11: progress crosses py4j as JSON, and the warm-up
# starts a Python worker per task slot, both cheaper epochs; 12: a source task holds 200,000 records;
# 13: the routed probe offloads half, a longer first step, and the JVMs map class archives; 14: one
# application for every run, the warm-up's epochs as the small ones; 15: no end-of-source epochs, the
# probe query's first epoch skipped only; 16: the line through the medians of the small and full epochs).
PROBE_VERSION = 16


@dataclass(frozen=True)
class Calibration:
    """What a drill derives from its probes: the stable rate and the policy's offload cost."""

    rate: float
    offload_cost: float
    plain: EpochCost | None = None
    routed: EpochCost | None = None

    @property
    def per_core_rate(self) -> float:
        """Eq. 2's per-core rate at 100 %: the stable rate is the 70 % point."""
        return self.rate / TARGET_UTILISATION

    @property
    def offload_pays(self) -> bool:
        """Whether the reading says offloading adds VM capacity, given the probe's scatter."""
        return self.offload_cost < NO_GAIN_READING

    @property
    def policy_cost(self) -> float:
        """The offload cost the policy sizes its share on: the reading, or SCATTER_COST for a paying reading
        above it (up to NO_GAIN_READING, the probe's scatter), so the policy offloads the most."""
        return min(self.offload_cost, SCATTER_COST) if self.offload_pays else self.offload_cost

    def fixed_s(self, routed: bool = False) -> float | None:
        """The fixed epoch cost F of the plan a run executes (the routed plan reads two streams)."""
        cost = self.routed if routed and self.routed is not None else self.plain
        return cost.fixed_s if cost is not None else None

    def describe(self) -> str:
        parts = [f"stable rate {self.rate:,.0f}/s"]
        if self.plain is not None:
            parts.append(f"epochs {self.plain.fixed_s:.2f} s + {self.plain.per_event_s * 1e6:.2f} us/event")
        parts.append(f"an offloaded event costs the VM {self.offload_cost:.2f} of a kept one")
        if self.offload_pays and self.policy_cost != self.offload_cost:
            parts.append(f"within the probe's scatter of paying, so the policy takes {self.policy_cost:.2f}")
        if not self.offload_pays:
            parts.append("offloading adds no VM capacity here, so sponge will not offload")
        return "; ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "rate": self.rate,
            "offload_cost": self.offload_cost,
            "plain": self.plain.to_json() if self.plain else None,
            "routed": self.routed.to_json() if self.routed else None,
        }

    @classmethod
    def from_json(cls, d: dict) -> Calibration:
        def cost(x: dict | None) -> EpochCost | None:
            return EpochCost(**x) if x else None

        return cls(
            float(d["rate"]),
            float(d["offload_cost"]),
            cost(d.get("plain")),
            cost(d.get("routed")),
        )
