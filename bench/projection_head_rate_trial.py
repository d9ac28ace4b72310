"""A model change tried and not adopted: a rate of its own for the output head's GEMM FLOPs (docs/projection.md,
"What is still assumed"). Runs the leave-one-configuration-out validation of bench/projection_validation.py with the
change made in memory, so that its numbers can be set beside the committed model's:

    python bench/projection_head_rate_trial.py > head-rate-trial.log      # CPU, ~25 s
    python bench/projection_validation.py > validation.log                 # the committed model, to compare

The change: a work feature ``head_flops`` (the head's linear FLOPs on the last stage, also inside ``dense_flops``)
in the GEMM/attention category, so a stage holding the head may be slower per FLOP than the layers. What it stands
in for: the bottleneck stage of a pipeline runs at the power cap at a lower clock than the others. Prints what
bench/projection_validation.py prints; never asserts, writes nothing unless given its ``--out``/``--table``.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import calorimeter.plan.work as work  # noqa: E402
import calorimeter.projection.compute as compute  # noqa: E402

_stage_work = work.stage_work


def _with_head_flops(cell, m, stage, layers):  # noqa: ANN001, ANN202 (the signature of plan.work.stage_work)
    st = _stage_work(cell, m, stage, layers)
    frozen = 1.0 if cell.adapter_rank is not None else 0.0  # LoRA: the frozen head computes no weight gradient
    logits = st.features["head_elems"] + st.features["head_elems_vp"]  # per rank, all micro-batches
    st.features["head_flops"] = 2.0 * m.hidden_size * (3.0 - frozen) * logits
    return st


work.stage_work = _with_head_flops  # plan.work.workload looks it up at call time
compute.CATEGORY_FEATURES["gemm_attention"] = (*compute.CATEGORY_FEATURES["gemm_attention"], "head_flops")
print("trial: projection with a GEMM rate of its own for the output head's FLOPs (not the committed model)")
sys.argv = [str(ROOT / "bench" / "projection_validation.py"), *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
