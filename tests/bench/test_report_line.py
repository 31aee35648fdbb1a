"""How a bench ends: strict JSON on its last line."""

from __future__ import annotations

import json

from bench.report_line import json_line


def test_the_json_line_is_strict() -> None:
    assert json.loads(json_line({"x": [float("inf"), float("nan"), 1.5], "y": {2: "a"}})) == {
        "x": [None, None, 1.5],
        "y": {"2": "a"},
    }
