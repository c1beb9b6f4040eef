"""Contamination check: no training design may be a near-copy of an evaluation design.

RTL is normalised before comparing: comments and layout dropped, identifiers renamed in
order of first appearance (so renaming signals does not hide a copy), keywords, numbers
and operators kept. Similarity is the Jaccard index of the token 6-gram sets. Every train
task is compared with every evaluation task (shipped and synthetic); a pair above the
threshold fails the check, and the closest pairs are reported either way.
"""

from __future__ import annotations

import heapq
import re

from chorus.tasks import Task

SHINGLE = 6
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_TOKENS = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*|\d+'[sS]?[bBoOdDhH][0-9a-fA-FxXzZ_]+|\d+|\S")
KEYWORDS = set(
    """module endmodule input output inout logic wire reg signed parameter localparam assign
    always always_ff always_comb always_latch posedge negedge or and not if else case casez
    casex endcase default begin end for generate endgenerate genvar integer typedef enum
    struct packed function endfunction return initial cover property assert""".split()
)


def normalise_rtl(text: str) -> list[str]:
    names: dict[str, str] = {}
    tokens = []
    for token in _TOKENS.findall(_COMMENTS.sub(" ", text)):
        if (token[0].isalpha() or token[0] == "_") and token not in KEYWORDS:
            token = names.setdefault(token, f"id{len(names)}")
        tokens.append(token)
    return tokens


def shingles(tokens: list[str], n: int = SHINGLE) -> frozenset:
    if len(tokens) < n:
        return frozenset([tuple(tokens)])
    return frozenset(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def design_shingles(task: Task) -> frozenset:
    text = "\n".join(p.read_text() for p in task.rtl_files)
    return shingles(normalise_rtl(text))


def similarity(a: frozenset, b: frozenset) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def check(train: list[Task], evaluation: list[Task], threshold: float, report: int = 10) -> dict:
    """Compare every train task with every evaluation task. Returns {passed, threshold,
    max_similarity, violations: [...], closest: [...]} (pairs as {train, eval, similarity})."""
    eval_sets = [(t.id, design_shingles(t)) for t in evaluation]
    cache: dict[str, frozenset] = {}
    closest: list[tuple[float, str, str]] = []
    violations = []
    for task in train:
        key = task.design_hash()
        sig = cache.get(key) or cache.setdefault(key, design_shingles(task))
        for eval_id, eval_sig in eval_sets:
            score = similarity(sig, eval_sig)
            if score > threshold:
                violations.append({"train": task.id, "eval": eval_id, "similarity": round(score, 4)})
            item = (score, task.id, eval_id)
            if len(closest) < report:
                heapq.heappush(closest, item)
            elif item > closest[0]:
                heapq.heapreplace(closest, item)
    closest_pairs = [
        {"train": t, "eval": e, "similarity": round(s, 4)} for s, t, e in sorted(closest, reverse=True)
    ]
    return {
        "passed": not violations,
        "threshold": threshold,
        "train_tasks": len(train),
        "eval_tasks": len(evaluation),
        "max_similarity": closest_pairs[0]["similarity"] if closest_pairs else 0.0,
        "violations": sorted(violations, key=lambda v: -v["similarity"]),
        "closest": closest_pairs,
    }


class ContaminationError(RuntimeError):
    """A training task is a near-copy of an evaluation task."""


def format_pairs(pairs: list[dict]) -> str:
    return "\n".join(f"  {p['similarity']:.3f}  train {p['train']}  ~  eval {p['eval']}" for p in pairs)
