"""What ``calorimeter compare`` writes: ``compare.csv`` (one row per configuration and metric), ``compare_counts.csv``
(verdicts per figure and overall), ``compare.html`` (the report section) and ``compare.png``/``.pdf`` (the overlay:
per metric, reference and reproduction with their repetition intervals and the tolerance band)."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from calorimeter.records.atomic import write_atomic  # noqa: E402
from calorimeter.reproduce.compare import CANNOT_TELL, NOT_COMPARABLE, NOT_REPRODUCED, REPRODUCED  # noqa: E402
from calorimeter.reproduce.metrics import METRICS  # noqa: E402

COLORS = {REPRODUCED: "#2e7d32", NOT_REPRODUCED: "#c62828", CANNOT_TELL: "#ef6c00", NOT_COMPARABLE: "#9e9e9e"}


def _label(row: pd.Series) -> str:
    parts = [str(row.get(k)) for k in ("model", "parallel_label", "optimization_label") if pd.notna(row.get(k))]
    mb = row.get("micro_batch")
    if pd.notna(mb):
        parts.append(f"mb{int(mb)}")
    if pd.notna(row.get("placement")) and row.get("placement") not in ("default", ""):
        parts.append(f"placement {row.get('placement')}")
    return " ".join(parts) or str(row.get("config_id") or row.get("reproduction_config_id"))


def overlay_figure(result: pd.DataFrame, out_png: Path, out_pdf: Path | None = None, title: str = "") -> int:
    """One panel per metric: the reference mean (black, repetition interval) and the reproduction mean (coloured
    by verdict, its interval) per configuration, on the grey tolerance band around the reference. Points, not
    intervals, where a side has fewer than two repetitions. Returns the number of configurations drawn."""
    drawn = result[result["verdict"] != NOT_COMPARABLE]
    configs = list(dict.fromkeys(drawn["config_id"]))
    mets = [m for m in METRICS if m.column in set(drawn["metric"])]
    fig, axes = plt.subplots(len(mets) or 1, 1, figsize=(max(6.0, 0.9 * len(configs) + 3), 1.9 * max(len(mets), 1)),
                             sharex=True, squeeze=False)
    if not mets:
        axes[0, 0].text(0.5, 0.5, "no comparable configuration", ha="center", va="center",
                        transform=axes[0, 0].transAxes)
        axes[0, 0].set_axis_off()
    x = np.arange(len(configs))
    for ax, m in zip(axes[:, 0], mets, strict=False):
        d = drawn[drawn["metric"] == m.column].set_index("config_id").reindex(configs)
        ref, rep, tol = d["reference_mean"].to_numpy(float), d["reproduction_mean"].to_numpy(float), \
            d["tolerance"].to_numpy(float)
        band = ref * tol if m.relative else tol
        ax.bar(x, 2 * band, bottom=ref - band, width=0.6, color="#e0e0e0", label="tolerance", zorder=1)
        for side, vals, dx, color in (("reference", ref, -0.12, ["black"] * len(x)),
                                      ("reproduction", rep, 0.12, [COLORS[v] for v in d["verdict"]])):
            lo, hi = d[f"{side}_ci95_low"].to_numpy(float), d[f"{side}_ci95_high"].to_numpy(float)
            has = np.isfinite(lo) & np.isfinite(hi) & (d[f"{side}_n"].to_numpy(float) > 3)
            ax.errorbar(x[has] + dx, vals[has], yerr=[vals[has] - lo[has], hi[has] - vals[has]], fmt="none",
                        ecolor=np.array(color, dtype=object)[has].tolist() or "black", lw=1, capsize=2, zorder=2)
            ax.scatter(x + dx, vals, c=color, s=18, zorder=3, marker="o" if side == "reproduction" else "s",
                       label=side)
        drawn_ci = [np.where(d[f"{side}_n"].to_numpy(float) > 3, d[f"{side}_ci95_{b}"].to_numpy(float), np.nan)
                    for side in ("reference", "reproduction") for b in ("low", "high")]
        span = np.concatenate([ref - band, ref + band, rep, *drawn_ci])
        span = span[np.isfinite(span)]
        if span.size:  # every point, interval and band inside the axes, with a margin
            pad = 0.06 * (span.max() - span.min() or abs(span.max()) or 1.0)
            ax.set_ylim(span.min() - pad, span.max() + pad)
        ax.set_ylabel(f"{m.label}\n({m.unit})", fontsize=7)
        ax.tick_params(labelsize=7)
    if mets:
        axes[0, 0].legend(fontsize=6, ncol=3, loc="upper right")
        labels = [_label(drawn[drawn["config_id"] == c].iloc[0]) for c in configs]
        axes[-1, 0].set_xticks(x, labels, rotation=30, ha="right", fontsize=6)
    counts = result["verdict"].value_counts()
    fig.suptitle(title or "Reproduction vs reference: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in
                                                                    (REPRODUCED, NOT_REPRODUCED, CANNOT_TELL,
                                                                     NOT_COMPARABLE)),
                 fontsize=8)
    fig.text(0.01, 0.005, "squares: reference, circles: reproduction (green reproduced, red not reproduced, orange "
             "cannot tell);\nbars: 95% intervals over more than 3 repetitions (fewer: the mean only); grey: the "
             "tolerance (the larger of the floor and the noise)", fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    write_atomic(out_png, lambda tmp: fig.savefig(tmp, format="png", dpi=130))
    if out_pdf is not None:
        write_atomic(out_pdf, lambda tmp: fig.savefig(tmp, format="pdf"))
    plt.close(fig)
    return len(configs)


def _fmt(v: object, relative: bool) -> str:
    if not isinstance(v, (int, float)) or not np.isfinite(v):
        return ""
    return f"{100 * v:+.1f}%" if relative else f"{v:+.2f}"


def _html_row(r: pd.Series, relative: bool) -> str:
    cells = [str(r["config_id"] or r["reproduction_config_id"]), str(r["label"]), _fmt(r["difference"], relative),
             _fmt(r["tolerance"], relative).lstrip("+"), str(r["verdict"]), str(r["reason"])]
    tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
    return f"<tr style='color:{COLORS.get(r['verdict'], 'black')}'>{tds}</tr>"


def html_section(result: pd.DataFrame, counts: pd.DataFrame, reference: str, reproduction: str) -> str:
    """The report section: the counts per figure, then one row per configuration and metric."""
    rel = {m.column: m.relative for m in METRICS}
    head = (f"<h2>Reproduction check</h2><p>reference <code>{html.escape(reference)}</code>, reproduction "
            f"<code>{html.escape(reproduction)}</code>. Difference = reproduction / reference - 1 (temperatures: "
            "reproduction - reference, °C); tolerance = the larger of the metric's floor and the 95% half-width of "
            "the run-to-run noise pooled over the committed sets; <i>cannot tell</i> where that noise is wider than "
            "the floor (docs/artifact.md).</p>")
    rows = "".join(_html_row(r, rel.get(r["metric"], True)) for _, r in result.iterrows())
    return (head + counts.to_html(index=False) + "<table><tr><th>configuration</th><th>metric</th><th>difference"
            "</th><th>tolerance</th><th>verdict</th><th>why</th></tr>" + rows + "</table>")


def write_outputs(result: pd.DataFrame, counts: pd.DataFrame, out: Path, reference: str, reproduction: str) -> None:
    """compare.csv, compare_counts.csv, compare.html, compare.png and compare.pdf in ``out``."""
    write_atomic(out / "compare.csv", lambda tmp: result.to_csv(tmp, index=False))
    write_atomic(out / "compare_counts.csv", lambda tmp: counts.to_csv(tmp, index=False))
    text = html_section(result, counts, reference, reproduction)
    write_atomic(out / "compare.html", lambda tmp: tmp.write_text(text))
    overlay_figure(result, out / "compare.png", out / "compare.pdf")
