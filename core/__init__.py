"""Sponge on Spark core: query API, logical DAG, rewriting, NEXMark, Spark lowering, CLI."""
