"""What the HTML report (``snakemake --report``) says about a sweep's set before any figure: its provenance (set
folder, measurement dates, machines by host and GPU UUID, code commits, repetitions per configuration, how many
measured windows were thermally steady), the findings' verdicts, the figures in the study's order as thumbnails, and
the figures the sweep's data cannot draw, each with its reason.

Read from the sweep's tables and figure files when the report is written (:class:`ReportPages` is a parameter of the
figure rule that Snakemake does not track, so building it never reruns a job); every number is counted from the
tables, none is written by hand.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from calorimeter.figures.common import cell_machines, unsteady
from calorimeter.records.paths import SweepPaths

#: thumbnail width (pixels) on the report's first page
THUMB_PX = 260


def not_drawn(paths: SweepPaths, names: list[str]) -> dict[str, str]:
    """Figures the sweep's data could not draw (their JSON says ``drawn: false``), with the reason: figure -> why."""
    out = {}
    for name in names:
        p = paths.figure(name, "json")
        try:
            res = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if res.get("drawn") is False:
            out[name] = str(res.get("not_drawn") or "no data")
    return out


def _read(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    try:
        return pd.read_parquet(path, columns=columns)
    except (OSError, ValueError, KeyError):
        try:
            return pd.read_parquet(path)
        except (OSError, ValueError):
            return pd.DataFrame()


def _dates(runs: pd.DataFrame) -> str:
    t = pd.to_numeric(runs.get("measured_begin_s", pd.Series(dtype=float)), errors="coerce").dropna()
    if t.empty:
        return "no measurement date recorded"
    days = sorted({datetime.fromtimestamp(float(v), UTC).strftime("%Y-%m-%d") for v in t})
    return f"measured {days[0]}" + (f" to {days[-1]} (UTC)" if len(days) > 1 else " (UTC)")


def set_name(paths: SweepPaths) -> str:
    """The set a sweep belongs to: the name of its results folder (``findings-steady-2026-11-26``; a rebuild's
    scratch folder is named after the set it rebuilds), or ``results`` for a sweep of the default results folder."""
    return paths.root.resolve().parent.name


def provenance(paths: SweepPaths) -> str:
    """One paragraph: the set folder, dates, machines, code, repetitions and steady windows of the sweep's measured
    cells (an empty string when the sweep has no runs table yet)."""
    runs = _read(paths.table("runs"))
    if runs.empty or "status" not in runs.columns:
        return ""
    ok = runs[runs["status"] == "ok"]
    gpus = _read(paths.table("gpus"), ["cell_id", "hostname", "uuid", "node"])
    machines = cell_machines({"runs": ok, "gpus": gpus}).dropna() if len(ok) else pd.Series(dtype=object)
    counts = machines.value_counts()
    where = (f"{len(counts)} machine{'s' if len(counts) != 1 else ''} ("
             + ", ".join(f"{m}: {n} cell{'s' if n != 1 else ''}" for m, n in counts.items()) + ")"
             if len(counts) else "no machine recorded")
    parts = [f"Sweep ``{paths.root.name}`` of set ``{set_name(paths)}``", _dates(ok), f"on {where}"]
    commits = sorted({str(c)[:7] for c in ok.get("git_commit", pd.Series(dtype=object)).dropna() if str(c)})
    if commits:
        parts.append(f"code {', '.join(commits)}")
    cfg = _read(paths.table("configs"), ["config_id", "n_repeats", "n_planned"])
    if len(cfg) and "n_repeats" in cfg.columns:
        reps = pd.to_numeric(cfg["n_repeats"], errors="coerce").fillna(0).astype(int)
        reps = reps[reps > 0]
        span = f"{reps.min()}" if len(reps) and reps.min() == reps.max() else f"{reps.min()}-{reps.max()}" \
            if len(reps) else "0"
        parts.append(f"{len(reps)} configuration{'s' if len(reps) != 1 else ''} measured, {span} repetition"
                     f"{'s' if span != '1' else ''} each (interleaved in time)")
    parts.append(f"{len(ok)} of {len(runs)} planned cells measured")
    if len(ok) and "warmup_mode" in ok.columns and (ok["warmup_mode"].astype(str) == "steady").any():
        n_warm = int(unsteady(ok).sum())
        parts.append(f"{len(ok) - n_warm} of {len(ok)} measured windows thermally steady (warm-up ``steady``; "
                     f"{n_warm} not)")
    elif len(ok):
        parts.append("fixed warm-up: whether the measured windows were thermally steady was not checked")
    return "; ".join(parts) + "."


def findings_counts(paths: SweepPaths) -> str:
    """``3 agree, 1 partly, 0 disagree, 18 cannot say`` from the sweep's findings table ("" without one)."""
    try:
        f = pd.read_csv(paths.findings_csv)
    except (OSError, ValueError):
        return ""
    if "verdict" not in f.columns:
        return ""
    v = f["verdict"].astype(str).value_counts()
    return ", ".join(f"{int(v.get(k, 0))} {w}" for k, w in (("agrees", "agree"), ("partly", "partly"),
                                                          ("disagrees", "disagree"), ("cannot say", "cannot say")))


def thumbnail_grid(figures: list[tuple[Path, str]]) -> list[str]:
    """HTML lines of the figures' thumbnails in a grid, numbered, each opening the figure's page of the report (the
    base64 of each image wrapped on lines of 76 characters: reST refuses longer lines, browsers skip the breaks)."""
    out = ['<div style="display:flex;flex-wrap:wrap;gap:12px">']
    for i, (png, title) in enumerate(figures, 1):
        uri = thumbnail(png)
        link = "javascript:app.showResultInfo('" + quote(str(png), safe="/") + "')"
        out.append(f'<a href="{link}" style="width:{THUMB_PX}px;text-decoration:none">')
        if uri:
            head, data = uri.split(",", 1)
            out.append(f'<img width="{THUMB_PX}" alt="{html.escape(title)}" src="{head},')
            out += [data[k:k + 76] for k in range(0, len(data), 76)]
            out.append('"/>')
        out.append(f"<div>{i}. {html.escape(title)}</div></a>")
    out.append("</div>")
    return out


def thumbnail(png: Path) -> str:
    """A PNG scaled to :data:`THUMB_PX` wide, as a data URI ("" when it cannot be read)."""
    import matplotlib.image as mpimg
    from PIL import Image

    try:
        img = Image.fromarray((np.clip(mpimg.imread(png), 0, 1) * 255).astype("uint8"))
    except (OSError, ValueError, SyntaxError):
        return ""
    img.thumbnail((THUMB_PX, 4 * THUMB_PX))
    img = img.convert("RGB").quantize(colors=64)  # a thumbnail: 64 colours keep it a few kB
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@dataclass(frozen=True, repr=False)
class ReportPages:
    """The report's text about one sweep, read when the report is written (the report's captions and first page
    call it through the figure rule's parameters)."""

    results_dir: str
    sweep: str
    figures: tuple[tuple[str, str], ...]  # (figure name, title) in report order

    def __repr__(self) -> str:  # as the report lists the figure job's parameters
        return f"the report's pages of sweep {self.sweep}"

    @property
    def paths(self) -> SweepPaths:
        return SweepPaths.of(self.results_dir, self.sweep)

    def provenance(self) -> str:
        """The provenance paragraph (RST)."""
        return _cached_provenance(self.paths.root.resolve(), self.results_dir, self.sweep)

    def first_page(self) -> str:
        """The report's first page: provenance, findings, the drawn figures as thumbnails in report order (each
        linking to its page), the figures not drawn with their reasons (RST)."""
        paths = self.paths
        lines = [self.provenance(), ""]
        counts = findings_counts(paths)
        if counts:
            lines += [f"**Findings** (the study's findings checked on this sweep, see Findings_): {counts}.", ""]
        skipped = not_drawn(paths, [n for n, _ in self.figures])
        drawn = [(n, t) for n, t in self.figures if n not in skipped and paths.figure(n, "png").is_file()]
        if drawn:
            lines += ["**Figures**, in the study's order (click one to open it, or see Figures_):", "",
                      ".. raw:: html", ""]
            lines += ["   " + line for line in thumbnail_grid([(paths.figure(n, "png"), t) for n, t in drawn])]
            lines.append("")
        if skipped:
            lines += ["**Not drawn from this sweep's data** (left out of the report):", ""]
            lines += [f"- {dict(self.figures).get(n, n)}: {why}" for n, why in skipped.items()]
            lines.append("")
        return "\n".join(lines)


@cache
def _cached_provenance(_root: Path, results_dir: str, sweep: str) -> str:
    return provenance(SweepPaths.of(results_dir, sweep))
