"""Expand a validated sweep config into cells (cartesian product per block, union over blocks)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import fields
from pathlib import Path
from typing import Any

from calorimeter.plan.cell import Cell
from calorimeter.plan.config import ConfigError, load_config
from calorimeter.plan.hardware import HardwareProfile, detect_profile, get_profile
from calorimeter.plan.models import get_model

# Order of the product: the first key varies slowest.
AXES = ("kind", "model", "hardware", "nodes", "gpus_per_node", "parallel", "tp", "pp", "ep", "cp", "sequence_parallel",
        "zero_stage", "recompute", "recompute_layers", "overlap", "micro_batch", "global_batch", "seq_len",
        "warmup", "warmup_steps", "warmup_max_steps", "warmup_max_s", "steady_window_s", "steady_slope_c_per_min",
        "measured_steps", "measured_min_s", "precision", "dataset", "seed", "lr")
CELL_FIELDS = {f.name for f in fields(Cell)}
#: the model field of cells whose kind trains nothing
NO_MODEL = "-"


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


def _cell_from_point(point: dict[str, Any], sweep: str, where: str) -> Cell:
    values = dict(point)
    par = values.pop("parallel", None) or {}
    values.update(par)
    model_name = values.pop("model", None)
    kind = values.get("kind", "train")
    if model_name is None and kind != "train":
        model_name = NO_MODEL
    if model_name is None:
        raise ConfigError(f"{where}: no 'model' (set it in the block or in 'defaults')")
    try:
        model = get_model(model_name) if kind == "train" else None  # a calibration kind trains no model
    except KeyError as e:
        raise ConfigError(f"{where}.model: {e.args[0]}") from None
    hw_name = values.pop("hardware")
    try:
        profile, local_count = resolve_hardware(hw_name)
    except ConfigError as e:
        raise ConfigError(f"{where}.hardware: {e}") from None
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
            raise ConfigError(f"{where}.dataset: {prefix}.bin does not exist (a pre-tokenized dataset is "
                              "<prefix>.bin plus <prefix>.json or a Megatron <prefix>.idx)")
        if not (Path(prefix + ".json").is_file() or Path(prefix + ".idx").is_file()):
            raise ConfigError(f"{where}.dataset: neither {prefix}.json nor {prefix}.idx describes {prefix}.bin")
    if values.get("pp_split") is not None:
        values["pp_split"] = tuple(values["pp_split"])
    kwargs = {k: v for k, v in values.items() if k in CELL_FIELDS and v is not None}
    return Cell(sweep=sweep, model=model.name if model else NO_MODEL, hardware=profile.name,
                nodes=values.pop("nodes", 1) or 1,
                gpus_per_node=int(gpn), precision=precision, seq_len=int(seq_len),
                **{k: v for k, v in kwargs.items() if k not in ("nodes",)})


def expand(config: dict[str, Any]) -> list[Cell]:
    """All cells of a validated config, in a stable order, without duplicates.

    Raises:
        ConfigError: an unknown model or hardware, a key set twice, or two different cells sharing one id.
    """
    if "subset_of" in config:
        return _subset(config)
    if "grid" not in config:
        raise ConfigError(f"{config.get('_source', 'config')}: no 'grid' and no 'subset_of': nothing to run")
    sweep = config["sweep"]
    defaults = {"hardware": config.get("hardware", "auto"), **config.get("defaults", {})}
    cells: dict[str, Cell] = {}
    for i, block in enumerate(config["grid"]):
        in_parallel = {k for par in _as_list(block.get("parallel") or []) for k in par}
        both = sorted(in_parallel & set(block))
        if both:
            raise ConfigError(f"grid[{i}]: {both} given both directly and inside 'parallel'")
        # A block's parallel layouts override the defaults' parallel keys.
        merged = {**{k: v for k, v in defaults.items() if k not in in_parallel}, **block}
        repeats = int(merged.pop("repeats", 1))
        axes = [k for k in AXES if k in merged]
        lists = [_as_list(merged[k]) for k in axes]
        for combo in itertools.product(*lists):
            cell = _cell_from_point(dict(zip(axes, combo, strict=True)), sweep, f"grid[{i}]")
            prev = cells.get(cell.cell_id)
            if prev is not None and prev != cell:
                diff = {k: (v, cell.to_dict()[k]) for k, v in prev.to_dict().items() if cell.to_dict()[k] != v}
                raise ConfigError(f"grid[{i}]: two cells share the id {cell.cell_id} but differ in {diff}; "
                                  "make them differ in a parameter that is part of the id")
            cells[cell.cell_id] = cell
            for k in range(1, repeats):
                rep = dataclasses.replace(cell, repeat=k)
                cells[rep.cell_id] = rep
    # repetitions interleaved in time: every configuration's first run before any second one, and so on
    return sorted(cells.values(), key=lambda c: c.repeat)


def _subset(config: dict[str, Any]) -> list[Cell]:
    src = Path(config.get("_source", "."))
    base_path = (src.parent / config["subset_of"]) if src.suffix else Path(config["subset_of"])
    base = expand(load_config(base_path))
    where = config.get("where", {})
    if not base:
        return []
    known = set(base[0].to_dict())
    bad = sorted(set(where) - known)
    if bad:
        raise ConfigError(f"{src}: where: unknown key(s) {bad}; known: {sorted(known)}")
    return [c for c in base if all(c.to_dict()[k] == v for k, v in where.items())]
