"""Merge operators: fold Lambda workers' partial states into Spark's state exactly once per epoch (issue 3)."""
