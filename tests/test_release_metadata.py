"""The release metadata agree: one version in pyproject.toml, the package, CITATION.cff, .zenodo.json and the
newest release of CHANGELOG.md; the software is cited by its authorship, the study it reproduces separately."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import yaml

import calorimeter

ROOT = Path(__file__).resolve().parents[1]


def test_one_version_and_one_authorship_everywhere() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    zenodo = json.loads((ROOT / ".zenodo.json").read_text())
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d\d-\d\d)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert calorimeter.__version__ == version == str(cff["version"]) == zenodo["version"] == releases[0][0]
    assert str(cff["date-released"]) == zenodo["publication_date"] == releases[0][1]
    assert f"git tag `v{version}`" in (ROOT / "CHANGELOG.md").read_text()
    authors = [a.get("name") or f"{a['given-names']} {a['family-names']}" for a in cff["authors"]]
    assert authors == [c["name"] for c in zenodo["creators"]]
    assert not any("contributors" in a.lower() for a in authors)  # a placeholder is no authorship
    study = cff["references"][0]
    assert "arXiv:2509.10371" in {i["value"] for i in study["identifiers"]}
    assert {"identifier": "arXiv:2509.10371", "relation": "references", "scheme": "arxiv",
            "resource_type": "publication-conferencepaper"} in zenodo["related_identifiers"]
