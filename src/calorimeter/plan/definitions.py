"""Models and hardware defined in a sweep file: ``models:``, ``hardware_profiles:`` and inline ``model: {...}``.

A definition extends the built-in catalogues (:mod:`calorimeter.plan.models`, :mod:`calorimeter.plan.hardware`) for
the process that plans the sweep, and travels to every rank with the launcher settings (:func:`definitions_of`,
:func:`register_definitions`), so the engine, the FLOP count, the memory estimate, the records, the projection and
the figures all see the same model. A model is given one of three ways (docs/models.md):

* field by field (``family``, ``num_layers``, ``hidden_size``, ... as :class:`~calorimeter.plan.models.ModelSpec`);
* ``base: <catalogue model>`` plus the fields that differ (``base: llama3-8b, num_layers: 4``);
* ``hf_config: path/to/config.json`` (a Hugging Face model folder or its ``config.json``, read offline with
  ``transformers.AutoConfig``), plus fields that override it (``seq_length``, ``num_layers`` for a shorter copy).

Hardware is given field by field (:class:`~calorimeter.plan.hardware.HardwareProfile`) or as ``base:`` plus changes;
``match`` names the GPU (a substring of ``nvidia-smi``'s name) that ``hardware: auto`` maps to the profile, so an
unknown GPU with a defined peak gets an MFU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from calorimeter.plan.config_errors import ConfigError, locate, short, suggest
from calorimeter.plan.hardware import BUILTIN_PROFILES, PROFILES, HardwareProfile, register_profile
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.models import BUILTIN_MODELS, CATALOGUE, ModelSpec, register_model

#: ModelSpec fields a definition sets directly (``head_dim`` is spelt like Hugging Face's, stored as kv_channels)
MODEL_KEYS = ("family", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
              "vocab_size", "seq_length", "num_experts", "moe_topk", "moe_capacity_factor", "moe_aux_loss_coeff",
              "rotary_base", "init_std", "tie_embeddings", "qkv_bias", "rope_scaling", "description")
REQUIRED_MODEL_KEYS = ("family", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size",
                       "seq_length")
#: sequence length of a model read from a Hugging Face config unless the definition sets ``seq_length`` (a config's
#: ``max_position_embeddings``, often 131072, is the longest it supports, not a training length)
HF_DEFAULT_SEQ_LENGTH = 4096
#: Hugging Face ``model_type`` -> family; the architectures the engine builds faithfully
HF_FAMILIES = {"llama": "llama", "mistral": "llama", "qwen2": "llama", "qwen3": "llama", "mixtral": "mixtral",
               "gpt2": "gpt"}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._").lower()


def read_hf_config(path: Path) -> JsonObject:
    """ModelSpec fields of a Hugging Face ``config.json`` (or a folder holding one), read with ``transformers``'
    config classes, offline.

    Raises:
        ConfigError: no such file, ``transformers`` missing, or a ``model_type`` the engine does not build.
    """
    try:
        from transformers import AutoConfig
    except ImportError:
        raise ConfigError(f"{path}: reading a Hugging Face config needs `transformers` (pip install "
                          "'calorimeter[hf]')") from None
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"hf_config: {file} does not exist (give a config.json or the folder that holds it)")
    try:
        cfg = AutoConfig.from_pretrained(str(file), local_files_only=True)
    except (ValueError, OSError, KeyError) as e:
        raise ConfigError(f"hf_config: {file}: not a Hugging Face model config ({short(str(e), 160)})") from None
    mtype = getattr(cfg, "model_type", None)
    family = HF_FAMILIES.get(str(mtype))
    if family is None:
        raise ConfigError(f"hf_config: {file}: model_type {short(mtype)} is not supported (supported: "
                          f"{', '.join(sorted(HF_FAMILIES))}); define the model field by field under `models:`")
    if family == "gpt":
        hidden = cfg.n_embd
        return {"family": "gpt", "num_layers": cfg.n_layer, "hidden_size": hidden,
                "ffn_hidden_size": cfg.n_inner or 4 * hidden, "num_attention_heads": cfg.n_head,
                "num_query_groups": cfg.n_head, "vocab_size": cfg.vocab_size,
                "seq_length": min(cfg.n_positions, HF_DEFAULT_SEQ_LENGTH),
                "tie_embeddings": bool(cfg.tie_word_embeddings), "init_std": cfg.initializer_range}
    heads = cfg.num_attention_heads
    out: JsonObject = {
        "family": family, "num_layers": cfg.num_hidden_layers, "hidden_size": cfg.hidden_size,
        "ffn_hidden_size": cfg.intermediate_size, "num_attention_heads": heads,
        "num_query_groups": getattr(cfg, "num_key_value_heads", None) or heads, "vocab_size": cfg.vocab_size,
        "seq_length": min(cfg.max_position_embeddings, HF_DEFAULT_SEQ_LENGTH),
        "tie_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
        # Qwen2 always has q/k/v biases; Llama and Mistral say so in attention_bias
        "qkv_bias": mtype == "qwen2" or bool(getattr(cfg, "attention_bias", False)),
        "init_std": float(getattr(cfg, "initializer_range", 0.02)),
    }
    rope = getattr(cfg, "rope_scaling", None) or None
    theta = getattr(cfg, "rope_theta", None)
    if theta is None and isinstance(rope, Mapping):  # transformers 5 keeps rope_theta inside rope_parameters
        theta = rope.get("rope_theta")
    if theta is None:
        theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta")
    if theta is not None:
        out["rotary_base"] = float(theta)
    if isinstance(rope, Mapping):
        rope = {k: v for k, v in rope.items() if k != "rope_theta"}
        if rope and rope.get("rope_type", rope.get("type")) != "default":
            out["rope_scaling"] = rope
    head_dim = getattr(cfg, "head_dim", None)
    if head_dim and head_dim * heads != cfg.hidden_size:
        out["head_dim"] = int(head_dim)
    if family == "mixtral":
        out.update(num_experts=cfg.num_local_experts, moe_topk=cfg.num_experts_per_tok,
                   moe_aux_loss_coeff=float(getattr(cfg, "router_aux_loss_coef", 0.01)))
    return out


def model_from_definition(definition: Mapping[str, Any], name: str | None, base_dir: Path,
                          where: str = "models") -> ModelSpec:
    """A ModelSpec from one definition (see the module docstring).

    Args:
        definition: the mapping of the sweep file (validated by the schema).
        name: the key under ``models:``; None for an inline ``model: {...}`` (then ``name``, else the Hugging Face
            folder's or file's name).
        base_dir: the folder ``hf_config`` paths are relative to (the sweep file's).
        where: ``file:line: key path`` for messages.

    Raises:
        ConfigError: a missing field, an unknown base, an unreadable config, or an inconsistent shape.
    """
    d = dict(definition)
    fields_ = _base_fields(d, CATALOGUE, "model", where)
    if fields_:
        fields_.pop("kv_channels", None)
        if fields_["head_dim"] * fields_["num_attention_heads"] == fields_["hidden_size"]:
            fields_.pop("head_dim")
        fields_.pop("name")
    hf = d.pop("hf_config", None)
    if hf is not None:
        path = Path(str(hf)).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            fields_.update(read_hf_config(path))
        except ConfigError as e:
            raise ConfigError(f"{where}.{e}") from None
        default_name = _slug(path.parent.name if path.name == "config.json" else path.stem)
    else:
        default_name = None
    name = str(d.pop("name", None) or name or default_name or "")
    if not name:
        raise ConfigError(f"{where}: an inline model needs a `name` (or an `hf_config` to name it after)")
    fields_.update(d)
    missing = [k for k in REQUIRED_MODEL_KEYS if k not in fields_]
    if missing:
        raise ConfigError(f"{where}: model {name!r} misses {', '.join(missing)} (give them, a `base:` catalogue "
                          "model or an `hf_config:`)")
    fields_.setdefault("num_query_groups", fields_["num_attention_heads"])
    head_dim = fields_.pop("head_dim", None)
    spec_kw = {k: fields_[k] for k in MODEL_KEYS if k in fields_}
    if isinstance(spec_kw.get("rope_scaling"), Mapping):
        spec_kw["rope_scaling"] = tuple(sorted(spec_kw["rope_scaling"].items()))
    spec_kw.setdefault("description", f"defined in the sweep file ({hf})" if hf else "defined in the sweep file")
    spec = ModelSpec(name=name, kv_channels=int(head_dim) if head_dim else None, **spec_kw)
    problems = []
    if spec.num_attention_heads % spec.num_query_groups:
        problems.append(f"num_attention_heads {spec.num_attention_heads} is not a multiple of num_query_groups "
                        f"{spec.num_query_groups}")
    if head_dim is None and spec.hidden_size % spec.num_attention_heads:
        problems.append(f"hidden_size {spec.hidden_size} is not a multiple of num_attention_heads "
                        f"{spec.num_attention_heads} (give head_dim)")
    if spec.family == "mixtral" and not spec.is_moe:
        problems.append("family mixtral needs num_experts > 0")
    if spec.is_moe and spec.moe_topk > spec.num_experts:
        problems.append(f"moe_topk {spec.moe_topk} exceeds num_experts {spec.num_experts}")
    if problems:
        raise ConfigError(f"{where}: model {name!r}: {'; '.join(problems)}")
    return spec


def _base_fields(d: JsonObject, known: Mapping[str, Any], what: str, where: str) -> JsonObject:
    """The fields of the entry named by ``d``'s ``base:`` (removed from ``d``), or none."""
    if "base" not in d:
        return {}
    base = str(d.pop("base"))
    if base not in known:
        raise ConfigError(f"{where}.base: unknown {what} {short(base)}{suggest(base, known)}; known: "
                          f"{', '.join(sorted(known))}")
    return dict(known[base].to_dict())


def hardware_from_definition(definition: Mapping[str, Any], name: str, where: str = "hardware_profiles"
                             ) -> HardwareProfile:
    """A HardwareProfile from one ``hardware_profiles:`` entry (fields, or ``base:`` plus changes)."""
    d = dict(definition)
    fields_ = _base_fields(d, PROFILES, "hardware", where)
    fields_.update(d)
    fields_["name"] = name
    fields_.setdefault("accelerator", "cuda")
    fields_.setdefault("interconnect", "unknown")
    fields_.setdefault("peak_bf16_tflops", None)
    missing = [k for k in ("gpus_per_node", "memory_gb") if k not in fields_]
    if missing:
        raise ConfigError(f"{where}: hardware {name!r} misses {', '.join(missing)} (or give a `base:` profile)")
    known = {f.name for f in dataclasses.fields(HardwareProfile)}
    return HardwareProfile(**{k: v for k, v in fields_.items() if k in known})


def _lines_where(config: Mapping[str, Any], path: str) -> str:
    return f"{locate(str(config.get('_source', 'config')), config.get('_lines'), path)}: {path}"


def sweep_dir(config: Mapping[str, Any]) -> Path:
    """The folder relative paths of a sweep file are resolved in (its own; the working directory without one)."""
    src = config.get("_source")
    return Path(str(src)).parent if src else Path(".")


def register_sweep_definitions(config: Mapping[str, Any]) -> JsonObject:
    """Register a validated sweep's ``models:`` and ``hardware_profiles:`` in this process; returns them as
    :func:`definitions_of` gives them.

    Raises:
        ConfigError: naming the file, line and key of a bad definition, or a definition reusing a built-in name.
    """
    base_dir = sweep_dir(config)
    for name, d in (config.get("hardware_profiles") or {}).items():
        hw = hardware_from_definition(d, name, _lines_where(config, f"hardware_profiles.{name}"))
        try:
            register_profile(hw)
        except ValueError as e:
            raise ConfigError(f"{_lines_where(config, f'hardware_profiles.{name}')}: {e}") from None
    for name, d in (config.get("models") or {}).items():
        spec = model_from_definition(d, name, base_dir, _lines_where(config, f"models.{name}"))
        try:
            register_model(spec)
        except ValueError as e:
            raise ConfigError(f"{_lines_where(config, f'models.{name}')}: {e}") from None
    return definitions_of(config)


def inline_model(value: Mapping[str, Any], config: Mapping[str, Any], where: str) -> str:
    """Register an inline ``model: {...}`` of a grid block and return its name."""
    spec = model_from_definition(value, None, sweep_dir(config), where)
    try:
        register_model(spec)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    return spec.name


def definitions_of(config: Mapping[str, Any] | None = None) -> JsonObject:
    """Every model and hardware profile registered by sweeps in this process, as plain dicts (for the ranks)."""
    return {"models": {n: m.to_dict() | {"description": m.description} for n, m in CATALOGUE.items()
                       if n not in BUILTIN_MODELS},
            "hardware_profiles": {n: p.to_dict() for n, p in PROFILES.items() if n not in BUILTIN_PROFILES
                                  and not n.startswith("cuda-")}}


#: environment variable carrying :func:`definitions_of` (JSON) to the processes a workflow starts
DEFINITIONS_ENV = "CALORIMETER_DEFINITIONS"


def export_definitions(definitions: Mapping[str, Any]) -> None:
    """Put the sweep's definitions in this process's environment: every process it starts registers them when it
    imports :mod:`calorimeter.plan` (Snakemake runs each rule's script in a process of its own)."""
    os.environ[DEFINITIONS_ENV] = json.dumps(dict(definitions))


def register_environment_definitions() -> None:
    """Register the definitions :func:`export_definitions` left in the environment (a bad value is ignored: the
    look-up then says which name is unknown)."""
    text = os.environ.get(DEFINITIONS_ENV)
    if not text:
        return
    try:
        register_definitions(json.loads(text))
    except (ValueError, TypeError, KeyError):
        return


def register_definitions(definitions: Mapping[str, Any] | None) -> None:
    """Register what :func:`definitions_of` returned in another process (on a rank, before the cell runs)."""
    if not definitions:
        return
    for d in (definitions.get("hardware_profiles") or {}).values():
        register_profile(HardwareProfile(**d))
    for d in (definitions.get("models") or {}).values():
        register_model(ModelSpec.from_dict(d))
