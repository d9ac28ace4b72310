"""Hardened input: every class of bad input is refused before anything runs, with a short message naming the file,
the line where known, the key and the value (and the nearest valid key), never a traceback or megabytes of echo."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SWEEPS, run_cli

from calorimeter.launch import submit
from calorimeter.launch.sbatch import SbatchValueError, check_sbatch_parameters
from calorimeter.launch.settings import launcher_settings
from calorimeter.plan import ConfigError, make_plan, plan_file
from calorimeter.plan.cell import Cell
from calorimeter.plan.config import load_config, validate_config
from calorimeter.plan.grid import MAX_CELLS
from calorimeter.plan.yamlfile import MAX_VALUES
from calorimeter.records.paths import CellPaths

REFERENCE = ROOT / "results" / "reference" / "h200x2-2026-11-21"
GOOD = """sweep: t
hardware: cpu
defaults:
  global_batch: 8
  micro_batch: 2
grid:
  - model: tiny-gpt
    gpus_per_node: [1, 2]
"""


def _file(tmp_path: Path, text: str | bytes, name: str = "sweep.yaml") -> Path:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        plan_file(path)
    return str(e.value)


# ---------------------------------------------------------------------------------------------------------------
# the YAML file itself


def test_a_good_file_plans(tmp_path: Path) -> None:
    plan = plan_file(_file(tmp_path, GOOD))
    assert [c.cell.gpus_per_node for c in plan.cells] == [1, 2]


def test_not_utf8_is_refused_with_line_and_byte(tmp_path: Path) -> None:
    msg = _error(_file(tmp_path, GOOD.replace("tiny-gpt", "tiny-gpt # caf\xe9").encode("latin-1")))
    assert "sweep.yaml:7: not UTF-8 (byte 0xe9" in msg


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    msg = _error(_file(tmp_path, GOOD + "  - model: tiny-llama\n    micro_batch: 1\n    micro_batch: 4\n"))
    assert "sweep.yaml:11: key 'micro_batch' given twice in one mapping (first at line 10)" in msg
    msg = _error(_file(tmp_path, "sweep: a\n" + GOOD))
    assert "sweep.yaml:2: key 'sweep' given twice" in msg


def test_merge_keys_may_override(tmp_path: Path) -> None:
    text = GOOD + "  - &blk {model: tiny-llama, micro_batch: 1}\n  - {<<: *blk, micro_batch: 2}\n"
    cells = [c.cell for c in plan_file(_file(tmp_path, text)).cells]
    assert [(c.model, c.micro_batch) for c in cells[2:]] == [("tiny-llama", 1), ("tiny-llama", 2)]


def test_alias_expansion_beyond_the_bound_is_refused_fast_and_short(tmp_path: Path) -> None:
    laughs = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    msg = _error(_file(tmp_path, GOOD + "\n".join(laughs) + "\n"))  # 9^10 values if expanded
    assert f"(the bound is {MAX_VALUES:,})" in msg and "sweep.yaml:" in msg and len(msg) < 400


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    assert "refers to the value that contains it" in _error(_file(tmp_path, GOOD + "x: &x [1, *x]\n"))


def test_a_huge_file_is_refused_before_parsing(tmp_path: Path) -> None:
    msg = _error(_file(tmp_path, GOOD + "#" * (2 << 20) + "\n"))
    assert "a sweep file is at most" in msg and len(msg) < 200


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    msg = _error(_file(tmp_path, GOOD + "  - {model: tiny\n"))
    assert "sweep.yaml:" in msg and "not valid YAML" in msg


# ---------------------------------------------------------------------------------------------------------------
# values


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_numbers_must_be_finite(tmp_path: Path, value: str) -> None:
    msg = _error(_file(tmp_path, GOOD + f"    lr: {value}\n"))
    assert "sweep.yaml:9: grid[0].lr:" in msg and "is not a finite number" in msg


def test_integers_written_as_floats_never_reach_a_cell_id(tmp_path: Path) -> None:
    msg = _error(_file(tmp_path, GOOD.replace("global_batch: 8", "global_batch: 8.0")))
    assert "sweep.yaml:4: defaults.global_batch: 8.0 is not an integer (write 8)" in msg
    msg = _error(_file(tmp_path, GOOD.replace("[1, 2]", "[1, 2.0]")))
    assert "grid[0].gpus_per_node" in msg
    with pytest.raises(ConfigError, match="is not an integer"):
        make_plan({"sweep": "t", "hardware": "cpu", "grid": [{"model": "tiny-gpt", "seq_len": 64.0}]})


def test_unknown_keys_suggest_the_nearest_one(tmp_path: Path) -> None:
    msg = _error(_file(tmp_path, GOOD.replace("micro_batch: 2", "micro_bach: 2")))
    assert "sweep.yaml:5: defaults: unknown key 'micro_bach' (did you mean 'micro_batch'?)" in msg, msg
    msg = _error(_file(tmp_path, GOOD.replace("model: tiny-gpt", "model: tiny-gtp")))
    assert "sweep.yaml:7: grid[0].model: unknown model 'tiny-gtp' (did you mean 'tiny-gpt'?)" in msg
    msg = _error(_file(tmp_path, GOOD.replace("hardware: cpu", "hardware: h2000")))
    assert "sweep.yaml:2: grid[0].hardware: unknown hardware 'h2000' (did you mean 'h200'?)" in msg


def test_messages_never_echo_megabytes(tmp_path: Path) -> None:
    big = "x" * 500_000
    for text in (GOOD.replace("tiny-gpt", big), GOOD.replace("micro_batch: 2", f"{big}: 2"),
                 GOOD.replace("[1, 2]", f"'{big}'")):
        msg = _error(_file(tmp_path, text))
        assert len(msg) < 1000, msg[:300]


@pytest.mark.parametrize(("value", "expected"), [
    ("''", "results_dir: empty"),
    ("/", "is the file system root"),
    ("/tmp/../", "is the file system root"),
    ("'res/{sweep}'", "contains braces"),
])
def test_results_dir_refused(tmp_path: Path, value: str, expected: str) -> None:
    msg = _error(_file(tmp_path, GOOD + f"results_dir: {value}\n"))
    assert "sweep.yaml:9: results_dir" in msg and expected in msg


def test_results_dir_tilde_is_the_home_folder_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    plan = plan_file(_file(tmp_path, GOOD + "results_dir: ~/results\n"))
    assert plan.results_dir == str(tmp_path / "home" / "results")


# ---------------------------------------------------------------------------------------------------------------
# values that reach a job script


@pytest.mark.parametrize(("launcher", "expected"), [
    ({"slurm": {"partition": "gpu\nrm -rf ~"}}, "launcher.slurm.partition: 'gpu\\nrm -rf ~' contains a control"),
    ({"slurm": {"account": "a\rb"}}, "launcher.slurm.account"),
    ({"slurm": {"setup": ["module load x\ntouch /tmp/pwned"]}}, "launcher.slurm.setup[0]"),
    ({"slurm": {"extra": {"reservation": "r\n#SBATCH --x"}}}, "launcher.slurm.extra.reservation"),
    ({"slurm": {"extra": {"bad name": "x"}}}, "is not an sbatch option name"),
    ({"slurm": {"constraint": "H200\t"}}, "launcher.slurm.constraint"),
])
def test_control_characters_never_reach_sbatch_lines_from_the_sweep(launcher: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_plan({"sweep": "t", "hardware": "cpu", "launcher": launcher, "grid": [{"model": "tiny-gpt"}]})
    assert expected in str(e.value)


@pytest.mark.parametrize(("resources", "expected"), [
    ({"slurm_partition": "gpu\n#SBATCH --uid=0"}, "sbatch --partition: 'gpu\\n#SBATCH --uid=0' contains the "
                                                   "control character '\\n' at position 3"),
    ({"slurm_qos": "a\x00"}, "sbatch --qos"),
    ({"slurm_account": "x\x1b[31m"}, "sbatch --account"),
])
def test_control_characters_never_reach_sbatch_lines_from_the_profile(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path, resources: dict,
                                                                      expected: str) -> None:
    monkeypatch.setattr(submit.slurm_cli, "available", lambda: True)
    monkeypatch.setattr(submit.slurm_cli, "node_cpus", lambda partition=None: None)  # no sinfo
    cell = Cell(sweep="s", model="tiny-gpt", hardware="cpu", nodes=1, gpus_per_node=1)
    with pytest.raises(submit.CellConfigError) as e:
        submit.launch_cell(cell, launcher_settings(validate_config({"launcher": {"executor": "slurm"}}), resources),
                           CellPaths(tmp_path / "c"))
    assert expected in str(e.value)
    assert not (tmp_path / "c").exists()  # nothing submitted


def test_sbatch_check_accepts_real_values() -> None:
    params = {"job_name": "tiny_cpu-1x1", "partition": "gpu", "constraint": "H200&ib", "time": 60,
              "setup": ["module load cuda/12.4", "export X='a b'"],
              "additional_parameters": {"open-mode": "append", "reservation": "study", "nice": 10}}
    assert check_sbatch_parameters(params) is params
    with pytest.raises(SbatchValueError, match="setup\\[1\\]"):
        check_sbatch_parameters({"setup": ["ok", "a\nb"]})


@pytest.mark.parametrize(("resources", "expected"), [
    ({"runtime": "ten"}, "resource runtime of rule train"),
    ({"slurm_mem_gb": "inf"}, "resource slurm_mem_gb"),
    ({"cpus_per_task": "-2"}, "resource cpus_per_task"),
])
def test_profile_numbers_are_checked(resources: dict, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        launcher_settings(validate_config({}), resources)


# ---------------------------------------------------------------------------------------------------------------
# subsets and grid size


def _subset(tmp_path: Path, where: dict, name: str = "sub.yaml", base: str = "base.yaml", extra: str = "") -> Path:
    _file(tmp_path, GOOD, base) if not (tmp_path / base).exists() else None
    return _file(tmp_path, f"subset_of: {base}\nwhere: {json.dumps(where)}\n{extra}", name)


def test_a_subset_has_its_own_plan_and_tables_but_shares_the_cells(tmp_path: Path) -> None:
    plan = plan_file(_subset(tmp_path, {"gpus_per_node": 2}))
    assert plan.sweep == "sub" and [c.cell.sweep for c in plan.cells] == ["t"]
    (tmp_path / "base.yaml").write_text(GOOD + f"results_dir: {tmp_path / 'r'}\n")
    assert plan_file(tmp_path / "sub.yaml").results_dir == str(tmp_path / "r")  # where its cells are
    par = plan_file(SWEEPS / "h200-parallelism.yaml")
    assert par.sweep == "h200-parallelism" and {c.cell.sweep for c in par.cells} == {"h200-optimization"}


def test_a_subset_that_matches_nothing_is_refused(tmp_path: Path) -> None:
    msg = _error(_subset(tmp_path, {"gpus_per_node": 4}))
    assert "sub.yaml:2: where {'gpus_per_node': 4} matches none of the 2 cells of base.yaml" in msg
    assert "gpus_per_node there: 1, 2" in msg


def test_a_subset_with_an_unknown_key_suggests_one(tmp_path: Path) -> None:
    assert "unknown key 'gpus_per_nod' (did you mean 'gpus_per_node'?)" in _error(
        _subset(tmp_path, {"gpus_per_nod": 2}))


def test_subset_loops_and_missing_bases_are_refused(tmp_path: Path) -> None:
    _file(tmp_path, "subset_of: b.yaml\nwhere: {}\n", "a.yaml")
    _file(tmp_path, "subset_of: a.yaml\nwhere: {}\n", "b.yaml")
    assert "leads back to itself (a.yaml -> b.yaml -> a.yaml)" in _error(tmp_path / "a.yaml")
    assert "leads back to itself" in _error(_file(tmp_path, "subset_of: self.yaml\n", "self.yaml"))
    assert "subset_of: 'nope.yaml' does not exist" in _error(_file(tmp_path, "subset_of: nope.yaml\n", "c.yaml"))


def test_a_subset_named_like_its_base_is_refused(tmp_path: Path) -> None:
    assert "give it another name" in _error(_subset(tmp_path, {"gpus_per_node": 2}, extra="sweep: t\n"))


def test_an_unnamed_sweep_file_is_named_after_the_file(tmp_path: Path) -> None:
    assert plan_file(_file(tmp_path, GOOD.replace("sweep: t\n", ""), "my-sweep.yaml")).sweep == "my-sweep"


def test_a_grid_beyond_the_bound_is_refused_before_expanding(tmp_path: Path) -> None:
    lists = "\n".join(f"    {k}: {list(range(1, 101))}" for k in ("micro_batch", "global_batch", "seq_len", "seed"))
    msg = _error(_file(tmp_path, GOOD + lists + "\n"))  # 2 x 100^4 = 2e8 cells if it were expanded
    assert "sweep.yaml:7: the grid expands to 200,000,000 cells" in msg
    assert f"more than the {MAX_CELLS:,}" in msg and "gpus_per_node 2 x micro_batch 100" in msg


# ---------------------------------------------------------------------------------------------------------------
# the command line


def test_cli_messages_for_bad_input_and_missing_inputs(tmp_path: Path) -> None:
    bad = _file(tmp_path, GOOD + "    micro_batch: 1\n    micro_batch: 2\n")
    r = run_cli("plan", str(bad))
    assert r.returncode == 2 and "given twice" in r.stderr and "Traceback" not in r.stderr
    good = _file(tmp_path, GOOD + f"results_dir: {tmp_path / 'res'}\n", "good.yaml")
    r = run_cli("figure", str(good))  # a figure before aggregation
    assert r.returncode == 2 and "does not exist yet: run `calorimeter aggregate" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("run-cell", str(good), "tiny-gpt_cpu-1x1_tp1-pp1-dp1_z1_rc-none_ov-off_mb2-gb8-s128")
    assert r.returncode == 2 and "did you mean 'tiny-gpt_cpu-1x1_tp1-pp1-dp1_z1_rc-none_ov-off_mb2-gb8-s128_fp32'" \
        in r.stderr, r.stderr


def test_load_config_keeps_where_each_key_was(tmp_path: Path) -> None:
    cfg = load_config(_file(tmp_path, GOOD))
    assert cfg["_lines"]["grid[0].gpus_per_node"].endswith("sweep.yaml:8")


# ---------------------------------------------------------------------------------------------------------------
# damaged records: skipped with a note naming the cell and the file, the healthy cells still counted


@pytest.fixture
def shipped_cells(tmp_path: Path) -> Path:
    """A copy of a few real recorded cells (the shipped 2x H200 default sweep), to damage."""
    cells = sorted(p.parent for p in REFERENCE.glob("default/cells/*/run.json"))
    assert len(cells) >= 2
    out = tmp_path / "cells"
    for c in cells[:3]:
        shutil.copytree(c, out / c.name, symlinks=True, ignore=shutil.ignore_patterns("attempts", "latest"))
    return out


def test_damaged_records_are_left_out_with_a_note(shipped_cells: Path) -> None:
    from calorimeter.analysis.damaged import readable_cell_tables

    a, b, *_ = sorted(shipped_cells.iterdir())
    (a / "run.json").write_text('{"cell": {"cell_id": ')                   # truncated JSON
    (b / "steps.parquet").write_bytes(b"not parquet at all")
    ta, na = readable_cell_tables(a)
    assert ta.runs.at[0, "status"] == "corrupt" and na == [
        f"{a.name}/run.json: not JSON (Expecting value: line 1 column 22 (char 21)); the cell is left out of the "
        "tables"]
    tb, nb = readable_cell_tables(b)
    assert tb.runs.at[0, "status"] == json.loads((b / "run.json").read_text())["status"]
    assert nb == [f"{b.name}/steps.parquet: not a Parquet file; left out"]
    assert "steps.parquet: not a Parquet file" in tb.runs.at[0, "data_notes"]
    tele = b / "telemetry.parquet"
    if tele.is_file():  # a telemetry table missing a column
        df = pd.read_parquet(tele)
        df.drop(columns=[c for c in ("time_s", "gpu_index") if c in df]).to_parquet(tele)
        tb, nb = readable_cell_tables(b)
        assert any(n.startswith(f"{b.name}/telemetry.parquet: unusable") for n in nb), nb
    before = {p: p.read_bytes() for p in shipped_cells.rglob("*") if p.is_file()}
    readable_cell_tables(a), readable_cell_tables(b)
    assert before == {p: p.read_bytes() for p in shipped_cells.rglob("*") if p.is_file()}  # nothing rewritten


@pytest.mark.integration
def test_snakemake_configfile_errors_name_the_file(tmp_path: Path) -> None:
    """A --configfile is read again strictly by the workflow: what Snakemake's own loading lets through (a key
    given twice inside the grid, aliases expanding a list, NaN) is refused with file, line and key; what it stops
    itself (not UTF-8, aliases expanding mappings) is documented in docs/slurm.md "Bad input"."""
    import subprocess
    import sys

    head = f"results_dir: {tmp_path / 'res'}\n"
    cases = {
        "dup.yaml": (head + GOOD + "    gpus_per_node: 1\n", "dup.yaml:10: key 'gpus_per_node' given twice"),
        "nan.yaml": (head + GOOD + "    lr: .nan\n", "nan.yaml:10: grid[0].lr: nan is not a finite number"),
        "typo.yaml": (head + GOOD.replace("micro_batch", "micro_bach"),
                      "typo.yaml:6: defaults: unknown key 'micro_bach' (did you mean 'micro_batch'?)"),
    }
    for name, (text, expected) in cases.items():
        r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--nolock", "--configfile",
                            str(_file(tmp_path, text, name))], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=300)
        out = r.stdout + r.stderr
        assert r.returncode != 0 and expected in out, out[-3000:]
    assert not (tmp_path / "res").exists()


@pytest.mark.integration
def test_figures_are_drawn_without_the_damaged_records(tmp_path: Path) -> None:
    """`snakemake figures` on the shipped 2x H200 records, one run.json truncated and one telemetry table missing a
    column: exit 0, both named on the terminal, the healthy cells in the tables and figures, nothing rewritten."""
    import subprocess
    import sys

    data = tmp_path / "ref"
    shutil.copytree(REFERENCE, data, ignore=shutil.ignore_patterns("tables"))
    cells = data / "gpu-llama8b" / "cells"
    bad_json = cells / "llama3-8b_h200-1x2_tp1-pp1-dp2_z3_rc-full_ov-on_mb1-gb8-s8192"
    bad_tele = cells / "llama3-8b_h200-1x2_tp1-pp1-dp2_z3_rc-none_ov-on_mb1-gb8-s8192"
    (bad_json / "run.json").write_text((bad_json / "run.json").read_text()[:300])
    pd.read_parquet(bad_tele / "telemetry.parquet").drop(columns=["time_s"]).to_parquet(bad_tele / "telemetry.parquet")
    before = {p: p.read_bytes() for p in (bad_json / "run.json", bad_tele / "telemetry.parquet")}
    r = subprocess.run([sys.executable, "-m", "snakemake", "figures", "--configfile",
                        str(ROOT / "config" / "reference" / "h200x2-llama8b.yaml"), "--config", f"results_dir={data}"],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True,
                       timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert f"damaged record: {bad_json.name}/run.json: not JSON" in out
    assert f"damaged record: {bad_tele.name}/telemetry.parquet: unusable (KeyError: 'time_s')" in out
    runs = pd.read_parquet(data / "gpu-llama8b" / "tables" / "runs.parquet").set_index("cell_id")
    assert runs.loc[bad_json.name, "status"] == "corrupt" and "run.json: not JSON" in runs.loc[bad_json.name, "reason"]
    assert runs.loc[bad_json.name, "model"] == "llama3-8b"  # parameters from the plan
    assert runs.loc[bad_tele.name, "status"] == "ok" and runs.loc[bad_tele.name, "mfu_full"] > 0.5
    assert "telemetry.parquet: unusable" in runs.loc[bad_tele.name, "data_notes"]
    assert (data / "gpu-llama8b" / "figures" / "throughput.png").stat().st_size > 10_000
    assert before == {p: p.read_bytes() for p in before}
    # deleting a cell's record reruns that cell (and only it), although the sweep's tables exist
    (bad_json / "run.json").unlink()
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile",
                        str(ROOT / "config" / "reference" / "h200x2-llama8b.yaml"), "--config", f"results_dir={data}"],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True,
                       timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and set(re.findall(r"^Job \d+: train (\S+)", out, re.M)) == {bad_json.name}, out[-3000:]


@pytest.mark.integration
def test_a_subset_never_rewrites_its_base_sweeps_plan_or_tables(tmp_path: Path) -> None:
    import subprocess
    import sys

    res = tmp_path / "res"
    base = _file(tmp_path, GOOD + f"results_dir: {res}\n", "base.yaml")
    sub = _file(tmp_path, "subset_of: base.yaml\nwhere: {gpus_per_node: 2}\n", "sub.yaml")

    def figures(cfg: Path) -> None:
        r = subprocess.run([sys.executable, "-m", "snakemake", "figures", "--configfile", str(cfg)], cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]

    figures(base)
    kept = {p: p.read_bytes() for p in (res / "t").rglob("*") if p.is_file() and "logs" not in p.parts}
    figures(sub)
    assert kept == {p: p.read_bytes() for p in kept}  # the base sweep's plan, tables, figures: untouched
    assert [c["gpus_per_node"] for c in json.loads((res / "sub" / "plan.json").read_text())["cells"]] == [2]
    assert len(pd.read_parquet(res / "sub" / "tables" / "runs.parquet")) == 1
    assert not (res / "sub" / "cells").exists()  # its cells are the base sweep's
