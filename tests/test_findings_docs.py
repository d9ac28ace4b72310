"""Nothing about findings is copied by hand: every tally and number about findings in README.md, docs/findings.md and
the set READMEs is a generated region (calorimeter.analysis.findings_docs), and the committed findings tables are
what the current catalogue says; both fail here when they drift."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from calorimeter.analysis import findings_docs as fd
from calorimeter.analysis.reevaluate import main, reevaluate
from calorimeter.findings import CATALOG_VERSION
from calorimeter.findings.stats import CANNOT_SAY

REFERENCE = ROOT / "results" / "reference"


@pytest.fixture(scope="module")
def built() -> tuple[list, fd.Generated]:
    changes = reevaluate(REFERENCE, ROOT / "config" / "reference")
    return changes, fd.Generated.build(changes, REFERENCE)


def test_generated_regions_of_the_docs_are_current(built) -> None:
    _, gen = built
    files = fd.doc_files(ROOT, REFERENCE)
    assert ROOT / "README.md" in files and ROOT / "docs" / "findings.md" in files
    assert len(files) > 2  # set READMEs
    stale = fd.stale_regions(files, gen)
    assert not stale, f"run python -m calorimeter.analysis.reevaluate results/reference --markdown: {stale}"


def test_committed_findings_tables_are_the_current_catalogue(built) -> None:
    changes, _ = built
    for ch in changes:
        assert ch.old_version == CATALOG_VERSION, ch.folder
        assert ch.changed().empty, (ch.folder, ch.changed())


def test_the_reviewed_rows_read_what_their_evidence_carries(built) -> None:
    """The H100 one-GPU recomputation row is not a data-parallel verdict; LoRA's 1.86x is the study's efficiency,
    never judged against 10x on one GPU; the machine-level asymmetry counts machines."""
    changes, gen = built
    by = {str(ch.folder.relative_to(REFERENCE)): ch.new.set_index("finding") for ch in changes}
    h100 = by["findings-steady-2026-11-25/h100x1-findings-steady"].loc["recompute_more_throttling_dp"]
    assert h100["verdict"] == CANNOT_SAY and "dp >= 2" in h100["why"]
    lora = by["findings-steady-2026-11-25/h200x1-findings-steady"].loc["lora_efficiency_10x"]
    assert (lora["verdict"], lora["undecided"]) == (CANNOT_SAY, "regime")
    assert "not tokens per joule" in lora["definition"] and "tokens per joule" in lora["detail"]
    asym = gen.machines.set_index("finding").loc["gpus_thermally_asymmetric"]
    assert asym["experimental_unit"] == "machines" and asym["n_machines"] >= 7 and asym["dof"] == asym["n_machines"] - 1


def test_regions_are_written_and_drift_is_caught(tmp_path: Path, built) -> None:
    _, gen = built
    begin, end = fd.BEGIN.format(key="findings-tally"), fd.END.format(key="findings-tally")
    doc = tmp_path / "README.md"
    doc.write_text(f"# x\n\nbefore\n{begin}\nhand-written 6 agrees / 2 partly\n{end}\nafter\n")
    assert fd.stale_regions([doc], gen) == [(doc, "findings-tally")]
    assert fd.write_regions([doc], gen) == [doc]
    text = doc.read_text()
    assert "hand-written" not in text and "before\n" in text and text.endswith("after\n")
    assert fd.tally(gen.rows()) in text and fd.stale_regions([doc], gen) == []
    doc.write_text(text.replace(" agrees", " agree", 1))  # a hand edit inside the region
    assert fd.stale_regions([doc], gen) == [(doc, "findings-tally")]
    doc.write_text(f"{fd.BEGIN.format(key='no-such-region')}\n{fd.END.format(key='no-such-region')}\n")
    with pytest.raises(KeyError, match="no-such-region"):
        fd.stale_regions([doc], gen)


def test_check_exits_nonzero_on_drift(tmp_path: Path, capsys) -> None:
    ref = tmp_path / "ref"
    ref.mkdir()
    (tmp_path / "README.md").write_text(f"{fd.BEGIN.format(key='findings-tally')}\nstale\n"
                                        f"{fd.END.format(key='findings-tally')}\n")
    args = [str(ref), "--config-dir", str(tmp_path), "--docs-root", str(tmp_path)]
    assert main([*args, "--check"]) == 1 and "not current" in capsys.readouterr().out
    assert main([*args, "--markdown"]) == 0 and main([*args, "--check"]) == 0
