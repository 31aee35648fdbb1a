"""The figures a burst drill is judged by, read from its report dict: peaks, ratios, targets, the verdict.

The input is the plain report dict (exactly what report.json holds), so the same code serves a drill
measured on this machine and the paper-scale simulator. Drills are messy: a policy may never react, a
second may see no committed event, a run may lack a series altogether. Everything here therefore
tolerates missing keys, ``None`` and NaN, and says "never" or "n/a" rather than failing or printing
"nan". Pure functions of the dict, with no rich or matplotlib, so the table, report.md and the plots
(core/drill/report_tables.py, core/drill/report_plots.py) all state the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# What the figures are, printed beside them; the simulator passes "simulated" instead.
DEFAULT_LABEL = "measured on this machine"
REFERENCE_POLICY = "sponge"

# The drill's acceptance: sponge's peak p99 at most this multiple of the other policy's. The verdict
# states whether each was met, so a reader need not redo the division.
PEAK_P99_TARGETS: Mapping[str, float] = {"noscaling": 0.3, "vmbase": 0.5, "over": 1.2}
REACTION_TARGET_S = 2.0
# Policies whose p99 before the burst differs by more than this factor did not start from the same
# place, and their peaks say as much about the start as about the burst.
UNFAIR_SPREAD = 1.25
VM_SCALING = ("vmbase", "vminit")  # their reaction_s: the burst onset to the added VM's executor usable


# ---------------------------------------------------------------------------------------------------
# Reading the report defensively


def finite(value: Any) -> float | None:
    """A finite float, or None for anything a drill may leave in its place (None, NaN, inf, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def series(run: Mapping[str, Any], key: str) -> list[float | None] | None:
    """A per-second series with every missing value as None, or None when the run lacks it."""
    values = run.get(key)
    if not isinstance(values, Sequence) or isinstance(values, str):
        return None
    return [finite(v) for v in values]


def runs_of(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The report's runs; an entry that is not an object is skipped rather than failing the report."""
    runs = report.get("runs") or []
    return [r for r in runs if isinstance(r, Mapping)]


def burst_windows(report: Mapping[str, Any]) -> list[tuple[float, float]]:
    """Burst windows as (start_s, end_s); malformed windows are skipped rather than failing the report."""
    out = []
    for w in report.get("burst") or []:
        if isinstance(w, Mapping):
            start, end = finite(w.get("start_s")), finite(w.get("end_s"))
            if start is not None and end is not None and end >= start:
                out.append((start, end))
    return out


def policy_labels(report: Mapping[str, Any]) -> list[str]:
    """One unique label per run: its policy, with "#2", "#3" appended when a policy ran more than once."""
    labels: list[str] = []
    for i, run in enumerate(runs_of(report)):
        base = str(run.get("policy") or f"run {i + 1}")
        label, n = base, 1
        while label in labels:
            n += 1
            label = f"{base} #{n}"
        labels.append(label)
    return labels


def peak_p99(run: Mapping[str, Any]) -> float | None:
    """The run's peak p99; falls back to the maximum of its per-second p99 when the field is missing."""
    peak = finite(run.get("peak_p99_ms"))
    if peak is None:
        values = [v for v in series(run, "p99_ms_by_second") or [] if v is not None]
        peak = max(values) if values else None
    return peak


def peak_vs_pre_burst(run: Mapping[str, Any]) -> float | None:
    """The run's peak p99 over its own pre-burst p99: what the burst did to it, whatever its start."""
    return ratio_of(peak_p99(run), finite(run.get("pre_burst_p99_ms")))


def vm_cores(run: Mapping[str, Any]) -> int | None:
    """The VM cores a run held before the burst (its deployment), None when the report does not say."""
    deployment = run.get("deployment")
    cores = deployment.get("vm_cores") if isinstance(deployment, Mapping) else None
    return cores if isinstance(cores, int) and not isinstance(cores, bool) else None


@dataclass(frozen=True)
class PreBurst:
    """Where the policies stood before the burst (ADR 0048).

    `spread` is highest over lowest pre-burst p99 among the runs with the fewest VM cores (all runs
    when the report gives no deployment): those are meant to start alike. A run with more VM cores
    (over) is expected to start lower; it is unfair only when it starts more than UNFAIR_SPREAD above
    the slowest of them, since only a slow start could flatter sponge's ratio to it. A baseline that
    lacks Sponge's operators (sfbase, core/ablations.py) runs another plan by design, so its start is
    reported beside the spread (`apart`), not in it.
    """

    base_cores: int | None  # the fewest VM cores a run held; None when the report does not say
    spread: float | None
    low_ms: float
    high_ms: float
    extra: tuple[tuple[int, int, float], ...]  # (index of the run, its VM cores, its pre-burst p99)
    slow_extra: tuple[int, ...]  # indices of extra-core runs that started too slow
    apart: tuple[tuple[int, str, float], ...] = ()  # (index, what its plan lacks, its pre-burst p99)

    @property
    def fair(self) -> bool:
        return (self.spread is None or self.spread <= UNFAIR_SPREAD) and not self.slow_extra


def pre_burst(report: Mapping[str, Any]) -> PreBurst | None:
    """The pre-burst comparison, or None when fewer than two runs have a pre-burst p99."""
    started = [
        (i, r, v)
        for i, r in enumerate(runs_of(report))
        if (v := finite(r.get("pre_burst_p99_ms"))) is not None and v > 0
    ]
    apart = tuple((i, lacks, v) for i, r, v in started if (lacks := _lacks(r)))
    known = [(i, vm_cores(r), v) for i, r, v in started if not _lacks(r)]
    if len(known) < 2:
        return None
    given = [c for _, c, _ in known if c is not None]
    base = min(given) if len(given) == len(known) else None
    alike = [v for _, c, v in known if base is None or c == base]
    extra = tuple((i, c, v) for i, c, v in known if base is not None and c is not None and c > base)
    high = max(alike)
    return PreBurst(
        base_cores=base,
        spread=high / min(alike) if len(alike) >= 2 else None,
        low_ms=min(alike),
        high_ms=high,
        extra=extra,
        slow_extra=tuple(i for i, _, v in extra if v > UNFAIR_SPREAD * high),
        apart=apart,
    )


def _lacks(run: Mapping[str, Any]) -> str | None:
    """The operators a baseline's run lacks (its deployment says), None for any other run."""
    deployment = run.get("deployment")
    lacks = deployment.get("lacks") if isinstance(deployment, Mapping) else None
    return lacks if isinstance(lacks, str) and lacks else None


def cost_vs_over(report: Mapping[str, Any], run: Mapping[str, Any]) -> float | None:
    """A run's cost as a ratio to the over-provisioned policy's (the cost of never being short)."""
    over = next((r for r in runs_of(report) if r.get("policy") == "over"), None)
    return None if over is None else ratio_of(finite(run.get("cost_usd")), finite(over.get("cost_usd")))


def deployment_text(run: Mapping[str, Any]) -> str:
    """Where a run's VM side ran, in a few words: "standalone, 1 VM core (+ a VM at the burst)"."""
    d = run.get("deployment")
    if not isinstance(d, Mapping):
        return "n/a"
    cores = d.get("vm_cores")
    text = f"{d.get('spark', '?')}, {cores} VM core{'s' if cores != 1 else ''}"
    if d.get("lambda_workers"):
        text += f" + up to {d['lambda_workers']} Lambda workers"
    if run.get("provisioned_environments"):
        text += f", {run['provisioned_environments']} kept warm by provisioned concurrency (billed)"
    if run.get("stream_shards"):
        text += f", reading a Kinesis stream of {run['stream_shards']} shards (shard-hours billed)"
    if d.get("adds"):
        text += f" (+ {d['adds']})"
    if lacks := _lacks(run):
        text += f", without {lacks}"
    return text


def mean_p99_during_burst(run: Mapping[str, Any], bursts: Sequence[tuple[float, float]]) -> float | None:
    """The run's mean p99 during bursts; computed from the per-second p99 when the field is missing.

    Second i covers [i, i + 1) and counts as in a burst when it overlaps a window.
    """
    mean = finite(run.get("mean_p99_ms_during_burst"))
    if mean is not None or not bursts:
        return mean
    values = [
        v
        for i, v in enumerate(series(run, "p99_ms_by_second") or [])
        if v is not None and any(i < end and i + 1 > start for start, end in bursts)
    ]
    return sum(values) / len(values) if values else None


def reference_index(report: Mapping[str, Any]) -> int | None:
    """Which run the others are compared against: sponge when it ran, else the first run."""
    runs = runs_of(report)
    for i, run in enumerate(runs):
        if run.get("policy") == REFERENCE_POLICY:
            return i
    return 0 if runs else None


def ratio_of(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is unknown or b is not positive (a zero peak gives no ratio)."""
    return a / b if a is not None and b is not None and b > 0 else None


def peak_ratios(report: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """Peak p99 of every run divided by every other run's: ``ratios[a][b] = peak(a) / peak(b)``.

    Keys are the labels of ``policy_labels``; a ratio is None when either peak is unknown or zero.
    """
    labels = policy_labels(report)
    peaks = [peak_p99(r) for r in runs_of(report)]
    return {
        a: {b: ratio_of(pa, pb) for b, pb in zip(labels, peaks, strict=True) if b != a}
        for a, pa in zip(labels, peaks, strict=True)
    }


# ---------------------------------------------------------------------------------------------------
# Formatting numbers for humans


def fmt_ms(value: float | None) -> str:
    """Milliseconds: one decimal below 10 ms, whole numbers with thousands separators above."""
    if value is None:
        return "n/a"
    return f"{value:.1f}" if abs(value) < 10 else f"{value:,.0f}"


def fmt_ratio(value: float | None) -> str:
    """A ratio with two significant decimals where it matters (0.21x, 4.76x, 12.3x, 150x)."""
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:.0f}x"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def fmt_seconds(value: float | None, *, burst: bool = True) -> str:
    """Seconds with one decimal; "never" when the event did not happen although there was a burst."""
    if value is None:
        return "never" if burst else "—"
    return f"{value:.1f}"


def fmt_usd(value: float | None) -> str:
    """Dollars with two significant digits for sub-cent costs (a drill's Lambda bill is tiny)."""
    if value is None:
        return "n/a"
    if value == 0:
        return "$0"
    if abs(value) >= 0.01:
        return f"${value:,.2f}"
    decimals = -math.floor(math.log10(abs(value))) + 1
    return f"${value:.{decimals}f}"


HELD_SHARE = 0.5  # a run whose burst epochs were this often full at their cap was held by it


def _held_by_cap(run: Mapping[str, Any], burst: Mapping[str, Any]) -> str:
    """What held back a run that fell behind with idle cores, when it was its source's cap: the cap, and
    for a routed run how far its offloaded share raised it ("" when the cap did not hold it)."""
    at_cap = burst.get("at_cap")
    share = finite(at_cap.get("share")) if isinstance(at_cap, Mapping) else None
    if share is None or share < HELD_SHARE:
        return ""
    cap = finite(at_cap.get("cap_events")) or 0
    text = f": its source's cap held it ({share:.0%} of its epochs there were full at {cap:,.0f} events"
    deployed = run.get("deployment")
    base = finite(deployed.get("batch_events")) if isinstance(deployed, Mapping) else None
    if base and cap > base:
        text += f": its offloaded share raised it {cap / base:.1f}x"
    return text + ")"


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------------------------------------------
# The verdict


def _started_apart(run: Mapping[str, Any], other: Mapping[str, Any], label: str) -> str:
    """Why a target against a policy with more VM cores was missed, when the start says it: the run
    began further behind it than the target allows, and the burst raised it no more than it raised the
    other. What was short is then VM cores in the steady state: an epoch of fixed cost F at a core's
    load U lasts F / (1 - U), and the other policy carries the same rate at a lower load per core."""
    cores, theirs = vm_cores(run), vm_cores(other)
    start = ratio_of(finite(run.get("pre_burst_p99_ms")), finite(other.get("pre_burst_p99_ms")))
    rise, their_rise = peak_vs_pre_burst(run), peak_vs_pre_burst(other)
    if cores is None or theirs is None or theirs <= cores or start is None or rise is None:
        return ""
    if their_rise is None or rise > their_rise * 1.1:
        return ""
    extra = theirs - cores
    return (
        f": it started {fmt_ratio(start)} {label}'s p99 on {cores} VM core{'s' if cores > 1 else ''} against "
        f"{theirs}, and the burst raised it {fmt_ratio(rise)} against {label}'s {fmt_ratio(their_rise)}: the "
        f"gap is {label}'s extra VM core{'s' if extra > 1 else ''} before the burst, not the burst"
    )


def verdict(report: Mapping[str, Any]) -> str:
    """One paragraph that states, from the numbers alone, how the reference policy fared against the rest.

    Example: "sponge's peak p99 was 850 ms: 0.21x noscaling's (target ≤ 0.3x: met) and 0.44x vmbase's
    (target ≤ 0.5x: met); it first offloaded 1.2 s after the onset; ...; all outputs matched the batch
    reference."
    """
    runs, labels, bursts = runs_of(report), policy_labels(report), burst_windows(report)
    ref = reference_index(report)
    if ref is None:
        return "No runs were recorded."
    run, name = runs[ref], labels[ref]
    peak = peak_p99(run)
    is_sponge = run.get("policy") == REFERENCE_POLICY

    comparisons = []
    for i, other in enumerate(runs):
        if i == ref:
            continue
        text = f"{fmt_ratio(ratio_of(peak, peak_p99(other)))} {labels[i]}'s"
        target = PEAK_P99_TARGETS.get(str(other.get("policy"))) if is_sponge else None
        ratio = ratio_of(peak, peak_p99(other))
        if target is not None and ratio is not None:
            text += f" (target ≤ {target:g}x: {'met' if ratio <= target else 'missed'}"
            text += (_started_apart(run, other, labels[i]) if ratio > target else "") + ")"
        comparisons.append(text)
    head = f"{name}'s peak p99 was {fmt_ms(peak)} ms"
    if comparisons:
        head += ": " + _join(comparisons)
    mean = mean_p99_during_burst(run, bursts)
    if mean is not None:
        head += f"; its mean p99 during the burst{'s' if len(bursts) > 1 else ''} was {fmt_ms(mean)} ms"
    clauses = [head]

    if bursts:
        reaction = finite(run.get("reaction_s"))
        if run.get("policy") in VM_SCALING:  # their reaction is a VM's executor becoming usable
            clauses.append(
                "no VM it added became usable after the onset"
                if reaction is None
                else f"the VM it added was usable {reaction:.1f} s after the onset"
            )
        elif reaction is None:
            clauses.append("it never offloaded a record")
        else:
            text = f"it first offloaded {reaction:.1f} s after the onset"
            if is_sponge:
                met = "met" if reaction <= REACTION_TARGET_S else "missed"
                text += f" (target ≤ {REACTION_TARGET_S:g} s: {met})"
            clauses.append(text)
        recovery = finite(run.get("recovery_s"))
        clauses.append(
            "its p99 did not fall back under 1.5x the pre-burst level before the trace ended"
            if recovery is None
            else f"its p99 was back under 1.5x the pre-burst level {recovery:.1f} s after the burst ended"
        )
    worker_s, cost = finite(run.get("lambda_worker_seconds")), finite(run.get("cost_usd"))
    if worker_s:
        clauses.append(f"it used {worker_s:,.1f} Lambda worker-seconds ({fmt_usd(cost)})")
    handed = run.get("handover")
    if isinstance(handed, Mapping):
        clauses.append(handover_clause(handed))
    vs_over = cost_vs_over(report, run)
    if vs_over is not None and run.get("policy") != "over":
        clauses.append(f"it cost {fmt_ratio(vs_over)} what over cost")

    clauses.extend(_fairness_clauses(report, labels))

    matches = [r.get("results_match_reference") for r in runs]
    failed = [labels[i] for i, m in enumerate(matches) if m is False]
    unchecked = [labels[i] for i, m in enumerate(matches) if m is not True and m is not False]
    if failed:
        clauses.append(f"the outputs of {_join(failed)} did NOT match the batch reference")
    elif not unchecked:
        clauses.append(
            "all outputs matched the batch reference"
            if len(runs) > 1
            else "its output matched the batch reference"
        )
    if unchecked:
        clauses.append(
            f"{_join(unchecked)} {'was' if len(unchecked) == 1 else 'were'} not checked "
            "against the batch reference"
        )
    return "; ".join(clauses) + "."


def handover_clause(h: Mapping[str, Any]) -> str:
    """Sponge's hand-over of a persistent burst, in one clause: "the burst persisted: it bought 1 VM at
    62.0 s (usable at 95.3 s) and released 4 idle workers at 98.0 s; the VM and its workers cost $0.012
    against $0.020 staying on workers (saved $0.0078)".
    """
    usable, asked = finite(h.get("usable_s")), fmt_seconds(finite(h.get("requested_s")))
    ready = f"usable at {fmt_seconds(usable)} s" if usable is not None else "never usable in the trace"
    text = f"the burst persisted: it bought {h.get('vms_bought', 0)} VM at {asked} s ({ready})"
    released_at = finite(h.get("workers_released_s"))
    text += (
        f" and released {h.get('workers_released', 0)} idle workers at {fmt_seconds(released_at)} s"
        if released_at is not None
        else ", and its workers were never released"
    )
    spent = (finite(h.get("vm_usd")) or 0.0) + (finite(h.get("lambda_usd")) or 0.0)
    staying = finite(h.get("staying_on_workers_usd"))
    saved = finite(h.get("saved_usd")) or 0.0
    return (
        text
        + f"; the VM and its workers cost {fmt_usd(spent)} against {fmt_usd(staying)} staying on workers "
        f"({'saved' if saved >= 0 else 'lost'} {fmt_usd(abs(saved))})"
    )


def _pre_burst_clause(start: PreBurst, labels: Sequence[str]) -> str:
    allowed = f"{UNFAIR_SPREAD - 1:.0%}"
    who = f"the {start.base_cores}-core policies'" if start.extra else "the policies'"
    if start.spread is None:
        text = f"before the burst {who} p99 was {fmt_ms(start.low_ms)} ms"
    else:
        judged = (
            f"within {allowed} of each other: fair"
            if start.spread <= UNFAIR_SPREAD
            else f"UNFAIR: {start.spread:.2f}x apart, over the {allowed} allowed"
        )
        text = (
            f"before the burst {who} p99 lay between {fmt_ms(start.low_ms)} and {fmt_ms(start.high_ms)} ms "
            f"({judged})"
        )
    for i, cores, value in start.extra:
        text += f"; {labels[i]}'s was {fmt_ms(value)} ms on {cores} VM cores " + (
            f"(UNFAIR: over {allowed} above theirs)"
            if i in start.slow_extra
            else "(its extra cores' doing: a lower start only makes a ratio to it stricter)"
        )
    for i, lacks, value in start.apart:
        text += f"; {labels[i]}'s was {fmt_ms(value)} ms (without {lacks}: another plan by design)"
    return text


def _fairness_clauses(report: Mapping[str, Any], labels: Sequence[str]) -> list[str]:
    """What a skeptic checks first: equal starting points, capacity used, no offloading before the burst."""
    runs, clauses = runs_of(report), []
    start = pre_burst(report)
    if start is not None:
        clauses.append(_pre_burst_clause(start, labels))
    bursts = burst_windows(report)
    unsettled = [
        label
        for run, label in zip(runs, labels, strict=True)
        if bursts and "steady_s" in run and not (finite(run.get("steady_s")) or math.inf) < bursts[0][0]
    ]
    if unsettled:
        clauses.append(
            f"{_join(unsettled)} did not reach a steady state before the onset (pass a longer --lead)"
        )
    for run, label in zip(runs, labels, strict=True):
        burst = run.get("in_burst")
        if isinstance(burst, Mapping) and burst.get("behind_with_idle_cores"):
            cpu = finite(burst.get("vm_cpu"))
            busy = f"{cpu:.0%}" if cpu is not None else "not"
            held = _held_by_cap(run, burst)
            clauses.append(f"{label} fell behind in the burst with its VM cores only {busy} busy{held}")
        early = run.get("before_onset")
        if isinstance(early, Mapping) and (finite(early.get("max_share")) or 0) > 0:
            clauses.append(
                f"{label} offloaded before the onset (share up to {finite(early.get('max_share')):.0%}, "
                f"{finite(early.get('worker_seconds')) or 0:,.1f} worker-seconds)"
            )
    return clauses
