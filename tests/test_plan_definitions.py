"""Models and hardware defined in the sweep file (`models:`, `hardware_profiles:`, `model: {hf_config: ...}`).

The FLOP and parameter counts are checked against counts written here independently of the package: published
parameter counts of Hugging Face models, and the standard ``6 N + 12 L s q`` FLOPs per token written from the
config's fields.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calorimeter.plan.config import ConfigError
from calorimeter.plan.definitions import definitions_of, register_definitions
from calorimeter.plan.hardware import PROFILES, detect_profile, device_mismatch
from calorimeter.plan.models import CATALOGUE, get_model, parameter_count, trained_parameter_count
from calorimeter.plan.plan import make_plan

# Published configs (config.json of the Hugging Face repositories), trimmed to the fields that matter.
LLAMA_3_2_1B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
                "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "max_position_embeddings": 131072,
                "rope_theta": 500000.0, "tie_word_embeddings": True, "attention_bias": False,
                "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
QWEN_2_5_0_5B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
                 "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                 "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
                 "rope_theta": 1000000.0, "tie_word_embeddings": True}
QWEN_3_0_6B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
               "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
               "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
               "rope_theta": 1000000, "tie_word_embeddings": True, "attention_bias": False}


@pytest.fixture(autouse=True)
def _catalogues_restored():
    """Definitions register into this process's catalogues: each test leaves them as it found them."""
    models, profiles = dict(CATALOGUE), dict(PROFILES)
    yield
    CATALOGUE.clear()
    CATALOGUE.update(models)
    PROFILES.clear()
    PROFILES.update(profiles)


def _write(tmp_path: Path, name: str, doc: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(doc))
    return folder


def _plan(tmp_path: Path, text: str):
    f = tmp_path / "sweep.yaml"
    f.write_text(text)
    from calorimeter.plan.plan import plan_file

    return plan_file(f)


@pytest.mark.parametrize(("doc", "published"), [(LLAMA_3_2_1B, 1_235_814_400), (QWEN_2_5_0_5B, 494_032_768)])
def test_hf_config_gives_the_published_parameter_count(tmp_path: Path, doc: dict, published: int) -> None:
    folder = _write(tmp_path, "m", doc)
    plan = _plan(tmp_path, f"sweep: s\nhardware: h200\ngrid:\n  - {{model: {{hf_config: {folder.name}}}, "
                           "gpus_per_node: 1}\n")
    m = get_model(plan.cells[0].cell.model)
    assert parameter_count(m) == published
    # the engine trains an untied head: memory estimate and projection count one more vocab x hidden matrix
    assert trained_parameter_count(m) == published + doc["vocab_size"] * doc["hidden_size"]
    assert plan.cells[0].cell.model == "m" and m.tie_embeddings and m.seq_length == 4096
    if doc is QWEN_2_5_0_5B:
        assert m.qkv_bias and m.rotary_base == 1e6
    else:
        assert dict(m.rope_scaling)["rope_type"] == "llama3" and m.num_query_groups == 8


def test_explicit_head_dim_counts_query_width_not_hidden(tmp_path: Path) -> None:
    """Qwen3 0.6B: 16 heads of 128 channels on a 1024-wide model (q = 2048). Independent count: 6N + 12 L s q."""
    folder = _write(tmp_path, "qwen3-0.6b", QWEN_3_0_6B)
    plan = _plan(tmp_path, f"sweep: s\nhardware: h200\ngrid:\n  - {{model: {{hf_config: {folder}/config.json, "
                           "seq_length: 2048}, gpus_per_node: 1, global_batch: 1}\n")
    pc = plan.cells[0]
    m = get_model(pc.cell.model)
    assert m.head_dim == 128 and m.q_channels == 2048 and m.seq_length == 2048
    c = QWEN_3_0_6B
    h, f, L, v, s = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"], 2048
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    matmul_params = L * (h * q + 2 * h * kv + q * h + 3 * h * f) + v * h  # the (tied) head still multiplies
    per_token = 6 * matmul_params + 12 * L * s * q
    from calorimeter.plan.flops import iteration_flops

    assert iteration_flops(m, s, 1).model_flops == pytest.approx(per_token * s, rel=1e-12)
    # the published count (596,049,920) with q/k RMSNorms (2 x 128 per layer) that the engine does not build
    assert parameter_count(m) == 596_049_920 - L * 2 * c["head_dim"]


def test_models_and_hardware_blocks_extend_the_catalogue(tmp_path: Path) -> None:
    plan = _plan(tmp_path, """
sweep: s
models:
  llama3.2-1b-like: {family: llama, num_layers: 16, hidden_size: 2048, ffn_hidden_size: 8192,
                     num_attention_heads: 32, num_query_groups: 8, vocab_size: 128256, seq_length: 8192,
                     tie_embeddings: true, rotary_base: 500000}
  llama3-8b-2l: {base: llama3-8b, num_layers: 2}
hardware_profiles:
  b200: {base: h200, memory_gb: 180, peak_bf16_tflops: 2250, match: B200, slurm_constraint: null}
grid:
  - {model: [llama3.2-1b-like, llama3-8b-2l], hardware: b200, gpus_per_node: 1}
""")
    assert [pc.cell.model for pc in plan.cells] == ["llama3.2-1b-like", "llama3-8b-2l"]
    assert all(pc.status == "planned" for pc in plan.cells)
    assert parameter_count(get_model("llama3.2-1b-like")) == 1_235_814_400
    assert get_model("llama3-8b-2l").hidden_size == 4096 and get_model("llama3-8b-2l").num_layers == 2
    assert PROFILES["b200"].peak_bf16_tflops == 2250 and PROFILES["b200"].gpus_per_node == 8
    defs = plan.config["_definitions"]
    assert {"llama3.2-1b-like", "llama3-8b-2l"} <= set(defs["models"]) and "b200" in defs["hardware_profiles"]
    # what a rank receives rebuilds the same objects
    before = (get_model("llama3.2-1b-like"), PROFILES["b200"])
    register_definitions(json.loads(json.dumps(definitions_of())))
    assert (get_model("llama3.2-1b-like"), PROFILES["b200"]) == before


def test_auto_picks_a_defined_gpu_and_its_peak(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _plan(tmp_path, "sweep: s\nhardware_profiles:\n  gb200: {base: h200, memory_gb: 186, peak_bf16_tflops: 2500, "
                    "match: GB200}\ngrid:\n  - {model: tiny-llama}\n")
    monkeypatch.setattr("calorimeter.plan.hardware.detect_local_gpus", lambda: [("NVIDIA GB200", 186.0)] * 4)
    profile, count = detect_profile()
    assert (profile.name, profile.peak_bf16_tflops, count) == ("gb200", 2500, 4)
    monkeypatch.setattr("calorimeter.plan.hardware.detect_local_gpus", lambda: [("NVIDIA H100 80GB HBM3", 80.0)])
    assert detect_profile()[0].name == "h100"


@pytest.mark.parametrize(("hardware", "device", "refused"), [
    ("h100", "NVIDIA H200", True),  # 2026-11-27: an H100 pair was asked for, two H200s came
    ("h200", "NVIDIA H100 80GB HBM3", True),
    ("h100", "NVIDIA H100 80GB HBM3", False),
    ("h200", "NVIDIA H200", False),
    ("cpu", "cpu: AMD EPYC 9654", False),  # profiles without a match are not checked
])
def test_a_rank_refuses_a_gpu_its_cell_was_not_planned_for(hardware: str, device: str, refused: bool) -> None:
    why = device_mismatch(hardware, device)
    assert (why is not None) == refused
    if why:
        assert f"hardware: {hardware}" in why and device in why and "hardware: auto" in why


@pytest.mark.parametrize(("text", "words"), [
    ("grid:\n  - {model: my-model}\n", ["unknown model 'my-model'", "neither in the catalogue nor defined"]),
    ("grid:\n  - {model: {name: x, family: llama, num_layers: 2}}\n", ["sweep.yaml:3", "misses hidden_size"]),
    ("grid:\n  - {model: {family: llama, num_layers: 2, hidden_sise: 3}}\n",
     ["unknown key 'hidden_sise'", "did you mean 'hidden_size'"]),
    ("grid:\n  - {model: {hf_config: nowhere/config.json}}\n", ["does not exist"]),
    ("models:\n  llama3-8b: {base: llama3-8b, num_layers: 2}\ngrid:\n  - {model: llama3-8b}\n",
     ["sweep.yaml:3", "is a built-in model"]),
    ("models:\n  m: {base: lama3-8b}\ngrid:\n  - {model: m}\n", ["did you mean 'llama3-8b'"]),
    ("models:\n  m: {base: llama3-8b, num_query_groups: 5}\ngrid:\n  - {model: m}\n", ["not a multiple"]),
    ("grid:\n  - {model: tiny-llama, hardware: b300}\n", ["unknown hardware 'b300'", "hardware_profiles"]),
    ("hardware_profiles:\n  x: {peak_bf16_tflops: 10}\ngrid:\n  - {model: tiny-llama, hardware: x}\n",
     ["misses gpus_per_node, memory_gb"]),
])
def test_bad_definitions_are_named(tmp_path: Path, text: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        _plan(tmp_path, "sweep: s\n" + text)
    msg = str(e.value)
    assert "invalid value" not in msg and all(w in msg for w in words), msg


def test_unsupported_hf_architecture_is_refused(tmp_path: Path) -> None:
    folder = _write(tmp_path, "t5", {"model_type": "t5", "d_model": 512})
    with pytest.raises(ConfigError, match="model_type 't5' is not supported"):
        make_plan({"sweep": "s", "grid": [{"model": {"hf_config": str(folder)}}]})


def test_catalogue_models_are_unchanged() -> None:
    """The new fields default to the old shapes: Llama-3 8B is still 8.03 B parameters with an untied head."""
    assert parameter_count(CATALOGUE["llama3-8b"]) == 8_030_261_248
    assert CATALOGUE["llama3-8b"].to_dict()["head_dim"] == 128


@pytest.mark.integration
def test_defined_models_train_on_cpu_with_independent_flops(tmp_path: Path) -> None:
    """A Llama-3.2-1B-like model from `models:` (tied head, explicit head_dim, RoPE scaling) and a Qwen2-like model
    from a Hugging Face config.json (QKV bias, tied head), tiny, each one CPU rank on a declared hardware profile:
    both train (loss falls), and the record's FLOPs match the count written here from the definitions."""
    from calorimeter.launch.run import run_cell
    from calorimeter.launch.settings import launcher_settings
    from calorimeter.records.paths import CellPaths

    qwen = {**QWEN_2_5_0_5B, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 64}
    _write(tmp_path, "tiny-qwen2", qwen)
    plan = _plan(tmp_path, f"""
sweep: defs
results_dir: {tmp_path / 'results'}
telemetry: {{profile_steps: 0, period_ms: 100}}
models:
  llama3.2-1b-tiny: {{family: llama, num_layers: 2, hidden_size: 64, ffn_hidden_size: 128, num_attention_heads: 4,
                     num_query_groups: 2, head_dim: 32, vocab_size: 256, seq_length: 32, tie_embeddings: true,
                     rotary_base: 500000, rope_scaling: {{rope_type: llama3, factor: 32.0}}}}
hardware_profiles:
  cpu-declared: {{base: cpu, gpus_per_node: 1}}
defaults: {{hardware: cpu-declared, gpus_per_node: 1, zero_stage: 0, micro_batch: 2, global_batch: 4, warmup: fixed,
           warmup_steps: 1, measured_steps: 2, lr: 0.003}}
grid:
  - {{model: llama3.2-1b-tiny}}
  - {{model: {{hf_config: tiny-qwen2}}, seq_len: 32}}
""")
    settings = launcher_settings(plan.config)
    expected = {  # per token: 6 x matmul weights (the tied head still multiplies) + 12 L s q (full attention)
        "llama3.2-1b-tiny": (2, 64, 4 * 32, 2 * 32, 128, 256),
        "tiny-qwen2": (2, 64, 64, 2 * 16, 96, 300),
    }
    for pc in plan.cells:
        rec = run_cell(pc.cell, settings, CellPaths.of(plan.results_dir, "defs", pc.cell.cell_id), pc.estimates)
        assert rec["status"] == "ok", rec.get("error")
        L, h, q, kv, f, v = expected[pc.cell.model]
        s, batch = 32, 4
        per_token = 6 * (L * (h * q + 2 * h * kv + q * h + 3 * h * f) + v * h) + 12 * L * s * q
        assert rec["metrics"]["model_flops_per_iteration"] == pytest.approx(per_token * s * batch, rel=1e-12)
        assert rec["model"]["tie_embeddings"] and rec["hardware"]["name"] == "cpu-declared"
        losses = [x["loss"] for x in rec["loss"]]
        assert len(losses) == 3 and losses[-1] < losses[0], losses
    assert rec["model"]["qkv_bias"] and rec["model"]["head_dim"] == 16


def test_the_definitions_reach_the_processes_a_workflow_starts(tmp_path: Path) -> None:
    """Snakemake runs each rule's script in a process of its own: the sweep's models and hardware travel in the
    environment and are registered when that process imports calorimeter.plan."""
    import os
    import subprocess
    import sys

    from calorimeter.plan.definitions import DEFINITIONS_ENV, export_definitions

    plan = _plan(tmp_path, "sweep: s\nmodels:\n  tiny-tied: {base: tiny-llama, tie_embeddings: true}\n"
                           "hardware_profiles:\n  cpu4: {base: cpu, gpus_per_node: 4}\n"
                           "grid:\n  - {model: tiny-tied, hardware: cpu4}\n")
    before = os.environ.get(DEFINITIONS_ENV)
    try:
        export_definitions(plan.config["_definitions"])
        out = subprocess.run([sys.executable, "-c", "from calorimeter.plan.models import get_model; "
                              "from calorimeter.plan.hardware import accelerator_of, PROFILES; "
                              "print(get_model('tiny-tied').tie_embeddings, accelerator_of('cpu4'), "
                              "PROFILES['cpu4'].gpus_per_node)"], capture_output=True, text=True, timeout=60)
    finally:
        if before is None:
            os.environ.pop(DEFINITIONS_ENV, None)
        else:
            os.environ[DEFINITIONS_ENV] = before
    assert out.stdout.split() == ["True", "cpu", "4"], out.stderr[-2000:]
