"""The data files a Spark streaming file sink committed, read from its `_spark_metadata` log.

Why: a query stopped in the middle of an epoch can leave the data files of tasks that finished,
although the epoch itself was never committed. After the restart Spark runs the epoch again and
writes new files, so a reader that lists the directory sees those rows twice. Spark's own readers
consult the sink's log and see each epoch once; every reader here does the same.

The log has one file per epoch (`<batch>`), and every tenth is a compaction (`<batch>.compact`)
holding all entries up to it, after which older epoch files may be deleted. Each file is the line
`v1` followed by one JSON entry per data file: `{"path": URI, "action": "add"|"delete", ...}`.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

from core.errors import InputError

LOG_DIR = "_spark_metadata"
_VERSION = "v1"
_COMPACT = ".compact"


def has_sink_log(root: Path) -> bool:
    return (root / LOG_DIR).is_dir()


def committed_files(root: Path) -> list[Path]:
    """The data files under `root` that committed epochs added, sorted. A committed file that is
    missing is an error: its rows are lost, and reading on would hide that."""
    log = root / LOG_DIR
    batches = _log_files(log)
    compacts = [b for b, f in batches.items() if f.name.endswith(_COMPACT)]
    start = max(compacts, default=min(batches, default=0))
    live: dict[str, None] = {}
    for batch in sorted(b for b in batches if b >= start):
        for entry in _entries(batches[batch]):
            name = _relative(entry["path"], root)
            if entry.get("action", "add") == "delete":
                live.pop(name, None)
            else:
                live[name] = None
    missing = [n for n in live if not (root / n).is_file()]
    if missing:
        raise InputError(
            f"{len(missing)} data file(s) committed in {log} are missing, e.g. {missing[0]}",
            hint="the output directory was changed after the run; run the query again",
        )
    return sorted(root / n for n in live)


def _log_files(log: Path) -> dict[int, Path]:
    """Epoch number -> its log file; Spark's temporary and checksum files start with a dot."""
    batches: dict[int, Path] = {}
    for f in log.iterdir():
        stem = f.name.removesuffix(_COMPACT)
        if f.is_file() and stem.isdigit():
            batches[int(stem)] = f
    return batches


def _entries(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    if not lines or lines[0].strip() != _VERSION:
        raise InputError(
            f"{path} is not a Spark file-sink log (first line {lines[0][:20] if lines else ''!r}, "
            f"expected {_VERSION!r})",
            hint="only Spark's streaming file sink writes _spark_metadata; remove anything else there",
        )
    try:
        return [json.loads(line) for line in lines[1:] if line.strip()]
    except json.JSONDecodeError as err:
        raise InputError(f"{path} has a malformed entry: {err}", hint="the sink log is damaged") from err


def _relative(uri: str, root: Path) -> str:
    """The entry's path below `root`; for an output directory that was moved since, its file name
    (a streaming file sink writes its files flat, named with a unique id)."""
    path = Path(unquote(urlparse(uri).path))
    resolved = root.resolve()
    return str(path.relative_to(resolved)) if path.is_relative_to(resolved) else path.name
