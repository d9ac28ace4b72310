"""The generated regions of the docs about findings: every tally and number about findings in README.md,
docs/findings.md and the set READMEs comes from the findings tables through here, never by hand.

A region lies between ``<!-- BEGIN GENERATED <key>: ... -->`` and ``<!-- END GENERATED <key> -->``; its body is
rewritten by ``python -m calorimeter.analysis.reevaluate results/reference --markdown`` and checked by ``--check``
(and a test). Keys:

* ``findings-summary`` (README.md): the tally over every committed set, each decided verdict in a line, and the
  machine-level findings pooled over every set;
* ``findings-catalogue`` (docs/findings.md): per finding the study's wording and source, the registered
  definition, when it agrees, its preconditions and what would answer a *cannot say*;
* ``findings-tally`` (docs/findings.md): the tally per set;
* ``findings-verdicts`` (docs/findings.md): per finding with an interval anywhere, its registered wording, source
  and definition, then every set's value, interval, verdict, degrees of freedom in repetitions and machines;
* ``findings-machines`` (docs/findings.md): the machine-level findings (asymmetry, hot GPUs' clocks) over the
  machines of every committed set, the unit those claims need;
* ``findings-reach`` (docs/findings.md): the smallest effect each verdict needs on the measured noise
  (:mod:`calorimeter.findings.reach`);
* ``findings-steady`` (docs/findings.md): per set, how many measured GPU cells are thermally steady by the drift over
  their measured window (the precondition) and how many by the warm-up's runtime flag;
* ``findings-set`` (a set README): the verdicts of the sweeps under that README's folder.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from calorimeter.analysis.tables import read_tables
from calorimeter.findings import CATALOG_VERSION, evaluate_one
from calorimeter.findings.catalog import FINDINGS, NOISE, Finding
from calorimeter.findings.checks import kernel_shares
from calorimeter.findings.preconditions import GPU, STEADY, meets
from calorimeter.findings.reach import DESIGNS, machine_sd, pooled_sd, reach
from calorimeter.findings.stats import CANNOT_SAY, VERDICTS
from calorimeter.records.atomic import write_atomic
from calorimeter.records.legacy import config_ids

COMMAND = "python -m calorimeter.analysis.reevaluate results/reference --markdown"
BEGIN = "<!-- BEGIN GENERATED {key}: " + COMMAND + "; do not edit by hand -->"
END = "<!-- END GENERATED {key} -->"
REGION = re.compile(r"<!-- BEGIN GENERATED (?P<key>[\w-]+):[^\n]*-->\n(?P<body>.*?)<!-- END GENERATED (?P=key) -->",
                    re.S)
#: the findings whose claim is about machines: judged over the machines of every committed set
MACHINE_FINDINGS = ("gpus_thermally_asymmetric", "hot_gpus_clock_lower")
#: units the reachability table shows
REACH_UNITS = (3, 5)


class Change(Protocol):
    """A re-evaluated set (:class:`calorimeter.analysis.reevaluate.Change`): its folder and new findings table."""

    folder: Path
    new: pd.DataFrame


def tally(df: pd.DataFrame) -> str:
    """``a agrees / p partly / d disagrees / c cannot say``."""
    c = df["verdict"].value_counts()
    return " / ".join(f"{int(c.get(v, 0))} {v}" for v in VERDICTS)


def _num(x: float) -> str:
    return "" if not isinstance(x, (int, float)) or not math.isfinite(x) else f"{x:.3g}"


def estimate(r: pd.Series) -> str:
    """``value [low, high] unit``, or ``value unit (no interval)``; empty without a value."""
    v = _num(r["value"])
    if not v:
        return ""
    ci = f" [{_num(r['ci95_low'])}, {_num(r['ci95_high'])}]" if _num(r["ci95_low"]) else " (no interval)"
    return f"{v}{ci} {r['unit']}".strip()


def verdict_text(r: pd.Series) -> str:
    """``**agrees**``, or ``cannot say (size)`` with what left it undecided."""
    if r["verdict"] != CANNOT_SAY:
        return f"**{r['verdict']}**"
    u = str(r.get("undecided", "") or "")
    return f"cannot say ({u})" if u else "cannot say"


def units_text(r: pd.Series) -> str:
    """Degrees of freedom in both units: ``2 dof over 3 repetitions; 1 machine``."""
    reps = int(r.get("dof_repetitions", 0) or 0)
    mach = int(r.get("n_machines", 0) or 0)
    head = f"{_num(r['dof'])} dof ({r['experimental_unit']})" if r["dof"] else "no interval"
    return f"{head}; {reps + 1 if reps else 0} repetition unit(s), {mach} machine(s)"


def secondary_reading(r: pd.Series) -> str:
    """The labelled secondary reading the check wrote into the detail ("" when none)."""
    detail = str(r.get("detail", "") or "")
    mark = "secondary reading, never judged: "
    return detail.split(mark, 1)[1].split("; ")[0] if mark in detail else ""


def _undecided_counts(rows: pd.DataFrame) -> str:
    und = rows.loc[rows["verdict"] == CANNOT_SAY, "undecided"].value_counts()
    return ", ".join(f"{int(n)} {k}" for k, n in und.items())


def _cell(x: object) -> str:
    return str(x).replace("|", "/").replace("\n", " ")


@dataclass
class Generated:
    """Everything the generated regions say: the re-evaluated sets, the pooled machine-level rows and the noise."""

    changes: list[Change]
    root: Path
    machines: pd.DataFrame = field(default_factory=pd.DataFrame)
    reach: pd.DataFrame = field(default_factory=pd.DataFrame)
    sets: dict[str, dict[str, pd.DataFrame]] = field(default_factory=dict)

    @classmethod
    def build(cls, changes: list[Change], root: Path, config_dir: Path | None = None) -> Generated:
        """From the re-evaluated sets and every set's tables under ``root``."""
        sets = all_sets(root)
        pooled = pooled_tables(sets)
        machines = pd.DataFrame([evaluate_one(f, pooled) for f in FINDINGS if f.id in MACHINE_FINDINGS])
        return cls(changes, root, machines, reach_table(sets, machines), sets)

    def rows(self) -> pd.DataFrame:
        """Every set's findings rows with a ``set`` column (relative to the root)."""
        if not self.changes:
            return pd.DataFrame()
        return pd.concat([ch.new.assign(set=str(ch.folder.relative_to(self.root))) for ch in self.changes],
                         ignore_index=True)

    # -- the regions ---------------------------------------------------------------------------------------------

    def region(self, key: str, file: Path) -> str:
        """The body of region ``key`` in ``file`` (a KeyError names an unknown key)."""
        if key == "findings-set":
            return self.set_region(file.parent)
        try:
            return {"findings-summary": self.summary, "findings-tally": self.tally_table,
                    "findings-catalogue": catalogue_table,
                    "findings-verdicts": self.verdicts, "findings-machines": self.machine_table,
                    "findings-reach": self.reach_markdown, "findings-steady": self.steady_table}[key]()
        except KeyError:
            raise KeyError(f"{file}: unknown generated region {key!r}") from None

    def summary(self) -> str:
        rows = self.rows()
        decided = rows[rows["verdict"] != CANNOT_SAY]
        lines = [f"Findings (catalogue version {CATALOG_VERSION}) over every committed set: {len(self.changes)} sets x "
                 f"{rows['finding'].nunique()} findings = {len(rows)} rows, **{tally(rows)}** (what left the cannot "
                 f"say undecided: {_undecided_counts(rows)}). Decided:", ""]
        for r in decided.itertuples(index=False):
            s = pd.Series(r._asdict())
            lines.append(f"* `{s['set']}` `{s['finding']}`: {estimate(s)}, {verdict_text(s)}; {units_text(s)}")
        for _, r in self.machines.iterrows():
            lines.append(f"* machine-level, pooled over every committed set, `{r['finding']}`: {estimate(r)}, "
                         f"{verdict_text(r)}; {units_text(r)}")
        lines += ["", "Each with its definition, source and preconditions: [docs/findings.md](docs/findings.md)."]
        return "\n".join(lines) + "\n"

    def tally_table(self) -> str:
        lines = ["| set | verdicts |", "|---|---|"]
        lines += [f"| `{ch.folder.relative_to(self.root)}` | {tally(ch.new)} |" for ch in self.changes]
        rows = self.rows()
        lines.append(f"| all {len(self.changes)} sets | {tally(rows)} |" if len(rows) else "| all | none |")
        return "\n".join(lines) + "\n"

    def verdicts(self) -> str:
        rows = self.rows()
        with_ci = rows[np.isfinite(pd.to_numeric(rows["ci95_low"], errors="coerce"))]
        out = []
        for f in FINDINGS:
            sub = with_ci[with_ci["finding"] == f.id]
            if sub.empty:
                continue
            d = f.definition
            out += [f"**`{f.id}`**: \"{d.wording}\" ({d.source}). Definition: {d.definition}"
                    + (f" Secondary reading (never judged): {d.secondary}." if d.secondary else ""), "",
                    "| set | value [95% interval] | verdict | units | machines | why | secondary reading, never "
                    "judged |", "|---|---|---|---|---|---|---|"]
            order = sub.assign(_d=sub["verdict"].eq(CANNOT_SAY)).sort_values(["_d", "set"])
            for _, r in order.iterrows():
                out.append(f"| `{r['set']}` | {estimate(r)} | {verdict_text(r)} | {units_text(r)} | "
                           f"{_cell(r['machines'])} | {_cell(r['why'])} | {_cell(secondary_reading(r))} |")
            out.append("")
        return "\n".join(out)

    def machine_table(self) -> str:
        lines = ["| finding | value [95% interval] | verdict | units | per machine |", "|---|---|---|---|---|"]
        for _, r in self.machines.iterrows():
            lines.append(f"| `{r['finding']}` | {estimate(r)} | {verdict_text(r)} | {units_text(r)} | "
                         f"{_cell(r['detail'])} |")
        return "\n".join(lines) + "\n"

    def reach_markdown(self) -> str:
        head = " / ".join(str(k) for k in REACH_UNITS)
        lines = [f"| finding | noise per unit (source) | 95% half width ({head} units) | agrees needs | disagrees "
                 "needs | partly needs |", "|---|---|---|---|---|---|"]
        for _, r in self.reach.iterrows():
            lines.append(f"| `{r['finding']}` | {_cell(r['noise'])} | {_cell(r['half'])} | {_cell(r['agrees'])} | "
                         f"{_cell(r['disagrees'])} | {_cell(r['partly'])} |")
        return "\n".join(lines) + "\n"

    def steady_table(self) -> str:
        lines = ["| set | measured on GPUs | with `warmup: steady` | runtime flag steady | thermally steady (drift < 1 "
                 "degC) | largest drift over the GPUs (degC), median (range) |", "|---|---|---|---|---|---|"]
        for name, t in self.sets.items():
            if meets(t["runs"], GPU).any():
                lines.append(f"| `{name}` | {_steady_counts(t['runs'])} |")
        pooled = pooled_tables(self.sets)["runs"]
        lines.append(f"| all, each measured cell once | {_steady_counts(pooled)} |")
        return "\n".join(lines) + "\n"

    def set_region(self, folder: Path) -> str:
        mine = [ch for ch in self.changes if folder.resolve() in ch.folder.resolve().parents]
        if not mine:
            return "No findings table under this folder.\n"
        out = []
        for ch in mine:
            new = ch.new
            out += [f"`{ch.folder.relative_to(folder)}/findings.csv` (catalogue version {CATALOG_VERSION}): "
                    f"{tally(new)} (what left the cannot say undecided: {_undecided_counts(new)}).", ""]
            shown = new[np.isfinite(pd.to_numeric(new["value"], errors="coerce"))]
            if shown.empty:
                out += ["No finding has a value here (every one cannot say; `findings.csv` says why).", ""]
                continue
            out += ["| finding | value [95% interval] | verdict | units | machines | definition (source) | secondary "
                    "reading, never judged |", "|---|---|---|---|---|---|---|"]
            for _, r in shown.iterrows():
                out.append(f"| `{r['finding']}` | {estimate(r)} | {verdict_text(r)} | {units_text(r)} | "
                           f"{_cell(r['machines'])} | {_cell(r['definition'])} ({_cell(r['source'])}) | "
                           f"{_cell(secondary_reading(r))} |")
            out.append("")
        return "\n".join(out)


def _steady_counts(runs: pd.DataFrame) -> str:
    """The cells of a runs table measured on GPUs: how many, with a steady warm-up, flagged steady at run time,
    thermally steady (:data:`STEADY`), and the spread of their largest drift, as Markdown cells."""
    ok = runs[meets(runs, GPU)]

    def col(c: str) -> pd.Series:
        return ok[c] if c in ok.columns else pd.Series("", index=ok.index)

    drift = pd.to_numeric(col("temp_drift_c"), errors="coerce").dropna()
    spread = (f"{drift.median():.2f} ({drift.min():.2f}-{drift.max():.2f})" if len(drift)
              else "none (no telemetry, or none covering a 30 s fit)")
    counts = (len(ok), int(col("warmup_mode").eq("steady").sum()),
              int(col("warmup_reason").astype(str).eq("steady").sum()), int(meets(ok, STEADY).sum()))
    return " | ".join(str(c) for c in counts) + f" | {spread}"


def claim_text(f: Finding) -> str:
    """When the finding agrees, in words (from its :class:`~calorimeter.findings.stats.Claim`)."""
    c = f.rule
    if not f.measurable:
        return "not measured"
    side = "above" if c.sign > 0 else "below"
    edge = c.null + c.sign * c.tolerance
    out = f"interval wholly {side} {_num(edge)} {f.unit}".rstrip()
    if c.tolerance:
        out += f" ({_num(c.null)} {'+' if c.sign > 0 else '-'} tolerance {_num(c.tolerance)})"
    if c.size is not None:
        lo, hi = c.size
        out += f" and inside the stated size [{_num(lo)}, {_num(hi) if math.isfinite(hi) else 'inf'}]"
        if f.size_regime is not None:
            out += f"; the size only where every compared cell has {f.size_regime.name}, else cannot say (regime)"
    return out


def catalogue_table() -> str:
    """One row per finding: the study's wording and source, the registered definition, when it agrees, its
    preconditions and what would answer a *cannot say* (all from the catalogue)."""
    lines = ["| finding | the study says (source) | definition (registered) | agrees when | preconditions | "
             "what would answer a *cannot say* |", "|---|---|---|---|---|---|"]
    for f in FINDINGS:
        d = f.definition
        sec = f" Secondary reading, never judged: {d.secondary}." if d.secondary else ""
        pre = "; ".join(p.name for p in f.preconditions) or "-"
        lines.append(f"| `{f.id}` | \"{_cell(d.wording)}\" ({_cell(d.source)}) | {_cell(d.definition)}{_cell(sec)} | "
                     f"{_cell(claim_text(f))} | {_cell(pre)} | {_cell(f.needs)} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# every committed set, pooled


def all_sets(root: Path) -> dict[str, dict[str, pd.DataFrame]]:
    """The tables of every sweep folder under ``root`` (``tables/runs.parquet``), by path relative to it."""
    return {str(p.parent.parent.relative_to(root)): read_tables(p.parent, ("runs", "gpus", "kernels"))
            for p in sorted(root.rglob("tables/runs.parquet"))}


def pooled_tables(sets: dict[str, dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """The runs and gpus tables of every set as one sweep (cell ids prefixed with the set), each measured cell once
    (a cell kept in two folders has the same machine and start)."""
    runs, gpus = [], []
    for name, t in sets.items():
        r, g = t.get("runs", pd.DataFrame()), t.get("gpus", pd.DataFrame())
        if r.empty:
            continue
        runs.append(r.assign(cell_id=name + "/" + r["cell_id"].astype(str), config_id=name + "/" + config_ids(r)))
        if not g.empty and "cell_id" in g.columns:
            gpus.append(g.assign(cell_id=name + "/" + g["cell_id"].astype(str)))
    if not runs:
        return {"runs": pd.DataFrame(), "gpus": pd.DataFrame()}
    r = pd.concat(runs, ignore_index=True)
    key = r["machine"].fillna("").astype(str) + "@" + pd.to_numeric(r.get("measured_begin_s"), errors="coerce").map(
        lambda x: f"{x:.3f}" if math.isfinite(x) else "")
    dup = key.duplicated() & ~key.str.endswith("@") & ~key.str.startswith("@")
    r = r[~dup]
    g = pd.concat(gpus, ignore_index=True) if gpus else pd.DataFrame()
    g = g[g["cell_id"].isin(r["cell_id"])] if not g.empty else g
    return {"runs": r, "gpus": g}


# ---------------------------------------------------------------------------------------------------------------
# reachability on the measured noise


def _metric_values(sets: dict[str, dict[str, pd.DataFrame]], metric: str, conds: tuple) -> pd.DataFrame:
    """``group`` (set, configuration, machine) and ``value`` of the ok cells meeting ``conds``."""
    rows = []
    for name, t in sets.items():
        runs = t.get("runs", pd.DataFrame())
        if runs is None or runs.empty or "status" not in runs.columns:
            continue
        cols = [c for c in ("cell_id", "config_id", "machine", metric) if c in runs.columns]
        ok = runs.loc[meets(runs, *conds), cols]
        if ok.empty:
            continue
        if metric.startswith("share:"):
            k = t.get("kernels", pd.DataFrame())
            if k.empty or "sum_s" not in k.columns:
                continue
            vals = kernel_shares(k, ok["cell_id"], metric.split(":", 1)[1]).to_numpy()
        elif metric in ok.columns:
            vals = pd.to_numeric(ok[metric], errors="coerce").to_numpy()
        else:
            continue
        groups = name + "/" + config_ids(ok).to_numpy() + "@" + ok["machine"].fillna("").astype(str).to_numpy()
        rows += list(zip(groups, vals, strict=True))
    return pd.DataFrame(rows, columns=["group", "value"])


def noise_of(f: Finding, sets: dict[str, dict[str, pd.DataFrame]], machines: pd.DataFrame) -> tuple[float, str]:
    """A finding's standard deviation per unit on its effect's scale, and where it comes from."""
    metric, scale, design = NOISE[f.id]
    if design == "machines":
        r = machines.set_index("finding").loc[f.id] if f.id in set(machines.get("finding", [])) else None
        if r is None or not math.isfinite(float(r["ci95_low"])):
            return math.nan, "no interval over machines yet"
        sd = machine_sd(float(r["value"]), float(r["ci95_low"]), float(r["ci95_high"]), float(r["dof"]), scale)
        return sd, f"between {int(r['n_machines'])} machines, every committed set"
    tries = ((f.preconditions, "cells meeting its preconditions"),
             ((GPU, STEADY), "steady cells: none meeting all its preconditions is repeated"),
             ((GPU,), "GPU cells: none meeting its preconditions or steady is repeated"))
    for conds, said in tries:  # the first that has a configuration repeated on one machine
        sd, dof, k = pooled_sd(_metric_values(sets, metric, tuple(conds)), scale)
        if math.isfinite(sd):
            return sd * DESIGNS[design], _noise_source(sd, design, k, dof, said)
    return math.nan, "no configuration repeated on one machine"


def _noise_source(sd: float, design: str, k: int, dof: int, said: str) -> str:
    what = {"pair": " x sqrt 2 (a difference of two configurations)",
            "slope": " / sqrt 2 (a slope over three levels a doubling apart)", "level": ""}[design]
    return f"repetition SD {_num(sd)}{what}; {k} configuration(s) x machine, {dof} dof, {said}"


def reach_table(sets: dict[str, dict[str, pd.DataFrame]], machines: pd.DataFrame) -> pd.DataFrame:
    """Per measurable finding: its noise per unit and the effects that reach each verdict with 3 and 5 units."""
    rows = []
    for f in FINDINGS:
        if not f.measurable or f.id not in NOISE:
            continue
        sd, source = noise_of(f, sets, machines)
        scale = NOISE[f.id][1]
        unit = f.unit
        fmt = lambda x, u=unit: f"{x:.3g} {u}".strip()  # noqa: E731
        rs = [reach(f.rule, scale, sd, n, fmt) for n in REACH_UNITS]
        half = (" / ".join(f"+-{_num(r.half)}" for r in rs) + ("" if scale == "linear" else f" ({scale} scale)")
                if math.isfinite(sd) else "unknown")
        regime = (f" (the stated size can occur only with {f.size_regime.name}; here {f.size_regime_why}: cannot "
                  "say (regime))" if f.size_regime is not None else "")
        on = "" if scale == "linear" else f" on the {scale} scale"
        rows.append({"finding": f.id, "noise": f"{_num(sd)}{on} ({source})" if math.isfinite(sd) else source,
                     "half": half, "agrees": " / ".join(r.agrees for r in rs) + regime,
                     "disagrees": " / ".join(r.disagrees for r in rs),
                     "partly": (" / ".join(r.partly for r in rs) + (f" (only with {f.size_regime.name})"
                                                                     if f.size_regime is not None else ""))
                     if f.rule.size is not None else ""})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------------------------
# the files


def doc_files(docs_root: Path, results_root: Path) -> list[Path]:
    """README.md, docs/findings.md and every README under ``results_root`` with a generated region."""
    out = [p for p in (docs_root / "README.md", docs_root / "docs" / "findings.md") if p.is_file()]
    out += [p for p in sorted(results_root.rglob("README.md")) if "<!-- BEGIN GENERATED" in p.read_text()]
    return out


def _render(text: str, file: Path, gen: Generated) -> str:
    def body(m: re.Match) -> str:
        key = m.group("key")
        return f"{BEGIN.format(key=key)}\n{gen.region(key, file)}{END.format(key=key)}"

    return REGION.sub(body, text)


def stale_regions(files: Iterable[Path], gen: Generated) -> list[tuple[Path, str]]:
    """(file, key) of every generated region whose body is not what the tables say now."""
    out = []
    for f in files:
        text = f.read_text()
        for m in REGION.finditer(text):
            key = m.group("key")
            if m.group(0) != f"{BEGIN.format(key=key)}\n{gen.region(key, f)}{END.format(key=key)}":
                out.append((f, m.group("key")))
    return out


def write_regions(files: Iterable[Path], gen: Generated) -> list[Path]:
    """Rewrite every generated region; the files that changed."""
    changed = []
    for f in files:
        text = f.read_text()
        new = _render(text, f, gen)
        if new != text:
            write_atomic(f, lambda tmp, new=new: tmp.write_text(new))
            changed.append(f)
    return changed


__all__ = ["BEGIN", "END", "MACHINE_FINDINGS", "Generated", "all_sets", "doc_files", "pooled_tables", "reach_table",
           "stale_regions", "tally", "write_regions"]
