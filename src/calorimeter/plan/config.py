"""Load a sweep file and validate it against the JSON schema, with messages that name the bad key and value."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")


class ConfigError(ValueError):
    """Bad user input (config file, sweep value, data path): printed without a traceback."""


@functools.cache
def load_schema() -> dict[str, Any]:
    """The sweep schema (JSON Schema 2020-12), shared with the Snakemake workflow; read once per process (do not
    modify the returned dict)."""
    with SCHEMA_PATH.open() as f:
        return yaml.safe_load(f)


def _path(err: jsonschema.ValidationError) -> str:
    out = ""
    for p in err.absolute_path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


def _describe(err: jsonschema.ValidationError) -> str:
    # For oneOf/anyOf, the most specific sub-error explains best what is wrong.
    if err.context:
        specific = [e for e in err.context if e.validator != "type"]
        if specific:
            return _describe(jsonschema.exceptions.best_match(specific))
    if err.validator == "additionalProperties":
        return f"{err.message} (check the spelling; see workflow/schemas/config.schema.yaml for the keys)"
    if err.validator in ("oneOf", "anyOf"):
        return f"invalid value {err.instance!r}"
    return err.message


def validate_config(config: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Validate a sweep config and fill in the schema's defaults, at every level.

    The defaults are filled by Snakemake's ``validate`` (the workflow's own validation, run here once for the
    workflow, the CLI and the tests alike); when it fails, the errors are explained key by key.

    Args:
        config: parsed YAML.
        source: file name for messages.

    Returns:
        A copy of ``config`` with every default filled in.

    Raises:
        ConfigError: naming the key path and the offending value.
    """
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    if not isinstance(config, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(config).__name__}")
    out = copy.deepcopy(config)
    try:
        validate(out, str(SCHEMA_PATH), set_default=True)
    except WorkflowError:
        validator = jsonschema.Draft202012Validator(load_schema())
        errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
        lines = [f"{source}: {_path(e)}: {_describe(e)}" for e in errors[:5]] or [f"{source}: rejected by the schema"]
        raise ConfigError("invalid configuration\n  " + "\n  ".join(lines)) from None
    return out


def read_sweep_file(path: str | Path, _seen: tuple[Path, ...] = ()) -> Any:
    """A sweep file's YAML, with the file named by its ``extends:`` (a path relative to it) merged underneath.

    The merge is key by key (``defaults``, ``launcher``, ``telemetry`` blocks merge; lists such as ``grid`` are
    replaced), as Snakemake merges config files; a base may itself extend another file.

    Raises:
        ConfigError: a missing file, invalid YAML, or a cycle of ``extends``.
    """
    from snakemake.utils import update_config

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"sweep file not found: {p}")
    if p.resolve() in _seen:
        raise ConfigError(f"{p}: extends itself (through {' -> '.join(str(s) for s in _seen)})")
    try:
        with p.open() as f:
            raw = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    if not isinstance(raw, dict) or "extends" not in raw:
        return raw or {}
    base_name = raw.pop("extends")
    if not isinstance(base_name, str):
        raise ConfigError(f"{p}: extends: expected a file name, got {base_name!r}")
    merged = read_sweep_file(p.parent / base_name, (*_seen, p.resolve()))
    update_config(merged, raw)
    return merged


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and validate a sweep file (YAML)."""
    cfg = validate_config(read_sweep_file(path), str(path))
    cfg["_source"] = str(path)
    return cfg


def load_sweep_config(files: list[str | Path], overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge sweep files (later ones win, key by key) and command-line overrides, without any other config."""
    from snakemake.utils import update_config

    out: dict[str, Any] = {}
    for f in files:
        update_config(out, read_sweep_file(f))
    update_config(out, dict(overrides or {}))
    return out
