"""Synthetic, simulator-verified tasks (docs/synth.md).

A *family* is a parameterised design generator: `generate(rng, split) -> Design` draws
names, widths, options and a coding style, and returns the RTL, the spec parts and the
reference stimulus steps it derives from its own knowledge of the design. Families
register themselves here; `chorus.synth.corpus` turns designs into task folders and
`chorus.synth.verify` keeps only the tasks that simulation confirms.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
from collections.abc import Callable
from dataclasses import dataclass

from chorus.synth.design import Design


@dataclass(frozen=True)
class Family:
    name: str
    generate: Callable[[random.Random, str], Design]
    combinational: bool = False


_REGISTRY: dict[str, Family] = {}


def family(name: str, combinational: bool = False):
    """Decorator registering a generator `fn(rng, split) -> Design` under `name`."""

    def register(fn):
        if name in _REGISTRY:
            raise ValueError(f"family {name!r} registered twice")
        _REGISTRY[name] = Family(name, fn, combinational)
        return fn

    return register


def all_families() -> dict[str, Family]:
    """Every registered family by name (sorted)."""
    import chorus.synth.families as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    return dict(sorted(_REGISTRY.items()))


def get_family(name: str) -> Family:
    known = all_families()
    if name not in known:
        raise KeyError(f"unknown synth family {name!r} (known: {', '.join(known)})")
    return known[name]


def span(rng: random.Random, split: str, train: tuple[int, int], test: tuple[int, int]) -> int:
    """A parameter drawn from the train range, or from the held-out range for test tasks."""
    low, high = test if split == "test" else train
    return rng.randint(low, high)
