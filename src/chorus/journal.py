"""A resumable JSONL journal: one line per finished item, so a killed job resumes where
it stopped. Generation (chorus.generate) and scoring (chorus.harness.score) both keep
their work in one (`<out>.partial` beside the output).

Each line is flushed and fsynced as its item finishes. On resume only complete lines
count (a line ends with a newline); a torn last line (the killed writer's) is ignored
and the next record starts on a fresh line. Records are keyed by `key(record)`; a key
of None marks a record that cannot be reused (it is skipped).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path


def complete_records(path: str | Path) -> list[dict]:
    """The records of the complete, valid JSON lines of `path` (none when it is missing)."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    with path.open("rb") as handle:
        for line in handle:
            if not line.endswith(b"\n") or not line.strip():
                continue  # a torn last line, or an empty one
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


class Journal:
    """The finished records of `path` by key (`done`), and `append` for new ones.

    `resume=False` starts afresh (the file is removed). Use as a context manager around
    the appends; `append` may be called from several threads."""

    def __init__(self, path: str | Path, key: Callable[[dict], Hashable | None], *, resume: bool = True):
        self.path = Path(path)
        self.key = key
        if not resume:
            self.path.unlink(missing_ok=True)
        self.done: dict = {}
        for record in complete_records(self.path):
            record_key = key(record) if isinstance(record, dict) else None
            if record_key is not None:
                self.done[record_key] = record
        self._lock = threading.Lock()
        self._handle = None

    def __enter__(self) -> Journal:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        torn = self.path.exists() and self.path.stat().st_size and not self._ends_with_newline()
        self._handle = open(self.path, "a")
        if torn:
            self._handle.write("\n")  # a previous run died mid-line: start on a fresh one
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()
        self._handle = None

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"

    def append(self, record: dict) -> None:
        """Write `record` as one line, durably, and count it as done."""
        line = json.dumps(record, sort_keys=True) + "\n"
        with self._lock:
            self._handle.write(line)
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self.done[self.key(record)] = record

    def finish(self, out_path: str | Path, records: Iterable[dict]) -> None:
        """Write the finished output atomically and remove the journal."""
        from chorus.io import write_jsonl

        write_jsonl(out_path, list(records))
        self.path.unlink(missing_ok=True)


def journal_path(out_path: str | Path) -> Path:
    """Where the journal of `out_path` lives: `<out_path>.partial` beside it."""
    out_path = Path(out_path)
    return out_path.with_name(out_path.name + ".partial")
