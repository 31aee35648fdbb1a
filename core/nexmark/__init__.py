"""NEXMark: deterministic event generator, the queries Q0-Q8 in our API, and an independent batch reference."""
