"""Load, complete and check the workflow config (config/config.yaml).

config/config.schema.yaml is the one source of defaults: `check_config` fills every
`default` of the schema into the config (in place, like snakemake.utils.validate with
set_default) and then validates it, so rules, scripts and chorus.plan read keys without
fallbacks of their own. A bad config fails with one line naming the key
(`ConfigError`), never a dump of the schema and the config.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "config" / "config.schema.yaml"


class ConfigError(ValueError):
    """The config fails the schema or is inconsistent (e.g. an unknown stage name)."""


@lru_cache(maxsize=1)
def load_schema() -> dict:
    return yaml.safe_load(SCHEMA.read_text())


def _validator(schema: dict):
    """A Draft 2020-12 validator that first fills the `default` of every property an
    object lacks (recursing into the filled value), then validates as usual."""
    from jsonschema import Draft202012Validator, validators

    validate_properties = Draft202012Validator.VALIDATORS["properties"]

    def fill_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    cls = validators.extend(Draft202012Validator, {"properties": fill_defaults})
    return cls(schema)


def _key(path) -> str:
    """JSON path parts as the config key a user would write: rl.experts[0].seed."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def fill_defaults(config: dict) -> dict:
    """Fill the schema's defaults into `config` (in place) without judging it."""
    for _ in _validator(load_schema()).iter_errors(config):
        pass
    return config


def check_config(config: dict) -> dict:
    """Fill the schema's defaults into `config` (in place), validate it and run the
    cross-checks a schema cannot express; returns `config`. Raises ConfigError."""
    from jsonschema.exceptions import best_match

    validator = _validator(load_schema())
    error = best_match(validator.iter_errors(config))
    if error is not None:
        message = error.message
        # the deepest failing branch of a oneOf names the key and the reason best
        while error.context:
            error = best_match(error.context)
        if error.message != message:
            message = f"{message} ({error.message})"
        raise ConfigError(f"invalid config at {_key(error.absolute_path)}: {message}")
    cross_check(config)
    from chorus.plan import Plan

    Plan(config)  # names: stages, experts, merges (raises ConfigError)
    return config


def cross_check(config: dict) -> None:
    """Relations between keys that the schema cannot state: pass@n needs n samples."""
    k = config["eval"]["k"]
    too_large = [n for n in config["eval"]["pass_at"] if n > k]
    if too_large:
        raise ConfigError(
            f"invalid config at eval.pass_at: {too_large} exceed eval.k={k} "
            "(pass@n needs at least n samples per task)"
        )


def load_config(path: str | Path) -> dict:
    """A config file, completed with the schema's defaults and checked."""
    return check_config(yaml.safe_load(Path(path).read_text()) or {})
