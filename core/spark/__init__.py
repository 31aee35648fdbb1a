"""Lowering to PySpark Structured Streaming; the only part of core/ that imports pyspark."""
