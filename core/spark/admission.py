"""How many events one epoch may admit: the source's cap, scaled with the capacity the run has now.

Why one rule: the cap (`max_events_per_batch`) bounds the VMs' work per epoch, and a policy that
adds capacity must be allowed to use it. Before this rule only an offloaded share raised the cap, so
in a burst Sponge's epochs grew while Over, with a second VM core, stayed at the one-core cap with
idle CPU and fell behind for want of admission, not of capacity. Capacity comes two ways and both
multiply the cap:

* VM cores: the run's VM cores now over the cores it started with (a VM that joins mid-run doubles a
  one-core run's cap). The driver knows its executors, the source's reader does not, so the driver
  writes the ratio to a small file the reader reads at each planning, as it reads the routing log's
  current plan;
* the offloaded share: an offloaded event costs the VM only a fraction of a kept one
  (core/offload_plan.py `share_scale`; ADR 0008, 0062).

A run that starts with more cores (Over's second core) gets a cap in proportion from its caller,
who knows the cores it starts with; this module scales what changes during the run.
"""

from __future__ import annotations

import math
from pathlib import Path

from core.atomic_write import write_text


def batch_cap(cap: int, vm_scale: float = 1.0, share_scale: float = 1.0) -> int:
    """The most offsets one epoch covers: `cap` at the run's starting capacity, times both scales."""
    return max(1, int(cap * vm_scale * share_scale))


def write_vm_scale(path: Path, scale: float) -> None:
    """Publish the VM cores' ratio to the start's (written whole: a reader never sees a torn number)."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"a capacity scale must be a positive number, got {scale!r}")
    write_text(path, f"{scale!r}\n")


def read_vm_scale(path: Path | None) -> float:
    """The last published scale; 1.0 (the starting capacity) before the first or without a file."""
    if path is None:
        return 1.0
    try:
        value = float(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return 1.0
    return value if math.isfinite(value) and value > 0 else 1.0
