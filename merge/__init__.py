"""Merge operators: fold Lambda workers' partial states into Spark's state once per epoch (issue 3)."""
