"""Load, complete and check the workflow config (config/config.yaml).

config/config.schema.yaml is the one source of defaults: `check_config` fills every
`default` of the schema into the config (in place, like snakemake.utils.validate with
set_default) and then validates it, so rules, scripts and chorus.plan read keys without
fallbacks of their own. A bad config fails with one line naming the key
(`ConfigError`), never a dump of the schema and the config.
"""

from __future__ import annotations

import copy
import difflib
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
    object lacks (recursing into the filled value) and reads a string as YAML where the
    schema wants another type (an item of a list too), then validates as usual."""
    from jsonschema import Draft202012Validator, validators

    validate_properties = Draft202012Validator.VALIDATORS["properties"]
    validate_items = Draft202012Validator.VALIDATORS["items"]

    def fill_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
                elif name in instance:
                    instance[name] = _as_yaml(validator, instance[name], subschema)
        yield from validate_properties(validator, properties, instance, schema)

    def items_as_yaml(validator, items, instance, schema):
        if isinstance(instance, list) and isinstance(items, dict):
            instance[:] = [_as_yaml(validator, item, items) for item in instance]
        yield from validate_items(validator, items, instance, schema)

    cls = validators.extend(Draft202012Validator, {"properties": fill_defaults, "items": items_as_yaml})
    return cls(schema)


def _as_yaml(validator, value, schema: dict):
    """`value` read as YAML when it is a string that `schema` refuses and its YAML
    reading passes, else `value`. Snakemake reads the nested parts of a command line's
    `--config eval='{k: 4}'` as strings ({'k': '4'}); read again, they are what the same
    text in a config file gives."""
    if not isinstance(value, str) or _passes(validator, value, schema):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return parsed if _passes(validator, copy.deepcopy(parsed), schema) else value


def _passes(validator, value, schema: dict) -> bool:
    return next(validator.descend(value, schema), None) is None


def _key(path) -> str:
    """JSON path parts as the config key a user would write: rl.experts[0].seed."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _nearest_key(error) -> str:
    """' (did you mean 'batch_size'?)' for an unknown key close to a known one, else ''."""
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return ""
    known = list(error.schema.get("properties", {}))
    hints = []
    for key in error.instance:
        if key not in known:
            hints += [f"{key!r} -> {match!r}" for match in difflib.get_close_matches(str(key), known, n=1)]
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


def fill_defaults(config: dict) -> dict:
    """Fill the schema's defaults into `config` (in place) without judging it."""
    for _ in _validator(load_schema()).iter_errors(config):
        pass
    return config


def check_config(config: dict) -> dict:
    """Fill the schema's defaults into `config` (in place), validate it and run the
    cross-checks between values that a schema cannot express; returns `config`. Raises
    ConfigError. The names that sections give each other (stages, experts, merges) are
    the Plan's to check (chorus.plan.checked_plan does both)."""
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
        message += _nearest_key(error)
        raise ConfigError(f"invalid config at {_key(error.absolute_path)}: {message}")
    cross_check(config)
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
