"""bench.probe_spread's summary of repeated probe pairs."""

from __future__ import annotations

import pytest

from bench.probe_spread import parse_args, spread


def test_the_spread_is_per_cap_scale() -> None:
    pairs = [
        {"cap_scale": 1.0, "offload_cost": k, "stable_rate": r}
        for k, r in ((0.1, 108_000.0), (1.22, 117_500.0), (0.1, 110_900.0))
    ] + [{"cap_scale": 2.0, "offload_cost": k, "stable_rate": 100_000.0} for k in (0.67, 0.59, 0.73)]
    got = spread(pairs)
    assert got["1"] == {
        "k_median": 0.1,
        "k_min": 0.1,
        "k_max": 1.22,
        "rate_median": 110_900.0,
        "rate_min": 108_000.0,
        "rate_max": 117_500.0,
    }
    assert (got["2"]["k_median"], got["2"]["k_min"], got["2"]["k_max"]) == (0.67, 0.59, 0.73)


def test_bad_arguments_are_refused() -> None:
    assert parse_args(["--cap-scales", "1,2.5"]).cap_scales == [1.0, 2.5]
    for bad in (["--repeats", "0"], ["--cap-scales", "0,1"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
