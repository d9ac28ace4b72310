"""The peers' layouts: bench/peers/titan_llama3.py (what it asks torchtitan for, and text that every data-parallel
rank can read: one document sharded over 4 ranks left 3 of them without data, and the peer never reached its first
step) and bench/peers/megatron_gpt.py (what Megatron-core is asked for)."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"num_attention_heads": 32, "num_query_groups": 8}


@functools.cache
def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_peer", ROOT / "bench" / "peers" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _peer() -> ModuleType:
    return _load("titan_llama3")


def _args(*argv: str):
    args, rest = _peer().parse(list(argv))
    return args


def test_layouts_and_their_local_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _peer()
    monkeypatch.setenv("TITAN_COMPILE", "1")
    assert p.layout(_args(), 4, 1, 8, SPEC) == {"dp": 4, "local_batch": 1}  # FSDP2: 2 micro-batches accumulated
    assert p.layout(_args("--tp", "4", "--async-tp"), 4, 1, 32, SPEC) == {"dp": 1, "local_batch": 1}
    # a pipeline's local batch is the global batch over dp, cut into micro-batches of the cell's micro-batch
    assert p.layout(_args("--pp", "4", "--pp-schedule", "Interleaved1F1B"), 4, 1, 8, SPEC) == {"dp": 1,
                                                                                               "local_batch": 8}
    assert p.layout(_args("--pp", "2"), 4, 1, 32, SPEC) == {"dp": 2, "local_batch": 16}
    refused = {"--tp 3": "does not divide the 4 ranks", "--tp 16": "does not divide 32 heads",
               "--pp 1": "global batch 6 is not a multiple"}
    for argv, why in refused.items():
        with pytest.raises(SystemExit, match=why):
            p.layout(_args(*argv.split()), 16 if "16" in argv else 4, 1, 6 if "--pp" in argv else 8, SPEC)
    monkeypatch.setenv("TITAN_COMPILE", "0")
    with pytest.raises(SystemExit, match="--async-tp needs"):
        p.layout(_args("--tp", "2", "--async-tp"), 4, 1, 8, SPEC)
    with pytest.raises(SystemExit, match="128 data-parallel ranks but 64 documents"):
        p.layout(_args(), 128, 1, 128, SPEC)


def test_job_config_carries_the_layout(tmp_path: Path) -> None:
    p = _peer()
    args, rest = p.parse(["--tp", "2", "--pp", "2", "--pp-schedule", "ZBVZeroBubble", "--training.seed", "3"])
    assert rest == ["--training.seed", "3"]  # torchtitan's own flags pass through
    cfg = tomllib.loads(p.job_toml(tmp_path / "tok", tmp_path / "data", tmp_path / "dump", 8192, 1, 32, 9, True,
                                   args, 16, 360))
    par = cfg["parallelism"]
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["pipeline_parallel_schedule"],
            par["pipeline_parallel_microbatch_size"], par["data_parallel_shard_degree"]) == (2, 2, "ZBVZeroBubble",
                                                                                              1, -1)
    assert cfg["training"]["local_batch_size"] == 16 and cfg["training"]["global_batch_size"] == 32
    assert cfg["comm"]["init_timeout_seconds"] == 360 and cfg["compile"]["enable"] is True
    assert cfg["job"]["dump_folder"] == str(tmp_path / "dump") and cfg["checkpoint"]["enable"] is False


def test_every_data_parallel_rank_gets_documents_longer_than_a_window(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenizers import Tokenizer

    p = _peer()
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    tok_dir, data_dir = p._assets(128256)
    docs = [json.loads(line)["text"] for line in (data_dir / "train.jsonl").read_text().splitlines()]
    assert len(docs) == p.DOCUMENTS >= 8  # datasets' split_dataset_by_node gives each of dp ranks len/dp of them
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    lengths = [len(ids) for ids in (e.ids for e in tok.encode_batch(docs[:4]))]
    assert min(lengths) > 8192 + 1, lengths  # a window of the reference cells spans at most two documents
    assert p._assets(128256) == (tok_dir, data_dir)  # made once per rank


def test_megatron_layouts() -> None:
    mg = _load("megatron_gpt")
    spec = {**SPEC, "num_layers": 16}
    assert mg.layout(mg.parse([]), 4, spec, 1, 32) == {"dp": 4, "micro_batches": 8}
    assert mg.layout(mg.parse(["--pp", "4", "--vpp", "2"]), 4, spec, 1, 32) == {"dp": 1, "micro_batches": 32}
    assert mg.layout(mg.parse(["--tp", "2", "--sp"]), 4, spec, 1, 8) == {"dp": 2, "micro_batches": 4}
    refused = {("--vpp", "2"): "--vpp needs --pp > 1", ("--sp",): "--sp needs --tp > 1",
               ("--pp", "4", "--vpp", "8"): "16 layers do not split into pp 4 x vpp 8",
               ("--tp", "3"): "does not divide the 4 ranks"}
    for argv, why in refused.items():
        with pytest.raises(SystemExit, match=why):
            mg.layout(mg.parse(list(argv)), 4, spec, 1, 32)
    with pytest.raises(SystemExit, match=r"interleaved 1F1B needs micro-batches a step \(6\) to be a multiple of pp 4"):
        mg.layout(mg.parse(["--pp", "4", "--vpp", "2"]), 4, spec, 1, 6)
