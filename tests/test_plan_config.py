"""Bad input: every class gives its own clear message, naming the key and value, without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from calorimeter.plan import ConfigError, make_plan
from calorimeter.plan.config import validate_config


def _write(tmp_path: Path, cfg: dict) -> Path:
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


CPU = {"sweep": "t", "hardware": "cpu", "defaults": {"global_batch": 8, "micro_batch": 2}}


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        ({**CPU, "grid": [{"model": "tiny-gpt", "tpp": 2}]}, "unknown key 'tpp' (did you mean 'tp'?)"),
        ({**CPU, "grid": [{"model": "tiny-gpt", "tp": 0}]}, "grid[0].tp: 0 is less than the minimum of 1"),
        ({**CPU, "grid": [{"model": "tiny-gpt", "recompute": "sometimes"}]}, "grid[0].recompute"),
        ({**CPU, "grid": [{"model": "tiny-gpt", "zero_stage": 4}]}, "grid[0].zero_stage"),
        ({**CPU, "bogus": 1, "grid": [{"model": "tiny-gpt"}]}, "unknown key 'bogus'"),
        ({**CPU, "grid": [{"model": "tiny-gpt", "seq_len": "long"}]}, "grid[0].seq_len"),
        ({**CPU, "launcher": {"executor": "pbs"}, "grid": [{"model": "tiny-gpt"}]}, "launcher.executor"),
    ],
)
def test_schema_errors_name_key_and_value(cfg: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate_config(cfg, "sweep.yaml")
    assert expected in str(e.value)


def test_unknown_model_and_hardware() -> None:
    with pytest.raises(ConfigError, match=r"grid\[0\]\.model: unknown model 'gpt5'.*known models: .*tiny-gpt"):
        make_plan({**CPU, "grid": [{"model": "gpt5"}]})
    with pytest.raises(ConfigError, match=r"grid\[0\]\.hardware: unknown hardware 'tpu'"):
        make_plan({**CPU, "grid": [{"model": "tiny-gpt", "hardware": "tpu"}]})


def test_key_given_twice_in_a_block() -> None:
    with pytest.raises(ConfigError, match=r"\['tp'\] given both directly and inside 'parallel'"):
        make_plan({**CPU, "grid": [{"model": "tiny-gpt", "tp": 2, "parallel": {"tp": 1}}]})


def test_block_parallel_overrides_defaults() -> None:
    plan = make_plan({**CPU, "defaults": {**CPU["defaults"], "zero_stage": 1},
                      "grid": [{"model": "tiny-gpt", "parallel": {"zero_stage": 3}}]})
    assert plan.cells[0].cell.zero_stage == 3


@pytest.mark.parametrize(
    ("grid", "reason"),
    [
        ({"model": "tiny-gpt", "gpus_per_node": 3, "pp": 2}, "world size 3 (1 nodes x 3) is not divisible by tp*pp*cp"),
        ({"model": "tiny-gpt", "tp": 8, "gpus_per_node": 8}, "attention heads 4 not divisible by tp=8"),
        ({"model": "tiny-llama", "tp": 4, "gpus_per_node": 4}, "query groups (KV heads) 2 not divisible by tp=4"),
        ({"model": "tiny-gpt", "pp": 3, "gpus_per_node": 3}, "layers 4 not divisible by pp=3"),
        ({"model": "tiny-gpt", "parallel": {"pp": 2, "pp_split": [1, 2]}},
         "pp_split sums to 3 layers but the model has 4"),
        ({"model": "tiny-mixtral", "ep": 3, "gpus_per_node": 3}, "experts 4 not divisible by ep=3"),
        ({"model": "tiny-mixtral", "ep": 4, "gpus_per_node": 2}, "ep=4 does not divide dp=2"),
        ({"model": "tiny-gpt", "ep": 2}, "ep=2 but tiny-gpt is a dense model"),
        ({"model": "tiny-gpt", "global_batch": 6, "micro_batch": 2, "gpus_per_node": 2},
         "global batch 6 not divisible by micro batch x dp = 2x2 = 4"),
        ({"model": "tiny-gpt", "sequence_parallel": True}, "sequence parallelism needs tp > 1"),
        ({"model": "tiny-gpt", "warmup_min_s": 200, "warmup_max_s": 100}, "warmup_min_s 200 exceeds warmup_max_s 100"),
        ({"model": "tiny-gpt", "pp": 2, "zero_stage": 2}, "DeepSpeed refuses pipeline parallelism with ZeRO-2"),
        ({"model": "tiny-mixtral", "zero_stage": 3}, "DeepSpeed MoE does not support ZeRO-3"),
        # MoE + tp: 1 x 9 tokens routed top-2 at capacity factor 2 over 4 experts = ceil(9 / 4 * 2 * 2) = 9 slots.
        ({"model": "tiny-mixtral", "tp": 2, "gpus_per_node": 2, "micro_batch": 1, "global_batch": 1, "seq_len": 9},
         "expert capacity 9 tokens (micro_batch x seq_len x top-k x capacity factor / experts) not divisible by tp=2"),
    ],
)
def test_divisibility_and_engine_checks_prune_with_reason(grid: dict, reason: str) -> None:
    plan = make_plan({**CPU, "grid": [grid]})
    (pc,) = plan.cells
    assert pc.status == "pruned"
    assert any(reason in r for r in pc.reasons), pc.reasons
    assert plan.runnable == []


def test_memory_estimate_prunes() -> None:
    plan = make_plan({"sweep": "m", "hardware": "h100", "grid": [
        {"model": "llama3-70b", "nodes": 1, "tp": 8, "global_batch": 8},
        {"model": "llama3-8b", "nodes": 1, "zero_stage": 3, "global_batch": 8, "recompute": "full"},
    ]})
    big, small = plan.cells
    assert big.status == "pruned"
    assert any("estimated memory" in r and "exceeds the 80 GB of h100" in r for r in big.reasons)
    assert small.estimates["mem_total_gb"] < 80
    assert not any("estimated memory" in r for r in small.reasons)


def test_memory_check_can_be_disabled() -> None:
    cfg = {"sweep": "m", "hardware": "h100", "memory_check": False,
           "grid": [{"model": "llama3-70b", "nodes": 1, "zero_stage": 0, "global_batch": 8}]}
    (pc,) = make_plan(cfg).cells
    assert not any("estimated memory" in r for r in pc.reasons)


def test_duplicate_ids_with_different_params_are_rejected() -> None:
    with pytest.raises(ConfigError, match="two cells share the id"):
        make_plan({**CPU, "grid": [{"model": "tiny-gpt", "measured_steps": [3, 4]}]})


def test_cli_errors_have_no_traceback(tmp_path: Path) -> None:
    bad = _write(tmp_path, {**CPU, "grid": [{"model": "tiny-gpt", "pp": "two"}]})
    r = run_cli("plan", str(bad))
    assert r.returncode == 2
    assert "error:" in r.stderr and "grid[0].pp" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("plan", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "sweep file not found" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "broken.yaml").write_text("grid: [model: tiny\n")
    r = run_cli("plan", str(tmp_path / "broken.yaml"))
    assert r.returncode == 2 and "not valid YAML" in r.stderr and "Traceback" not in r.stderr


def test_cli_plan_json_has_every_parameter(tmp_path: Path) -> None:
    import json

    good = _write(tmp_path, {**CPU, "grid": [{"model": "tiny-gpt", "pp": [1, 2], "gpus_per_node": 2}]})
    r = run_cli("plan", str(good), "--format", "json")
    assert r.returncode == 0, r.stderr
    cells = json.loads(r.stdout)["cells"]
    assert [c["status"] for c in cells] == ["planned", "planned"]
    for key in ("cell_id", "tp", "pp", "dp", "ep", "zero_stage", "recompute", "overlap", "micro_batch",
                "global_batch", "seq_len", "warmup_steps", "measured_steps", "mem_total_gb", "params_total"):
        assert key in cells[0]


def test_missing_dataset_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"grid\[0\]\.dataset: .*nope\.bin does not exist"):
        make_plan({**CPU, "grid": [{"model": "tiny-gpt", "dataset": str(tmp_path / "nope")}]})
    (tmp_path / "d.bin").write_bytes(b"\0" * 64)
    with pytest.raises(ConfigError, match=r"neither .*d\.json nor .*d\.idx"):
        make_plan({**CPU, "grid": [{"model": "tiny-gpt", "dataset": str(tmp_path / "d")}]})
    (tmp_path / "d.json").write_text('{"dtype": "uint16"}')
    assert make_plan({**CPU, "grid": [{"model": "tiny-gpt", "dataset": str(tmp_path / "d")}]}).cells
