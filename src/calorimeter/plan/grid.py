"""Expand a validated sweep config into cells (cartesian product per block, union over blocks).

A grid is counted before it is expanded: more than :data:`MAX_CELLS` cells is refused with each block's product.
A ``subset_of`` sweep selects cells of another sweep file with ``where``; a selection that matches nothing, a base
that cannot be read and a chain of subsets that comes back to itself are refused.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

from calorimeter.plan.cell import Cell
from calorimeter.plan.config import ConfigError, load_config, subset_base_path
from calorimeter.plan.config_errors import locate, short, suggest
from calorimeter.plan.definitions import inline_model, register_sweep_definitions
from calorimeter.plan.hardware import HardwareProfile, detect_profile, get_profile
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import DEFAULT_KIND, get_kind
from calorimeter.plan.models import get_model
from calorimeter.plan.vocabulary import AXES, PARAMETERS

CELL_FIELDS = set(PARAMETERS)
#: the model field of cells whose kind trains nothing
NO_MODEL = "-"
#: cells one sweep may expand to; a larger grid is refused before it is expanded (split it into several sweeps)
MAX_CELLS = 250_000


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def resolve_hardware(name: str) -> tuple[HardwareProfile, int | None]:
    """Profile for a name; ``auto`` detects the local machine and also returns its device count."""
    if name == "auto":
        profile, count = detect_profile()
        return profile, count
    try:
        return get_profile(name), None
    except KeyError as e:
        raise ConfigError(str(e.args[0])) from None


def _cell_from_point(point: JsonObject, sweep: str, where: str, source: str = "config",
                     lines: dict[str, str] | None = None) -> Cell:
    def at(key: str) -> str:
        """``file:line: grid[i].key`` (or the defaults' line where the block does not set the key)."""
        for path in (f"{where}.{key}", f"defaults.{key}", key):
            if lines and path in lines:
                return f"{lines[path]}: {where}.{key}"
        return f"{locate(source, lines, where)}: {where}.{key}"

    values = dict(point)
    par = values.pop("parallel", None) or {}
    values.update(par)
    model_name = values.pop("model", None)
    kind = get_kind(values.get("kind", DEFAULT_KIND))
    if model_name is None and not kind.trains_model:
        model_name = NO_MODEL
    if model_name is None:
        raise ConfigError(f"{locate(source, lines, where)}: {where}: no 'model' (set it in the block or in "
                          "'defaults')")
    try:
        # a calibration kind trains no model; a command's model (optional) gives its FLOPs and MFU
        declared = kind.trains_model or (kind.declares_model and model_name != NO_MODEL)
        model = get_model(model_name) if declared else None
    except KeyError as e:
        raise ConfigError(f"{at('model')}: {e.args[0]}") from None
    hw_name = values.pop("hardware")
    try:
        profile, local_count = resolve_hardware(hw_name)
    except ConfigError as e:
        raise ConfigError(f"{at('hardware')}: {e}") from None
    gpn = values.pop("gpus_per_node", None)
    if gpn == "all":
        gpn = local_count or profile.gpus_per_node
    if gpn is None:
        gpn = local_count if (local_count and profile.accelerator != "cpu") else profile.gpus_per_node
    precision = values.pop("precision", "auto") or "auto"
    if precision == "auto":
        precision = "fp32" if profile.accelerator == "cpu" else "bf16"
    seq_len = values.pop("seq_len", None) or (model.seq_length if model else Cell.seq_len)
    dataset = values.get("dataset")
    if dataset:
        prefix = str(dataset)
        if not Path(prefix + ".bin").is_file():
            raise ConfigError(f"{at('dataset')}: {prefix}.bin does not exist (a pre-tokenized dataset is "
                              "<prefix>.bin plus <prefix>.json or a Megatron <prefix>.idx)")
        if not (Path(prefix + ".json").is_file() or Path(prefix + ".idx").is_file()):
            raise ConfigError(f"{at('dataset')}: neither {prefix}.json nor {prefix}.idx describes {prefix}.bin")
    if values.get("pp_split") is not None:
        values["pp_split"] = tuple(values["pp_split"])
    if values.get("pp_schedule") == "1f1b":  # the default schedule: the cell (and its id) as before the knob
        values.pop("pp_schedule")
    kwargs = {k: v for k, v in values.items() if k in CELL_FIELDS and v is not None}
    return Cell(sweep=sweep, model=model.name if model else NO_MODEL, hardware=profile.name,
                nodes=values.pop("nodes", 1) or 1,
                gpus_per_node=int(gpn), precision=precision, seq_len=int(seq_len),
                **{k: v for k, v in kwargs.items() if k not in ("nodes",)})


def _named_models(block: JsonObject, config: JsonObject, where: str) -> JsonObject:
    """The block with each inline model definition (``model: {hf_config: ...}``) registered and named."""
    if "model" not in block:
        return block
    lines = config.get("_lines")
    names = []
    for value in _as_list(block["model"]):
        if isinstance(value, dict):
            at = f"{locate(str(config.get('_source', 'config')), lines, f'{where}.model')}: {where}.model"
            names.append(inline_model(value, config, at))
        else:
            names.append(value)
    return {**block, "model": names if isinstance(block["model"], list) else names[0]}


def _merged_blocks(config: JsonObject) -> list[JsonObject]:
    """Each grid block with the defaults it does not set (a block's parallel layouts override the defaults')."""
    defaults = {"hardware": config.get("hardware", "auto"), **config.get("defaults", {})}
    out = []
    for i, block in enumerate(config["grid"]):
        in_parallel = {k for par in _as_list(block.get("parallel") or []) for k in par}
        both = sorted(in_parallel & set(block))
        if both:
            raise ConfigError(f"{locate(str(config.get('_source', 'config')), config.get('_lines'), f'grid[{i}]')}: "
                              f"grid[{i}]: {both} given both directly and inside 'parallel'")
        out.append({**{k: v for k, v in defaults.items() if k not in in_parallel}, **block})
    return out


def check_grid_size(blocks: list[tuple[str, JsonObject]], source: str = "config",
                    lines: dict[str, str] | None = None) -> int:
    """Cells the blocks expand to (before removing duplicates), refused above :data:`MAX_CELLS`.

    Counting multiplies list lengths, so a grid of 10^8 cells is refused in microseconds instead of filling memory.
    """
    sizes = [(name, [(k, len(_as_list(merged[k]))) for k in AXES if k in merged]
              + [("repeats", int(merged.get("repeats", 1)))]) for name, merged in blocks]
    total = sum(math.prod(n for _, n in axes) for _, axes in sizes)
    if total > MAX_CELLS:
        name, axes = max(sizes, key=lambda s: math.prod(n for _, n in s[1]))
        factors = " x ".join(f"{k} {n}" for k, n in axes if n > 1) or "1"
        raise ConfigError(f"{locate(source, lines, name)}: the grid expands to {total:,} cells, more than the "
                          f"{MAX_CELLS:,} a sweep may have ({name}: {math.prod(n for _, n in axes):,} = {factors}); "
                          "split it into several sweeps or shorten its lists")
    return total


def expand(config: JsonObject, _chain: tuple[Path, ...] = ()) -> list[Cell]:
    """All cells of a validated config, in a stable order, without duplicates.

    Raises:
        ConfigError: an unknown model or hardware, a key set twice, two different cells sharing one id, a grid
            above :data:`MAX_CELLS`, or a ``subset_of`` that cannot be resolved or selects nothing.
    """
    if "subset_of" in config:
        return _subset(config, _chain)
    if "grid" not in config:
        raise ConfigError(f"{config.get('_source', 'config')}: no 'grid' and no 'subset_of': nothing to run")
    sweep = config["sweep"]
    source, lines = str(config.get("_source", "config")), config.get("_lines")
    register_sweep_definitions(config)
    blocks = [_named_models(merged, config, f"grid[{i}]") for i, merged in enumerate(_merged_blocks(config))]
    check_grid_size([(f"grid[{i}]", merged) for i, merged in enumerate(blocks)], source, lines)
    cells: dict[str, Cell] = {}
    for i, merged in enumerate(blocks):
        repeats = int(merged.get("repeats", 1))
        axes = [k for k in AXES if k in merged]
        lists = [_as_list(merged[k]) for k in axes]
        for combo in itertools.product(*lists):
            cell = _cell_from_point(dict(zip(axes, combo, strict=True)), sweep, f"grid[{i}]", source, lines)
            prev = cells.get(cell.cell_id)
            if prev is not None and prev != cell:
                diff = {k: (v, cell.to_dict()[k]) for k, v in prev.to_dict().items() if cell.to_dict()[k] != v}
                raise ConfigError(f"{locate(source, lines, f'grid[{i}]')}: grid[{i}]: two cells share the id "
                                  f"{cell.cell_id} but differ in {diff}; "
                                  "make them differ in a parameter that is part of the id")
            cells[cell.cell_id] = cell
            for k in range(1, repeats):
                rep = dataclasses.replace(cell, repeat=k)
                cells[rep.cell_id] = rep
    # repetitions interleaved in time: every configuration's first run before any second one, and so on
    if any(c.repeat for c in cells.values()):
        return sorted(cells.values(), key=lambda c: run_order_key(c, sweep))
    return sorted(cells.values(), key=lambda c: c.repeat)


def run_order_key(cell: Cell, seed: str) -> tuple[int, bool, str, bool]:
    """Where a cell of a repeated sweep runs: by repetition, and within a repetition in an order shuffled anew for
    each repetition (seeded by ``seed``, the sweep's name, and the repetition: the plan's cell order records it and
    the same sweep always gets the same order), so that drift within a pass is not confounded with the compared
    configurations; calibration kinds run first in their pass (training cells may need their profile), and a
    layout's default placement stays first among its placement policies."""
    import hashlib

    layout = dataclasses.replace(cell, placement="default", repeat=0).cell_id
    h = hashlib.sha256(f"{seed}:{cell.repeat}:{layout}".encode()).hexdigest()
    return cell.repeat, get_kind(cell.kind).trains_model, h, cell.placement != "default"


def _subset(config: JsonObject, chain: tuple[Path, ...]) -> list[Cell]:
    src = Path(config.get("_source", "."))
    lines = config.get("_lines")
    here = locate(str(src), lines, "subset_of")
    base_path = subset_base_path(config)
    me = src.resolve() if src.suffix else None
    seen = (*chain, *([me] if me else []))
    if base_path.resolve() in seen:
        loop = " -> ".join(p.name for p in (*seen, base_path.resolve()))
        raise ConfigError(f"{here}: subset_of: {config['subset_of']!r} leads back to itself ({loop})")
    if not base_path.is_file():
        raise ConfigError(f"{here}: subset_of: {config['subset_of']!r} does not exist (looked for {base_path}; the "
                          "path is relative to the subset's file)")
    try:
        base = expand(load_config(base_path), seen)
    except ConfigError as e:
        raise ConfigError(f"{here}: subset_of {config['subset_of']!r}: {e}") from None
    where = config.get("where", {})
    if not base:
        raise ConfigError(f"{here}: subset_of: {config['subset_of']!r} has no cells to select from")
    known = sorted(base[0].to_dict())
    for key in where:
        if key not in known:
            raise ConfigError(f"{locate(str(src), lines, f'where.{key}')}: where: unknown key {short(key)}"
                              f"{suggest(key, known)}; known: {', '.join(known)}")
    rows = [c.to_dict() for c in base]
    picked = [c for c, d in zip(base, rows, strict=True) if all(d[k] == v for k, v in where.items())]
    if not picked:
        have = "; ".join(f"{k} there: {', '.join(sorted({short(d[k], 30) for d in rows}))}" for k in where)
        raise ConfigError(f"{locate(str(src), lines, 'where')}: where {short(where, 120)} matches none of the "
                          f"{len(base)} cells of {config['subset_of']} ({have})")
    return picked
