"""Site temperatures: sensor readings joined with the devices' registrations (which site each device is
at), then per site and 60 s window sliding every 10 s: how many readings, their mean and their maximum.
Readings of a device that never registered are left out (an inner join).

    python examples/site_temperatures.py --output runs/sensors --readings 200000      # write the input
    sponge compile examples/site_temperatures.py:job
    sponge run examples/site_temperatures.py:job --input runs/sensors --output runs/sensors-out

The input is DIR/device/*.jsonl, {"device_id": 7, "site": "site3", "since": "2026-..."}, and
DIR/reading/*.jsonl, {"device": 7, "at": "2026-...", "temp": 21.4}. `--burst-at S --burst-factor F`:
the 30 s of readings from second S come F times as fast (within 30/F s); `--live` writes the reading
files as their readings happen (the devices first), for a run that follows the directory.
"""

from core.job import Job, WindowSpec, agg, col, write_source_file

job = Job("site_temperatures")
readings = job.source("reading", {"device": "int64", "at": "timestamp", "temp": "float64"}, event_time="at")
devices = job.source(
    "device", {"device_id": "int64", "site": "string", "since": "timestamp"}, event_time="since"
)
joined = readings.key_by("device").join(devices.key_by("device_id"), right_on="since")
joined.key_by("site").window_aggregate(
    WindowSpec(60, 10, on="at"),
    readings=agg("count"),
    avg_temp=agg("avg", col("temp")),
    max_temp=agg("max", col("temp")),
).sink()


def write_readings(
    output: str,
    readings: int,
    *,
    devices: int = 200,
    sites: int = 8,
    rate: float = 1_000.0,
    seed: int = 1,
    files: int = 8,
    burst_at: float = -1.0,
    burst_factor: float = 1.0,
    burst_s: float = 30.0,
    live: bool = False,
) -> None:
    """Write the devices (registered at the start, one in ten never) and `readings` readings at `rate`
    per second (times `burst_factor` inside the burst) under OUTPUT/device/ and OUTPUT/reading/;
    `live` writes each readings file once its last reading is due, counting from the start."""
    import time
    from datetime import timedelta

    import numpy as np

    from core.trial_feed import START, arrival_seconds, wait_until_due

    rng = np.random.default_rng(seed)
    start = START
    registered = [d for d in range(devices) if d % 10 != 9]
    write_source_file(
        output,
        "device",
        0,
        ({"device_id": d, "site": f"site{d % sites}", "since": start} for d in registered),
    )
    t = arrival_seconds(readings, rate, burst_at, burst_factor, burst_s)
    device = rng.integers(0, devices, readings)
    temp = np.round(rng.normal(20.0, 5.0, readings), 2)
    per_file = -(-readings // files)
    origin = time.time()
    for f in range(files):
        lo, hi = f * per_file, min(readings, (f + 1) * per_file)
        if live:
            wait_until_due(origin, float(t[hi - 1]))
        rows = (
            {"device": int(device[i]), "at": start + timedelta(seconds=float(t[i])), "temp": float(temp[i])}
            for i in range(lo, hi)
        )
        write_source_file(output, "reading", f, rows)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(
        description="Write devices and readings for examples/site_temperatures.py:job."
    )
    ap.add_argument("--output", required=True, help="input directory to write (DIR/device, DIR/reading)")
    ap.add_argument("--readings", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=1_000.0, help="readings per second of event time")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--burst-at", type=float, default=-1.0, help="second the burst starts (default: none)")
    ap.add_argument("--burst-factor", type=float, default=2.0)
    ap.add_argument("--live", action="store_true", help="write each file when its readings are due")
    a = ap.parse_args()
    write_readings(
        a.output,
        a.readings,
        rate=a.rate,
        seed=a.seed,
        files=a.files,
        burst_at=a.burst_at,
        burst_factor=a.burst_factor,
        live=a.live,
    )
    print(f"wrote {a.readings:,} readings under {a.output}/reading and the devices under {a.output}/device")
