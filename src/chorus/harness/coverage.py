"""Read Verilator's coverage.dat (SystemC::Coverage-3) without verilator_coverage.

Each point is one line `C '<fields>' <count>`; fields are `\\x01key\\x02value` pairs and
the `page` field (`v_line/<module>`, `v_branch/...`, `v_toggle/...`, `v_expr/...`,
`v_user/...`, `v_fsm_state/...`, `v_fsm_arc/...`) names the metric. A point is covered when its count is positive; points
with identical fields (the same point reached through several instances) are merged.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

_LINE = re.compile(r"^C '(?P<fields>.*)' (?P<count>\d+)\s*$")
PAGE_TO_METRIC = {
    "v_line": "line",
    "v_branch": "branch",
    "v_toggle": "toggle",
    "v_expr": "expr",
    "v_user": "user",
    "v_fsm_state": "fsm",  # --coverage-fsm: states and arcs pooled, like Xcelium's FSM
    "v_fsm_arc": "fsm",
}


def parse_fields(raw: str) -> dict[str, str]:
    fields = {}
    for item in raw.split("\x01"):
        if "\x02" in item:
            key, value = item.split("\x02", 1)
            fields[key] = value
    return fields


def read_coverage_points(path: str | Path) -> dict[tuple, int]:
    """Point identity (sorted fields without the hierarchy) -> total count."""
    return parse_coverage_points(Path(path).read_text(errors="replace"))


def parse_coverage_points(text: str, keep_hierarchy=None) -> dict[tuple, int]:
    """read_coverage_points of a coverage.dat's content (already read, bounded).
    `keep_hierarchy(path)`: count only points whose instance path (split on '.') it
    accepts (e.g. one instance's subtree); None counts every instance."""
    points: dict[tuple, int] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        fields = parse_fields(match.group("fields"))
        # instance hierarchy: merge a point's instances
        hierarchy = fields.pop("h", "")
        if keep_hierarchy is not None and not keep_hierarchy(hierarchy.split(".")):
            continue
        key = tuple(sorted(fields.items()))
        points[key] = points.get(key, 0) + int(match.group("count"))
    return points


def point_metric(key: tuple) -> str | None:
    page = dict(key).get("page", "")
    return PAGE_TO_METRIC.get(page.split("/", 1)[0])


def point_id(key: tuple) -> str:
    """A point's identity as one string (what a build's points manifest stores)."""
    return "\x01".join(f"{k}\x02{v}" for k, v in key)


def read_coverage_dat(
    path: str | Path, universe: dict[str, list[str]] | None = None
) -> dict[str, tuple[int, int]]:
    """Metric -> (points hit, points total).

    `universe` (metric -> point ids, the build's manifest: every point the compiled
    design declares, see build.py) fixes the denominators: points missing from the file
    count as not hit and points the design does not declare are ignored, so a forged or
    truncated coverage.dat cannot raise the fractions.
    """
    return coverage_counts(Path(path).read_text(errors="replace"), universe)


def coverage_counts(text: str, universe: dict[str, list[str]] | None = None) -> dict[str, tuple[int, int]]:
    """read_coverage_dat of a coverage.dat's content (already read, bounded)."""
    points = parse_coverage_points(text)
    if universe is not None:
        counts = {point_id(key): count for key, count in points.items()}
        return {
            metric: (sum(counts.get(pid, 0) > 0 for pid in ids), len(ids))
            for metric, ids in universe.items()
        }
    totals: dict[str, list[int]] = {}
    for key, count in points.items():
        metric = point_metric(key)
        if metric is None:
            continue
        hit_total = totals.setdefault(metric, [0, 0])
        hit_total[1] += 1
        hit_total[0] += count > 0
    return {metric: (hit, total) for metric, (hit, total) in totals.items()}


def coverage_universe(path: str | Path) -> dict[str, list[str]]:
    """Metric -> sorted point ids declared in a coverage.dat (of any run, e.g. an empty one)."""
    universe: dict[str, list[str]] = {}
    for key in read_coverage_points(path):
        metric = point_metric(key)
        if metric is not None:
            universe.setdefault(metric, []).append(point_id(key))
    return {metric: sorted(ids) for metric, ids in universe.items()}


def coverage_fractions(counts: dict[str, tuple[int, int]]) -> dict[str, float]:
    return {m: (hit / total if total else 1.0) for m, (hit, total) in counts.items()}


def _point_matches(fields: dict[str, str], entry: tuple[tuple[str, str], ...]) -> bool:
    """Whether a point (its fields) matches every key of one coverage_exclude entry."""
    page = fields.get("page", "")
    values = {
        "metric": PAGE_TO_METRIC.get(page.split("/", 1)[0], ""),
        "file": fields.get("f", "").rsplit("/", 1)[-1],  # the build may come from another checkout
        "line": fields.get("l", ""),
        "module": page.split("/", 1)[1] if "/" in page else "",
        "comment": fields.get("o", ""),
    }
    return all(fnmatch.fnmatchcase(values[key], pattern) for key, pattern in entry)


def exclude_points(
    universe: dict[str, list[str]], exclusions: tuple[tuple[tuple[str, str], ...], ...]
) -> dict[str, list[str]]:
    """The universe without the points a task excludes (task.yaml `coverage_exclude`):
    they count neither in the denominators nor as hits."""
    if not exclusions:
        return universe
    kept = {}
    for metric, ids in universe.items():
        kept[metric] = [
            pid for pid in ids if not any(_point_matches(parse_fields(pid), entry) for entry in exclusions)
        ]
    return kept


def uncovered_points(text: str, exclusions: tuple[tuple[tuple[str, str], ...], ...] = ()) -> list[dict[str, str]]:
    """The fields (less the hierarchy) of every point of a coverage.dat's content that no
    instance reached, in the file's order, less the points `exclusions` (a task's
    coverage_exclude) drop."""
    holes = []
    for key, count in parse_coverage_points(text).items():
        fields = dict(key)
        if count == 0 and point_metric(key) is not None:
            if not any(_point_matches(fields, entry) for entry in exclusions):
                holes.append(fields)
    return holes
