"""Sponge on Spark core: query API, logical DAG, compile-time rewriting, NEXMark, Spark lowering and the CLI."""
