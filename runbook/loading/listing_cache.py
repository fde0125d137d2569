"""What `runbook list` and `runbook validate` found, kept under the state directory and keyed by the
stats of every file that decides it: a hit answers without parsing a playbook (start-up time).

The key covers the playbook files (path, size, mtime, ctime, inode), the config file in effect (it
names the signal catalog), the working directory (./playbooks) and runbook's own source files, so
an edit anywhere misses. A file changed within the last two seconds is never cached: a second edit
in the same clock tick, of the same size, would look unchanged. Anything odd about the cache
(unreadable, another shape, an unsafe state directory) is a miss: the cache only ever saves time.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runbook import settings
from runbook.files import bundled
from runbook.record import safe_fs
from runbook.errors import RunbookError
from runbook.files import discovery

FORMAT = 1
KEEP = 16  # cached answers kept (one per set of inputs: other folders, other configs)
RACY_SECONDS = 2.0
_SOURCE_SUFFIXES = (".py", ".yaml", ".yml", ".json")


def _stat_line(path: Path) -> str:
    st = os.stat(path)
    return f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}"


def _newest(paths: Sequence[Path]) -> float:
    return max((os.stat(p).st_mtime for p in paths), default=0.0)


def _source_files() -> list[Path]:
    """runbook's own code and data: a new version of any of them may judge a playbook differently."""
    found = []
    for root, dirs, files in os.walk(bundled.PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found.extend(Path(root) / f for f in sorted(files) if f.endswith(_SOURCE_SUFFIXES))
    return found


class Key:
    """The inputs of one `list`/`validate` answer, and whether they are settled enough to cache."""

    def __init__(self, labelled: Sequence[tuple[str, Path]]):
        config = discovery.find_config()
        watched = [path for _, path in labelled] + ([config] if config else []) + _source_files()
        lines = [f"format {FORMAT}", sys.version, os.getcwd(), f"config {config}"]
        lines += [f"{label}\0{_stat_line(path)}" for label, path in labelled]
        lines += [_stat_line(path) for path in watched[len(labelled):]]
        self.digest = hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()
        self.settled = time.time() - _newest(watched) > RACY_SECONDS


def _folder() -> Path:
    return settings.state_dir() / "cache" / "listing"


def lookup(key: Key) -> list[dict[str, Any]] | None:
    """The cached summaries for `key`, or None (a miss)."""
    try:
        safe_fs.check_state_dir(settings.state_dir(), create=False)
        fd = safe_fs.open_private(_folder() / f"{key.digest}.json", os.O_RDONLY)
        with os.fdopen(fd, "rb") as handle:
            document = json.loads(handle.read(8 * 1024 * 1024))
    except (OSError, ValueError, RunbookError):
        return None
    if not isinstance(document, dict) or document.get("format") != FORMAT or document.get("key") != key.digest:
        return None
    summaries = document.get("summaries")
    if not isinstance(summaries, list) or not all(isinstance(s, dict) and isinstance(s.get("file"), str)
                                                  for s in summaries):
        return None
    return summaries


def store(key: Key, summaries: list[dict[str, Any]]) -> None:
    """Keep `summaries` for `key` (when its inputs are settled), and drop the oldest beyond KEEP."""
    if not key.settled:
        return
    try:
        safe_fs.check_state_dir(settings.state_dir())
        folder = safe_fs.private_dir(_folder())
        data = json.dumps({"format": FORMAT, "key": key.digest, "summaries": summaries}).encode()
        partial = folder / f".{key.digest}.{os.getpid()}.tmp"
        safe_fs.write_private(partial, data)
        os.replace(partial, folder / f"{key.digest}.json")  # whole or not at all, for a reader beside us
        kept = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[KEEP:]:
            old.unlink(missing_ok=True)
    except (OSError, RunbookError):
        return  # a read-only or unsafe state directory: no cache, the answer stands
