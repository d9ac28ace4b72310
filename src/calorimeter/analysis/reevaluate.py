"""Re-evaluate committed findings tables with the current catalogue and list the verdicts that changed.

``python -m calorimeter.analysis.reevaluate results/reference`` finds every sweep folder with a ``findings.csv``
and a ``tables/`` folder, evaluates the current catalogue on its tables (with the runs tables of the sweeps its
config names under ``compare:`` that lie beside it), and prints, as Markdown, the verdict tally before and after and
every row whose verdict changed with the new reason. ``--write`` also rewrites ``findings.csv`` (and
``findings.html`` where the folder keeps one): the tables themselves are never touched.

``--markdown`` writes the generated regions of the docs (:mod:`calorimeter.analysis.findings_docs`: the tallies,
every verdict with an interval, the machine-level findings pooled over every set, and what each verdict needs on the
measured noise) into README.md, docs/findings.md and the set READMEs under the root; ``--check`` only says whether
they are current (exit status 1 when a region differs). Numbers about findings in those files come from here only.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from calorimeter.analysis import findings_docs
from calorimeter.analysis.findings_docs import tally
from calorimeter.analysis.tables import read_tables
from calorimeter.findings import CATALOG_VERSION, evaluate
from calorimeter.findings.report import write_findings
from calorimeter.findings.stats import CANNOT_SAY


@dataclass
class Change:
    """The old and new findings tables of one sweep folder."""

    folder: Path
    old: pd.DataFrame
    new: pd.DataFrame

    @property
    def old_version(self) -> int:
        """Catalogue version of the committed table (1: written before versions were recorded)."""
        if "catalog_version" in self.old.columns and self.old["catalog_version"].notna().any():
            return int(self.old["catalog_version"].dropna().iloc[0])
        return 1

    def changed(self) -> pd.DataFrame:
        """Rows whose verdict differs: finding, old verdict, new verdict, new reason (a finding new to the
        catalogue that cannot say is left out)."""
        o = self.old.set_index("finding")["verdict"]
        n = self.new.set_index("finding")
        rows = []
        for f in n.index:
            before = o.get(f, "(new finding)")
            if before != n.loc[f, "verdict"] and not (f not in o.index and n.loc[f, "verdict"] == CANNOT_SAY):
                rows.append({"finding": f, "before": before, "after": n.loc[f, "verdict"],
                             "why": n.loc[f, "why"]})
        return pd.DataFrame(rows, columns=["finding", "before", "after", "why"])


def compare_names(folder: Path, config_dir: Path) -> list[str]:
    """Sweeps the folder's sweep names under ``compare:`` (its config under ``config_dir``, where one exists)."""
    for cfg in sorted(config_dir.glob(f"*{folder.name}*.yaml")):
        data = yaml.safe_load(cfg.read_text()) or {}
        if data.get("sweep", cfg.stem) == folder.name or cfg.stem == folder.name:
            return [str(s) for s in data.get("compare", []) or []]
    return []


def tables_of(folder: Path, config_dir: Path) -> dict[str, pd.DataFrame]:
    """The folder's tables with ``compare`` (the named sweeps beside it) and ``compare_missing``."""
    t = read_tables(folder / "tables")
    names = [s for s in compare_names(folder, config_dir) if s != folder.name]
    found = [folder.parent / s / "tables" / "runs.parquet" for s in names]
    t["compare"] = pd.concat([pd.read_parquet(p) for p in found if p.is_file()], ignore_index=True) \
        if any(p.is_file() for p in found) else pd.DataFrame()
    t["compare_missing"] = pd.DataFrame({"sweep": [s for s, p in zip(names, found, strict=True) if not p.is_file()]})
    return t


def reevaluate(root: Path, config_dir: Path) -> list[Change]:
    """Every sweep folder under ``root`` with a findings table and tables, old and new."""
    out = []
    for csv in sorted(root.rglob("findings.csv")):
        folder = csv.parent
        if not (folder / "tables" / "runs.parquet").is_file():
            continue
        out.append(Change(folder, pd.read_csv(csv), evaluate(tables_of(folder, config_dir))))
    return out


def markdown(changes: list[Change], root: Path) -> str:
    """The report: per folder the tally before and after, then each changed verdict with its new reason."""
    lines = [f"Catalogue version {CATALOG_VERSION} on the committed sets under `{root}`:", "",
             "| set | version before | before | after |", "|---|---|---|---|"]
    for ch in changes:
        lines.append(f"| `{ch.folder.relative_to(root)}` | {ch.old_version} | {tally(ch.old)} | {tally(ch.new)} |")
    for ch in changes:
        diff = ch.changed()
        if diff.empty:
            continue
        lines += ["", f"`{ch.folder.relative_to(root)}`:", "", "| finding | before | after | why (now) |",
                  "|---|---|---|---|"]
        lines += [f"| {r.finding} | {r.before} | {r.after} | {str(r.why).replace('|', '/')} |"
                  for r in diff.itertuples()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, nargs="?", default=Path("results/reference"))
    ap.add_argument("--config-dir", type=Path, default=Path("config/reference"))
    ap.add_argument("--write", action="store_true", help="rewrite findings.csv (and findings.html) in place")
    ap.add_argument("--markdown", action="store_true",
                    help="write the generated regions of README.md, docs/findings.md and the set READMEs")
    ap.add_argument("--check", action="store_true", help="exit 1 when a generated region of the docs is not current")
    ap.add_argument("--docs-root", type=Path, default=Path("."), help="where README.md and docs/ are (default: .)")
    a = ap.parse_args(argv)
    changes = reevaluate(a.root, a.config_dir)
    print(markdown(changes, a.root), end="")
    if a.write:
        for ch in changes:
            html = ch.folder / "findings.html"
            write_findings(ch.new, ch.folder / "findings.csv", html if html.is_file() else None,
                           title=f"Findings: sweep {ch.folder.name}")
    if a.markdown or a.check:
        gen = findings_docs.Generated.build(changes, a.root, a.config_dir)
        files = findings_docs.doc_files(a.docs_root, a.root)
        stale = findings_docs.stale_regions(files, gen)
        if a.check:
            for f, key in stale:
                print(f"not current: {f} ({key}); run python -m calorimeter.analysis.reevaluate {a.root} --markdown")
            return 1 if stale else 0
        for f in findings_docs.write_regions(files, gen):
            print(f"wrote the generated regions of {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
