"""Page views: the three most viewed pages of each 10 s window, sliding every 2 s, with the seconds
readers spent on them. Views with no dwell time (ms <= 0) are left out.

    python examples/page_views.py --output runs/views --records 200000      # write the input
    sponge compile examples/page_views.py:job
    sponge run examples/page_views.py:job --input runs/views --output runs/views-out

The input is DIR/view/part-NNNNN.jsonl, one view per line:
{"user": 17, "page": "/p3", "at": "2026-11-26T00:00:00.007000+00:00", "ms": 120}.
`--burst-at S --burst-factor F`: the 30 s of views from second S come F times as fast (within 30/F s);
`--live` writes the files as their views happen, for a run that follows the directory.
"""

from core.job import Job, WindowSpec, agg, col, write_source_file

job = Job("page_views")
views = job.source(
    "view", {"user": "int64", "page": "string", "at": "timestamp", "ms": "int64"}, event_time="at"
)
(
    views.filter(col("ms") > 0)
    .map(page=col("page"), at=col("at"), secs=col("ms") / 1000)
    .key_by("page")
    .window_aggregate(WindowSpec(10, 2, on="at"), views=agg("count"), dwell=agg("sum", col("secs")))
    .key_by()
    .top_k(3, "views")
    .sink()
)


def write_views(
    output: str,
    records: int,
    *,
    rate: float = 1_000.0,
    seed: int = 1,
    files: int = 8,
    burst_at: float = -1.0,
    burst_factor: float = 1.0,
    burst_s: float = 30.0,
    live: bool = False,
) -> int:
    """Write `records` views as JSONL files under OUTPUT/view/: a Zipf-like choice of 50 pages, `rate`
    views per second (times `burst_factor` inside the burst). `live` writes each file once its last
    view is due, counting from the start, so a run following OUTPUT sees the views arrive at their
    rate and the burst arrive as one. Returns the files written."""
    import time
    from datetime import timedelta

    import numpy as np

    from core.trial_feed import START, arrival_seconds, wait_until_due

    rng = np.random.default_rng(seed)
    t = arrival_seconds(records, rate, burst_at, burst_factor, burst_s)
    pages = np.minimum(rng.zipf(1.5, records), 50)
    users = rng.integers(0, 10_000, records)
    dwell = rng.integers(-200, 60_000, records)
    per_file = -(-records // files)
    origin = time.time()
    for f in range(files):
        if live:
            wait_until_due(origin, float(t[min(records, (f + 1) * per_file) - 1]))
        rows = (
            {
                "user": int(users[i]),
                "page": f"/p{pages[i]}",
                "at": START + timedelta(seconds=float(t[i])),
                "ms": int(dwell[i]),
            }
            for i in range(f * per_file, min(records, (f + 1) * per_file))
        )
        write_source_file(output, "view", f, rows)
    return files


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Write page views for examples/page_views.py:job.")
    ap.add_argument("--output", required=True, help="input directory to write (DIR/view/*.jsonl)")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=1_000.0, help="views per second of event time")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--burst-at", type=float, default=-1.0, help="second the burst starts (default: none)")
    ap.add_argument("--burst-factor", type=float, default=2.0)
    ap.add_argument("--live", action="store_true", help="write each file when its views are due")
    a = ap.parse_args()
    n = write_views(
        a.output,
        a.records,
        rate=a.rate,
        seed=a.seed,
        files=a.files,
        burst_at=a.burst_at,
        burst_factor=a.burst_factor,
        live=a.live,
    )
    print(f"wrote {a.records:,} views in {n} files under {a.output}/view")
