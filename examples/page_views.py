"""Page views per page over sliding windows: how many, and the seconds readers spent on them.

sponge compile examples/page_views.py:job
"""

from core.job import Job, WindowSpec, agg, col

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
