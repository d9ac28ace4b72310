"""Write the CPU dry-run variant of a GPU sweep file: same grid shape (blocks, layouts, knobs, repetitions, GPU
counts as CPU ranks, global and micro-batches), with a tiny model of the same family on CPU ranks.

Usage: python bench/gpu/cpu_variant.py config/reference/h200x2-findings.yaml > /tmp/dry.yaml
then   snakemake --configfile /tmp/dry.yaml --config results_dir=/tmp/dry
"""

from __future__ import annotations

import sys

import yaml

from calorimeter.plan.config import read_sweep_file
from calorimeter.plan.models import get_model

TINY = {"gpt": "tiny-gpt", "llama": "tiny-llama", "mixtral": "tiny-mixtral"}
CPU_SEQ = 128


def cpu_variant(config: dict) -> dict:
    """The same sweep on CPU ranks with tiny models (sweep name suffixed ``-cpu``)."""
    c = yaml.safe_load(yaml.safe_dump(config))  # deep copy
    c["sweep"] = f"{c.get('sweep', 'sweep')}-cpu"
    c["hardware"] = "cpu"
    c["compare"] = [f"{s}-cpu" for s in c.get("compare", [])]
    c.setdefault("launcher", {}).setdefault("timeout_min", 20)
    for block in [c.setdefault("defaults", {}), *c.get("grid", [])]:
        if "model" in block:
            models = block["model"] if isinstance(block["model"], list) else [block["model"]]
            tiny = list(dict.fromkeys(TINY[get_model(m).family] for m in models))
            block["model"] = tiny if len(tiny) > 1 else tiny[0]
        if "hardware" in block:
            block["hardware"] = "cpu"
        if "seq_len" in block:
            block["seq_len"] = CPU_SEQ
        if "precision" in block:
            block["precision"] = "fp32"
    return c


if __name__ == "__main__":
    yaml.safe_dump(cpu_variant(read_sweep_file(sys.argv[1])), sys.stdout, sort_keys=False)  # with its extends
