"""Merge operators: fold Lambda workers' partial states into Spark's state once per epoch.

The fold rules live in algebra.py, one description per aggregate kind; polars_fold.py (workers,
fused operators) and spark/column_fold.py (the VM's aggregates) translate them.
"""
