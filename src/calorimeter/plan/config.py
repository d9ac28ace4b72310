"""Load a sweep file and validate it against the JSON schema, with messages that name the file, line, key and value.

Besides the schema, a config is refused when a number is NaN or infinite, when a value that must be an integer is
written as a float (``2.0``: it would leak into cell ids), or when ``results_dir`` is empty, the file system root, or
holds braces (Snakemake reads ``{...}`` as wildcards) or control characters; ``~`` in ``results_dir`` is expanded,
so that every step reads and writes the same folder. The file itself is read strictly (see
:mod:`calorimeter.plan.yamlfile`: UTF-8, no key given twice, bounded aliases).

A sweep file may name another one with ``extends:`` (a path relative to it), merged underneath key by key.

Private keys (``_source``: the sweep file; ``_lines``: where each key was written; ``_definitions``: the models and
hardware the sweep defines, :mod:`calorimeter.plan.definitions`) travel with a loaded config and
are never validated.
"""

from __future__ import annotations

import copy
import functools
import math
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from calorimeter.plan.config_errors import ConfigError, key_path, locate, short, suggest
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.yamlfile import read_yaml

__all__ = ["ConfigError", "load_config", "load_schema", "load_sweep_config", "read_sweep_file", "sweep_lines",
           "validate_config"]

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")
#: keys of a loaded config that are metadata, not settings
PRIVATE_KEYS = ("_source", "_lines", "_definitions")
#: at most this many problems are listed in one message
MAX_PROBLEMS = 5
#: what the schema's patterns mean, for messages
_PATTERN_MEANING = {
    r"[\x00-\x1f\x7f]": "contains a control character (newline, tab, ...): it must be one printable line (values "
                          "end up on #SBATCH lines of job scripts)",
    r"^[A-Za-z0-9][A-Za-z0-9._-]*$": "may hold letters, digits, '.', '_' and '-' only, starting with a letter or "
                                      "digit",
    r"^[A-Za-z][A-Za-z0-9-]*$": "is not an sbatch option name (letters, digits and '-')",
}


@functools.cache
def load_schema() -> JsonObject:
    """The sweep schema (JSON Schema 2020-12), shared with the Snakemake workflow; read once per process (do not
    modify the returned dict)."""
    with SCHEMA_PATH.open() as f:
        return yaml.safe_load(f)


def _is_integer(_checker: Any, instance: Any) -> bool:
    """JSON Schema says 2.0 is an integer; a cell parameter written 2.0 would put ``2.0`` into cell ids."""
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))


def _allowed_keys(err: jsonschema.ValidationError) -> list[str]:
    return sorted((err.schema.get("properties") or {}).keys())


def _describe(err: jsonschema.ValidationError) -> str:
    """One short sentence about one schema error (values cut short, the nearest valid key suggested)."""
    v, inst = err.validator, err.instance
    if isinstance(inst, float) and inst.is_integer() and any(
            e.validator == "type" and "integer" in (e.validator_value if isinstance(e.validator_value, list)
                                                     else [e.validator_value]) for e in [err, *(err.context or [])]):
        return f"{inst!r} is not an integer (write {int(inst)})"
    # For oneOf/anyOf, the most specific sub-error explains best what is wrong.
    if err.context:
        specific = [e for e in err.context if e.validator != "type"]
        if specific:
            return _describe(jsonschema.exceptions.best_match(specific))
    if v == "additionalProperties":
        allowed = _allowed_keys(err)
        extra = [k for k in inst if k not in allowed] if isinstance(inst, dict) else []
        return "; ".join(f"unknown key {short(k, 60)}{suggest(k, allowed) or ''} (known: {', '.join(allowed)})"
                         for k in extra[:3]) or err.message[:200]
    if v == "type":
        want = err.validator_value
        return f"{short(inst)} is not of type {want if isinstance(want, str) else ' or '.join(want)}"
    if v == "enum":
        return f"{short(inst)} is not one of {err.validator_value}{suggest(inst, map(str, err.validator_value))}"
    if v == "pattern":
        meaning = _PATTERN_MEANING.get(err.validator_value, f"does not match {err.validator_value}")
        return f"{short(inst)} {meaning}"
    if v == "not" and isinstance(err.validator_value, dict) and "pattern" in err.validator_value:
        return f"{short(inst)} {_PATTERN_MEANING.get(err.validator_value['pattern'], 'is not allowed')}"
    if v == "propertyNames":
        return f"key {short(inst)} is not allowed here"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "minLength"):
        words = {"minimum": "less than the minimum of", "maximum": "greater than the maximum of",
                 "exclusiveMinimum": "not greater than", "exclusiveMaximum": "not less than",
                 "minItems": "shorter than", "minLength": "shorter than"}
        return f"{short(inst)} is {words[v]} {err.validator_value}"
    if v in ("oneOf", "anyOf"):
        return f"invalid value {short(inst)}"
    return f"{short(inst)}: {err.message[:200]}" if len(err.message) > 200 else err.message


def _where(err: jsonschema.ValidationError) -> str:
    """The key path whose line an error points at: an unknown key's own line, else the value's."""
    path = list(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        extra = [k for k in err.instance if k not in _allowed_keys(err)]
        if extra:
            path.append(extra[0])
    return key_path(path)


def _walk(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, (*path, i))


def _not_finite(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(key_path(p), f"{v!r} is not a finite number") for p, v in _walk(dict(config))
            if isinstance(v, float) and not math.isfinite(v)]


def normalize_results_dir(value: Any, where: str = "results_dir") -> str:
    """A usable results folder: ``~`` expanded; empty, root, braces and control characters refused."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {short(value)} is not a folder name")
    text = value.strip()
    if not text:
        raise ConfigError(f"{where}: empty; give a folder such as 'results' (an empty name would mean the "
                          "working directory or, for some tools, the file system root)")
    if re.search(r"[\x00-\x1f\x7f]", text):
        raise ConfigError(f"{where}: {short(value)} contains a control character")
    if "{" in text or "}" in text:
        raise ConfigError(f"{where}: {short(value)} contains braces, which Snakemake reads as wildcards; choose a "
                          "folder name without '{' and '}'")
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        raise ConfigError(f"{where}: {short(value)}: cannot expand '~' (no such user or no HOME)")
    if Path(expanded).resolve() == Path(Path(expanded).resolve().anchor):
        raise ConfigError(f"{where}: {short(value)} is the file system root; give a folder for the results")
    return expanded


def validate_config(config: JsonObject, source: str = "config") -> JsonObject:
    """Validate a sweep config and fill in the schema's defaults, at every level.

    The checks are stricter than the schema alone (integers are not floats, numbers are finite, ``results_dir`` is
    usable); the defaults are then filled by Snakemake's ``validate`` (the workflow's own validation, run here once
    for the workflow, the CLI and the tests alike).

    Args:
        config: parsed YAML (private keys ``_source`` and ``_lines`` are kept aside and returned unchanged).
        source: file name for messages (default: ``config["_source"]`` where present).

    Returns:
        A copy of ``config`` with every default filled in and ``results_dir`` normalized.

    Raises:
        ConfigError: naming the file and line (where known), the key path and the offending value.
    """
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    if not isinstance(config, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(config).__name__}")
    private = {k: config[k] for k in PRIVATE_KEYS if k in config}
    config = {k: v for k, v in config.items() if k not in PRIVATE_KEYS}
    source = str(private.get("_source", source))
    lines = private.get("_lines")
    schema = load_schema()
    errors = sorted(_Validator(schema).iter_errors(config),
                    key=lambda e: (len(e.absolute_path), str(list(e.absolute_path))))
    problems = [(key_path(e.absolute_path), _describe(e), _where(e)) for e in errors]
    problems += [(p, msg, p) for p, msg in _not_finite(config)]
    if problems:
        shown = [f"{locate(source, lines, at)}: {p}: {msg}" for p, msg, at in problems[:MAX_PROBLEMS]]
        more = f"\n  ... and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
        raise ConfigError("invalid configuration\n  " + "\n  ".join(shown) + more)
    out = copy.deepcopy(config)
    if "sweep" not in out and "_source" in private:
        # an unnamed sweep file is named after the file: two unnamed files never share a results folder
        stem = re.sub(r"[^A-Za-z0-9._-]", "-", Path(str(private["_source"])).stem).lstrip("._-")
        out["sweep"] = stem or schema["properties"]["sweep"]["default"]
    if "subset_of" in out and "results_dir" not in out:
        # a subset selects cells that its base sweep measures: by default it reads and writes where the base does
        inherited = _base_results_dir(out, private.get("_source"))
        if inherited is not None:
            out["results_dir"] = inherited
    try:
        validate(out, str(SCHEMA_PATH), set_default=True)
    except WorkflowError as e:  # not expected after the stricter check above
        raise ConfigError(f"{source}: rejected by the schema: {str(e)[:300]}") from None
    out["results_dir"] = normalize_results_dir(out["results_dir"],
                                               f"{locate(source, lines, 'results_dir')}: results_dir")
    out.update(private)
    return out


def subset_base_path(config: Mapping[str, Any]) -> Path:
    """The sweep file a ``subset_of`` config selects from (relative to the subset's own file)."""
    src = Path(str(config.get("_source", ".")))
    return (src.parent / config["subset_of"]) if src.suffix else Path(config["subset_of"])


def _base_results_dir(config: Mapping[str, Any], source: Any) -> Any:
    """The ``results_dir`` a subset's chain of bases sets, or None (problems are reported when it is expanded)."""
    seen: set[Path] = set()
    cfg: Mapping[str, Any] = {**config, "_source": source} if source else config
    while "subset_of" in cfg:
        base = subset_base_path(cfg)
        if not base.is_file() or base.resolve() in seen:
            return None
        seen.add(base.resolve())
        try:
            raw = read_sweep_file(base)
        except ConfigError:
            return None
        if not isinstance(raw, dict):
            return None
        if "results_dir" in raw:
            return raw["results_dir"]
        cfg = {**raw, "_source": str(base)}
    return None


def _read(path: str | Path, seen: tuple[Path, ...] = ()) -> tuple[Any, dict[str, str]]:
    """(document, ``file:line`` of each key) of a sweep file with its ``extends`` chain merged underneath."""
    from snakemake.utils import update_config

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"sweep file not found: {p}")
    if p.resolve() in seen:
        raise ConfigError(f"{p}: extends itself (through {' -> '.join(str(s) for s in seen)})")
    raw, lines = read_yaml(p)
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(f"{p}: expected a mapping of keys at the top level, got {type(raw).__name__}")
    if not raw or "extends" not in raw:
        return raw or {}, lines
    base_name = raw.pop("extends")
    if not isinstance(base_name, str):
        raise ConfigError(f"{lines.get('extends', p)}: extends: expected a file name, got {short(base_name)}")
    merged, base_lines = _read(p.parent / base_name, (*seen, p.resolve()))
    update_config(merged, raw)
    # a value that is not a mapping replaces the base's value whole: the base's lines under it no longer apply
    replaced = [key_path(q) for q, v in _walk(raw) if q and not isinstance(v, dict)]
    kept = {k: v for k, v in base_lines.items() if not any(k.startswith(r + c) for r in replaced for c in ".[")}
    return merged, {**kept, **{k: v for k, v in lines.items() if k != "extends"}}


def read_sweep_file(path: str | Path) -> Any:
    """A sweep file's YAML (read strictly, see :mod:`calorimeter.plan.yamlfile`), with the file named by its
    ``extends:`` (a path relative to it) merged underneath.

    The merge is key by key (``defaults``, ``launcher``, ``telemetry`` blocks merge; lists such as ``grid`` are
    replaced), as Snakemake merges config files; a base may itself extend another file.

    Raises:
        ConfigError: a missing file, invalid YAML, or a cycle of ``extends``.
    """
    return _read(path)[0]


def load_config(path: str | Path) -> JsonObject:
    """Read and validate a sweep file (YAML); the result carries ``_source`` and ``_lines``."""
    raw, lines = _read(path)
    return validate_config({**raw, "_source": str(path), "_lines": lines}, str(path))


def load_sweep_config(files: list[str | Path], overrides: JsonObject | None = None) -> JsonObject:
    """Merge sweep files (later ones win, key by key) and command-line overrides, without any other config."""
    from snakemake.utils import update_config

    out: JsonObject = {}
    for f in files:
        update_config(out, read_sweep_file(f))
    update_config(out, dict(overrides or {}))
    return out


def sweep_lines(files: list[str | Path], overrides: JsonObject | None = None) -> dict[str, str]:
    """``file:line`` of each key path of :func:`load_sweep_config`'s result (``--config`` for overrides)."""
    lines: dict[str, str] = {}
    for f in files:
        lines.update(_read(f)[1])
    lines.update({key_path(p): "--config" for p, _ in _walk(dict(overrides or {})) if p})
    return lines
