"""Link byte counters against the pipeline's known transfers, on the shipped GPU records."""

from __future__ import annotations

import pytest
from conftest import ROOT

from calorimeter.analysis.links import pipeline_link_check, pipeline_rx_bytes
from calorimeter.analysis.tables import read_tables

REFERENCE = ROOT / "results" / "reference"


def test_pipeline_rx_bytes_from_cell_parameters() -> None:
    cell = dict(model="llama3-8b", pp=4, tp=1, dp=1, micro_batch=1, global_batch=8, seq_len=8192, precision="bf16",
                measured_steps=4, sequence_parallel=False)
    one = 8 * 4 * 8192 * 4096 * 2  # micro-batches x steps x activation bytes
    assert [pipeline_rx_bytes(cell, s) for s in range(4)] == [one, 2 * one, 2 * one, one]
    sp = {**cell, "tp": 2, "sequence_parallel": True}
    assert pipeline_rx_bytes(sp, 0) == one / 2  # sequence parallel: each tp rank holds seq / tp
    assert pipeline_rx_bytes({**cell, "pp": 1}, 0) == 0.0


@pytest.mark.parametrize("folder", ["h200x4-2026-11-21/h200x4-parallelism", "h200x8-2026-11-21/h200x8-parallelism"])
def test_nvlink_counters_match_the_pipeline_transfers_pcie_does_not(folder: str) -> None:
    t = read_tables(REFERENCE / folder / "tables", ("runs", "gpus"))
    chk = pipeline_link_check(t["runs"], t["gpus"])
    assert len(chk) >= 8
    assert chk["nvlink_ratio"].between(0.999, 1.001).all(), chk  # NVLink: the known transfers, to 0.1%
    middle = chk[chk["expected_rx_bytes"] > chk["expected_rx_bytes"].min()]
    # PCIe: 3x-14x more than the whole pipeline traffic on middle stages (which moves over NVLink): not a transfer
    # volume of this training (docs/findings.md, "PCIe byte counters")
    assert (middle["pcie_rx_bytes"] > 2.5 * middle["expected_rx_bytes"]).all()
