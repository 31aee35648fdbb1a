"""NEXMark: deterministic event generator, Q0-Q8 in our API, an independent batch reference."""
