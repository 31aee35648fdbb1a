"""One batch of a bucket of key groups of a keyed operator, free of Spark: the VM's step, the seals
of the groups workers run, the state that moves between them.

Why apart from the Spark processor (merge/spark/keyed_processor.py, which only loads the state,
calls `run_batch` and saves what it returns): the same code is what bench.handoff measures and what
the unit tests drive with an in-process agent, so the figures and the tests are of the product's
own handoff. The per-group rule is merge/keyed_groups.py's `decide`; what moves when a group goes to
the workers is the `Fetch` option (ADR 0025):

- `LAZY` (the default): a seal takes from the VM's state only the keys its batch's records are of
  (the agent names them, `SealService.touched`); every other key stays and is stepped on the VM
  until a record of it goes to a worker (the lazy-fetch thesis, ch. 4);
- `PROGRESSIVE`: as `LAZY`, and each batch also moves a round of the group's other keys still on the
  VM (`SealService.round_keys`), until none is left there (Spacker's progressiveness, ADR 0034);
- `ALL_AT_ONCE`: the group's whole state goes with its first seal (ADR 0024).

Either way the workers' side holds the keys it took until a batch brings the group's records back
to the VM, which then takes the keys back (`hand_back`) before its step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import polars as pl

from merge.keyed_groups import GROUP, RECEIPT, Decision, Frames, GroupState, Where, after, decide, groups_of
from merge.keyed_step import SIDE, KeyedStep, keys_of, split, stacked, take

RECEIPT_SIDE = 2  # a receipt row's sponge_side: records of its group are stashed at the agent

Part = tuple[str, int, int, int]  # a stashed chunk: (entity, start, end, seq)


class Fetch(StrEnum):
    LAZY = "lazy"
    PROGRESSIVE = "progressive"
    ALL_AT_ONCE = "all-at-once"


ROUND_KEYS = 2_000  # a progressive round's default size (ADR 0034)
ROUND_SCAN = 64  # a progressive round looks at most this many times its size of the VM's rows


class SealService(Protocol):
    """The agent, as the VM's operator sees it (router/seal_service.py): picklable, no router import."""

    fetch: Fetch  # how this operator hands its state over
    subscales: int  # the seals a task's batch runs at once, each a run of its groups (DRRS's subscales)
    round_keys: int  # with PROGRESSIVE, the keys a batch moves beyond those its records name (Spacker)

    def touched(self, groups: list[int], parts: list[Part]) -> pl.DataFrame: ...

    def seal(
        self,
        groups: list[tuple[int, int, bool]],
        parts: list[Part],
        moved: Frames | None,
        forwarded: pl.DataFrame | None,
        watermark_ms: int,
    ) -> tuple[pl.DataFrame | None, dict[int, int | None]]:
        """Run the batch of `groups`, each (group, version, fresh), on a worker: the outputs, and
        when each group is next due."""
        ...

    def hand_back(self, group: int, version: int) -> dict[str, pl.DataFrame | None]: ...

    def owned(self) -> frozenset[int]:
        """The key groups the current plan gives the workers (for a stage fed through the VM)."""
        ...


@dataclass(frozen=True)
class Batch:
    """What a batch leaves: the VM's state, the groups' bookkeeping, the outputs and the earliest
    watermark (ms) at which something more is due, on the VM or on the workers."""

    state: Frames
    held: dict[int, GroupState]
    outs: list[pl.DataFrame]
    next_due_ms: int | None


def run_batch(
    spec: KeyedStep,
    service: SealService | None,
    fetch: Fetch,
    vm: Frames,
    held: Mapping[int, GroupState],
    new: pl.DataFrame | None,
    watermark_ms: int,
    owned: frozenset[int] = frozenset(),
) -> Batch:
    """One batch: `new` holds the VM's rows (`spec.columns`, `GROUP`) and receipts (RECEIPT_SIDE);
    `owned`, the groups the plan gives the workers of a stage fed through the VM (merge/keyed_groups.py
    `decide`). The VM's own step runs while the seals are away: their keys are apart from its."""
    local = new.filter(pl.col(SIDE) != RECEIPT_SIDE) if new is not None else None
    groups = dict(held)
    outs: list[pl.DataFrame] = []
    with ThreadPoolExecutor(service.subscales if service else 1, thread_name_prefix="seal") as pool:
        rest: Callable[[], Frames] = lambda: vm  # noqa: E731
        sealed: list[tuple[list[_Sealing], Future[_Answer]]] = []
        if service is not None:
            receipts = new.filter(pl.col(SIDE) == RECEIPT_SIDE) if new is not None else None
            local, rest, sealed = _groups_elsewhere(
                spec, service, fetch, local, receipts, vm, groups, watermark_ms, owned, pool
            )
        if local is not None and local.height:
            decided = spec.step(rest(), local.select(spec.columns), watermark_ms)
        else:
            decided = spec.expire(rest(), watermark_ms)
        for lane, answer in sealed:
            out, dues = answer.result()
            if out is not None and out.height:
                outs.append(out)
            for g, st, d, _ in lane:
                groups[g] = after(st, d, dues.get(g))
    if decided.out is not None and decided.out.height:
        outs.append(decided.out)
    dues = [g.next_due_ms for g in groups.values() if g.on_workers and g.next_due_ms is not None]
    if decided.next_due_ms is not None:
        dues.append(decided.next_due_ms)
    return Batch(decided.state, groups, outs, min(dues) if dues else None)


_Sealing = tuple[int, GroupState, Decision, pl.DataFrame | None]  # a group, its state, decision, rows
_Answer = tuple[pl.DataFrame | None, dict[int, int | None]]  # a seal's outputs, each group's next due


def _groups_elsewhere(
    spec: KeyedStep,
    service: SealService,
    fetch: Fetch,
    local: pl.DataFrame | None,
    receipts: pl.DataFrame | None,
    vm: Frames,
    held: dict[int, GroupState],
    watermark_ms: int,
    owned: frozenset[int],
    pool: ThreadPoolExecutor,
) -> tuple[pl.DataFrame | None, Callable[[], Frames], list[tuple[list[_Sealing], Future[_Answer]]]]:
    """Carry out each group's decision but the VM's own step: the rows left to the VM, its state
    (to compute when needed, while the seals run) and the seals under way. The seals of different
    groups are independent and run at once (DRRS's subscales)."""
    local_groups = set(local[GROUP].to_list()) if local is not None else set()
    refs: dict[int, list[Part]] = {}
    if receipts is not None:
        for r in receipts.select(GROUP, *RECEIPT).unique().sort(GROUP, *RECEIPT).iter_rows():
            refs.setdefault(r[0], []).append(r[1:])
    due = {g for g, st in held.items() if st.on_workers and st.next_due_ms is not None}
    sealing: list[_Sealing] = []
    for g in sorted(local_groups | set(refs) | due):
        st = held.get(g, GroupState())
        d = decide(st, g in local_groups, g in refs, watermark_ms, g in owned)
        if d.where is Where.WORKERS:
            forwarded = None
            if d.forward and local is not None:
                forwarded = local.filter(pl.col(GROUP) == g).select(spec.columns)
                local = local.filter(pl.col(GROUP) != g)
            sealing.append((g, st, d, forwarded))
        elif d.where is Where.VM and d.hand_back:
            vm = spec.joined(vm, service.hand_back(g, st.version))
            held[g] = after(st, d, None)
    if not sealing:
        return local, lambda: vm, []
    n = min(len(sealing), service.subscales)
    lanes = [sealing[i * len(sealing) // n : (i + 1) * len(sealing) // n] for i in range(n)]
    parts = [sorted({p for g, *_ in lane for p in refs.get(g, [])}) for lane in lanes]
    rows = [stacked([fw for *_, fw in lane]) for lane in lanes]
    if fetch is Fetch.ALL_AT_ONCE:
        keys = [_group_keys(vm, [g for g, _, d, _ in lane if d.move_in], spec) for lane in lanes]
    else:
        wanted = [([g for g, *_ in lane], p, r) for lane, p, r in zip(lanes, parts, rows, strict=True)]
        keys = list(pool.map(lambda a: _keys(service, spec, *a), wanted))
        if fetch is Fetch.PROGRESSIVE:
            groups = [[g for g, *_ in lane] for lane in lanes]
            keys = _with_round(spec, vm, groups, keys, service.round_keys)
    # One pass over the VM's state for the whole batch, then each lane's share of the (few) rows.
    every = [k for k in keys if k is not None]
    leaving, rest = split(spec, vm, pl.concat(every, how="vertical_relaxed") if every else None)
    sealed = []
    for lane, k, p, r in zip(lanes, keys, parts, rows, strict=True):
        moved, leaving = take(spec, leaving, k)
        some = any(f is not None and f.height for f in moved.values())
        versions = [(g, st.version, d.move_in) for g, st, d, _ in lane]
        seal = pool.submit(service.seal, versions, p, moved if some else None, r, watermark_ms)
        sealed.append((lane, seal))
    return local, rest, sealed


def _keys(
    service: SealService,
    spec: KeyedStep,
    groups: list[int],
    parts: list[Part],
    forwarded: pl.DataFrame | None,
) -> pl.DataFrame | None:
    """The keys a seal reads: its stashed records' (named by the agent) and its forwarded rows'."""
    frames = [service.touched(groups, parts)] if parts else []
    if forwarded is not None and forwarded.height:
        frames.append(forwarded.select(spec.keys))
    return pl.concat(frames, how="vertical_relaxed") if frames else None


def _with_round(
    spec: KeyedStep, vm: Frames, lanes: list[list[int]], keys: list[pl.DataFrame | None], size: int
) -> list[pl.DataFrame | None]:
    """Each lane's keys with its share of a progressive round (Spacker, §III-B): the keys the records
    name move first (Meces's order: a key is needed as its record arrives), then up to `size` more
    keys of the sealed groups still on the VM, in the state's own order, so a replayed batch moves the
    same. Looking for them reads at most ROUND_SCAN times `size` of the VM's rows: a batch's cost stays
    bounded however many keys the VM keeps for itself."""
    lane_of = {g: i for i, groups in enumerate(lanes) for g in groups}
    named = [k for k in keys if k is not None and k.height]
    taken = pl.concat(named, how="vertical_relaxed").unique() if named else None
    found: list[pl.DataFrame] = []
    budget, scan = size, size * ROUND_SCAN
    for frame in vm.values():
        if frame is None or budget <= 0 or scan <= 0:
            continue
        block = frame.head(scan).select(spec.keys).unique(maintain_order=True)
        scan -= min(frame.height, scan)
        for seen in [taken, *found]:
            if seen is not None:
                like = seen.select([pl.col(k).cast(block.schema[k]) for k in spec.keys])
                block = block.join(like, on=spec.keys, how="anti")
        block = block.with_columns(groups_of(block, spec.keys).alias(GROUP))
        block = block.filter(pl.col(GROUP).is_in(list(lane_of))).head(budget)
        found.append(block)
        budget -= block.height
    if not found:
        return keys
    extra = pl.concat(found, how="vertical_relaxed")
    lane = extra[GROUP].replace_strict(lane_of, return_dtype=pl.Int64)
    out: list[pl.DataFrame | None] = []
    for i, k in enumerate(keys):
        mine = extra.filter(lane == i).select(spec.keys)
        out.append(pl.concat([k, mine], how="vertical_relaxed") if k is not None and k.height else mine)
    return out


def _group_keys(vm: Frames, groups: list[int], spec: KeyedStep) -> pl.DataFrame | None:
    """Every key of `groups` in the VM's state: what moves all at once."""
    keys = keys_of(spec, vm)
    if keys is None or not groups:
        return None
    return keys.filter(groups_of(keys, spec.keys).is_in(groups))
