"""Read Verilator's coverage.dat (SystemC::Coverage-3) without verilator_coverage.

Each point is one line `C '<fields>' <count>`; fields are `\\x01key\\x02value` pairs and
the `page` field (`v_line/<module>`, `v_branch/...`, `v_toggle/...`, `v_expr/...`,
`v_user/...`) names the metric. A point is covered when its count is positive; points
with identical fields (the same point reached through several instances) are merged.
"""

from __future__ import annotations

import re
from pathlib import Path

_LINE = re.compile(r"^C '(?P<fields>.*)' (?P<count>\d+)\s*$")
PAGE_TO_METRIC = {
    "v_line": "line",
    "v_branch": "branch",
    "v_toggle": "toggle",
    "v_expr": "expr",
    "v_user": "user",
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
    points: dict[tuple, int] = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        fields = parse_fields(match.group("fields"))
        fields.pop("h", None)  # instance hierarchy: merge a point's instances
        key = tuple(sorted(fields.items()))
        points[key] = points.get(key, 0) + int(match.group("count"))
    return points


def read_coverage_dat(path: str | Path) -> dict[str, tuple[int, int]]:
    """Metric -> (points hit, points total)."""
    totals: dict[str, list[int]] = {}
    for key, count in read_coverage_points(path).items():
        page = dict(key).get("page", "")
        metric = PAGE_TO_METRIC.get(page.split("/", 1)[0])
        if metric is None:
            continue
        hit_total = totals.setdefault(metric, [0, 0])
        hit_total[1] += 1
        hit_total[0] += count > 0
    return {metric: (hit, total) for metric, (hit, total) in totals.items()}


def coverage_fractions(counts: dict[str, tuple[int, int]]) -> dict[str, float]:
    return {m: (hit / total if total else 1.0) for m, (hit, total) in counts.items()}
