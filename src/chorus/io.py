"""Small I/O helpers shared by the workflow scripts: atomic writes, manifests, logging."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write via a temp file in the same folder and rename, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(out_dir: str | Path):
    """Yield a sibling temp folder to fill; on success it replaces `out_dir` by a rename,
    on failure it is removed: a killed job never leaves a folder that looks complete."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        yield staging
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def atomic_write_json(path: str | Path, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    """Rows of a JSONL file; a torn last line (a killed writer) is ignored."""
    rows = []
    path = Path(path)
    if not path.exists():
        return rows
    with path.open() as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def write_jsonl(path: str | Path, rows) -> None:
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


@contextlib.contextmanager
def script_logging(snakemake):
    """Send a Snakemake script's stdout, stderr and logging to its `log:` file."""
    log_path = Path(snakemake.log[0])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield
        finally:
            root.removeHandler(handler)
            sys.stdout.flush()


def prepend_pythonpath(path: str) -> None:
    """Put `path` first on PYTHONPATH for the processes this one starts (the workflow's
    job scripts import chorus from the checkout, also inside conda envs)."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != path]
    os.environ["PYTHONPATH"] = os.pathsep.join([path, *rest])


class Progress:
    """Progress lines for a job's log: '<what>: 12/40 (30%), 1.8/s, ~16 s left', logged
    at the first and last item and otherwise at most every `every_s` seconds."""

    def __init__(self, what: str, total: int, every_s: float = 30.0, clock=None):
        import time

        self.what, self.total, self.every_s = what, total, every_s
        self.clock = clock or time.monotonic
        self.done = 0
        self.start = self.last = self.clock()
        self.log = logging.getLogger("chorus.progress")

    def update(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if self.done in (n, self.total) or now - self.last >= self.every_s:
            self.last = now
            self.log.info(self.line(now))

    def line(self, now: float) -> str:
        elapsed = now - self.start
        rate = self.done / elapsed if elapsed > 0 else float("nan")
        share = self.done / self.total if self.total else 1.0
        left = (self.total - self.done) / rate if rate and rate == rate else float("nan")
        return (
            f"{self.what}: {self.done}/{self.total} ({share:.0%}), {rate:.2f}/s"
            + (f", ~{left:.0f} s left" if left == left and self.done < self.total else "")
        )
