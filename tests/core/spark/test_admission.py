"""The admission rule: both capacity scales multiply the cap, and a reader survives any file."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.spark.admission import batch_cap, read_vm_scale, write_vm_scale


def test_both_scales_multiply_the_cap() -> None:
    assert batch_cap(200_000) == 200_000
    assert batch_cap(200_000, vm_scale=2.0) == 400_000
    assert batch_cap(200_000, vm_scale=2.0, share_scale=2.5) == 1_000_000
    assert batch_cap(1, vm_scale=0.1) == 1  # never zero: an epoch always admits something


def test_the_scale_reads_back_and_defaults_to_the_start(tmp_path: Path) -> None:
    path = tmp_path / "run" / "capacity"
    assert read_vm_scale(None) == 1.0
    assert read_vm_scale(path) == 1.0
    write_vm_scale(path, 1.5)
    assert read_vm_scale(path) == 1.5
    for bad in ("", "nan", "-2", "x"):
        path.write_text(bad)
        assert read_vm_scale(path) == 1.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_a_scale_that_is_not_a_capacity_is_refused(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        write_vm_scale(tmp_path / "capacity", bad)
