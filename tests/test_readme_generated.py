"""The README's numbers come from the committed tables (docs/expected-readme.yaml, the generator docs/artifact.md's
numbers use), and its top is short: what it is, the two commands, where the results are."""

from __future__ import annotations

import yaml
from conftest import ROOT

from calorimeter.reproduce.expected import MARKER, drift, render


def test_readme_numbers_are_the_tables_and_its_top_is_short() -> None:
    text = (ROOT / "README.md").read_text()
    texts = render(ROOT, yaml.safe_load((ROOT / "docs" / "expected-readme.yaml").read_text()))
    assert drift(text, texts) == [], "run `python -m calorimeter.reproduce.expected README.md --spec " \
        "docs/expected-readme.yaml --write`"
    assert len(MARKER.findall(text)) == len(texts) >= 4
    top = text.split("\n## ", 1)[0]
    assert len(top.splitlines()) <= 25 and "make run" in top and "results/default/" in top
