"""Projection validation: the error distribution of every held-out cell, per metric and regime.

The validation run (``projection/validation.parquet``): leave one configuration out over the committed
current-engine sets, each configuration predicted by a calibration of its own GPU type and engine build fitted on
every other cell (``relation`` ``match``; where the table names designs, its extrapolation folds too), plus, where a
committed prospective check exists (``prospective``: cells measured after the model was fixed,
``bench/projection_prospective.py``), those cells. One row of panels per metric; per GPU type, each base regime
inside the calibration's range and each way of lying outside it (the model's own ``regime`` labels where it names
them, else host-bound or GPU-bound as projected, and extrapolated): the signed relative errors as points over their
quartile box, the band the rows were given (its median, dashed) and, above, n, the median |error| and the share
inside the band. Errors beyond the axis are drawn at its edge and counted. No legend per fold: the per-fold table is
the CSV.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from calorimeter.figures.common import FigureResult, Tables, note  # noqa: E402

NAME = "projection_validation"
TABLES = ("validation", "prospective")
PANELS = (("tokens_per_s_per_gpu", "tokens/s per GPU"), ("energy_per_token_j", "energy per token"),
          ("power_avg_w", "average GPU power"))
#: validation designs drawn (a table without ``design`` is one of held-out configurations): held-out configurations,
#: and the extrapolation folds that measure a regime's error (calorimeter.projection.validation)
HELD_OUT_DESIGNS = ("loco", "fold")
DRAWN_DESIGNS = (*HELD_OUT_DESIGNS, "scale", "moe-from-dense")
#: signed relative errors beyond this are drawn at the axis' edge
LIMIT = 0.5
LOCO_COLOR, PROSPECTIVE_COLOR = "#1b6ca8", "#d95f02"


def regimes(df: pd.DataFrame) -> pd.Series:
    """Each row's regimes, the base first: the model's ``regime`` column (``; ``-joined) where it has one, else
    ``GPU-bound`` / ``host-bound`` as projected with ``extrapolated`` where the row lies outside the calibration's
    range."""
    if "regime" in df.columns:
        return df["regime"].fillna("").astype(str).str.split("; ")
    host = (df["predicted_host_bound"].fillna(False).astype(bool) if "predicted_host_bound" in df.columns
            else pd.Series(False, index=df.index))
    ext = df["extrapolated"].fillna(False).astype(bool) if "extrapolated" in df.columns else host & False
    return pd.Series([["host-bound" if h else "GPU-bound", *(["extrapolated"] if e else [])]
                      for h, e in zip(host, ext, strict=True)], index=df.index, dtype=object)


def drawn_rows(val: pd.DataFrame) -> pd.DataFrame:
    """The validation rows drawn: predicted by their own engine's calibration (``relation`` ``match``), of a design
    that measures a regime's error where the table names designs (held-out configurations and extrapolation folds,
    :data:`DRAWN_DESIGNS`); predictions across engine builds and GPU types are summarised, not drawn."""
    keep = val["relation"] == "match" if "relation" in val.columns else pd.Series(True, index=val.index)
    if "design" in val.columns:
        keep &= val["design"].isin(DRAWN_DESIGNS)
    return val[keep]


def groups(tables: Tables) -> list[tuple[str, str, pd.DataFrame]]:
    """(label, colour, rows) per group: per GPU type, each base regime's rows inside the calibration's range, then
    per way of lying outside it (GPU count, sequence, ...) every row outside it that way (a row outside it in
    several ways counts in each); then the prospective check's rows per GPU type."""
    out = []
    val = tables.get("validation", pd.DataFrame())
    if not val.empty:
        rows = drawn_rows(val)
        labels = regimes(rows)
        for hw in sorted(set(rows["hardware"].astype(str))):
            mine = labels[rows["hardware"].astype(str) == hw]
            for base in sorted({x[0] for x in mine}, key=lambda b: ("MoE" in b, "host" in b, b)):
                sel = mine[mine.map(lambda x, b=base: x[0] == b and len(x) == 1)]
                if len(sel):
                    out.append((f"{hw.upper()} {base}", LOCO_COLOR, rows.loc[sel.index]))
            for extra in sorted({e for x in mine for e in x[1:]}):
                sel = mine[mine.map(lambda x, e=extra: e in x[1:])]
                out.append((f"{hw.upper()} {extra}", LOCO_COLOR, rows.loc[sel.index]))
    pro = tables.get("prospective", pd.DataFrame())
    if pro is not None and not pro.empty:
        hw = pro["cell_id"].str.extract(r"_(h\d+)-")[0].fillna("?") if "hardware" not in pro else pro["hardware"]
        for h, g in pro.assign(_hw=hw).groupby("_hw", sort=True):
            out.append((f"{str(h).upper()} prospective", PROSPECTIVE_COLOR, g))
    return out


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (module docstring)."""
    res = FigureResult(NAME)
    gs = groups(tables)
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(max(9.0, 0.75 * len(gs) + 2.5), 2.9 * len(PANELS) + 1.6),
                             sharex=True, layout="constrained")
    if not gs:
        for ax in axes:
            ax.text(0.5, 0.5, "no held-out cell", ha="center", va="center", transform=ax.transAxes)
        res.missing.append("no validation fold")
        return fig, res
    rng = np.random.default_rng(0)  # the jitter: deterministic figures
    beyond = 0
    for ax, (metric, label) in zip(axes, PANELS, strict=True):
        err_col, band_col, cov_col = f"{metric}_rel_error", f"{metric}_band", f"{metric}_covered"
        for i, (_name, color, g) in enumerate(gs):
            e = pd.to_numeric(g.get(err_col, pd.Series(dtype=float)), errors="coerce").dropna().to_numpy()
            if e.size == 0:
                ax.text(i, 0, "n/a", ha="center", va="center", fontsize=6, color="#555555")
                continue
            ax.boxplot([np.clip(e, -LIMIT, LIMIT)], positions=[i], widths=0.5, showfliers=False,
                       medianprops={"color": color}, boxprops={"color": color}, whiskerprops={"color": color},
                       capprops={"color": color})
            out = np.abs(e) > LIMIT
            beyond += int(out.sum())
            x = i + rng.uniform(-0.18, 0.18, e.size)
            ax.plot(x[~out], e[~out], "o", ms=2.2, color=color, alpha=0.55, lw=0, gid=f"errors:{metric}")
            ax.plot(x[out], np.sign(e[out]) * LIMIT, "^" if (e[out] > 0).all() else "v", ms=4, color=color, lw=0)
            b = pd.to_numeric(g.get(band_col, pd.Series(dtype=float)), errors="coerce").dropna()
            if len(b):
                half = float(b.median())
                ax.hlines([-half, half], i - 0.32, i + 0.32, colors=color, linestyles="--", lw=1.0,
                          gid=f"band:{metric}")
            cov = g[cov_col].dropna().astype(bool) if cov_col in g.columns else pd.Series(dtype=bool)
            text = f"n={e.size}\n|e| {np.median(np.abs(e)):.1%}" + (f"\nin {cov.mean():.0%}" if len(cov) else "")
            ax.text(i, LIMIT * 1.09, text, ha="center", va="bottom", fontsize=6)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_ylim(-LIMIT * 1.08, LIMIT * 1.5)
        ax.set_xticks(range(len(gs)), [n for n, _, _ in gs], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel(f"{label}:\npredicted / measured - 1", fontsize=8)
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:+.0%}"))
        ax.grid(axis="y", lw=0.3, alpha=0.5)
    val = tables.get("validation", pd.DataFrame())
    drawn = drawn_rows(val) if not val.empty else val
    held = drawn[drawn["design"].isin(HELD_OUT_DESIGNS)] if "design" in drawn.columns else drawn
    n_loco, folds = len(held), held["fold"].nunique() if "fold" in held.columns else 0
    pro = tables.get("prospective", pd.DataFrame())
    fig.suptitle(f"Projection validation: leave one configuration out ({n_loco} held-out runs, {folds} "
                 "configurations" + (f"; {len(drawn) - n_loco} runs of extrapolation folds" if len(drawn) > n_loco
                                     else "") + "; blue)"
                 + (f" and the prospective check ({len(pro)} runs measured after the model was fixed; orange)"
                    if pro is not None and len(pro) else ""), fontsize=9)
    missing = ["box: quartiles; dashed: the band the rows were given (median); in: share inside their band; a row "
               "outside the calibration's range in several ways counts in each of those groups"]
    if beyond:
        missing.append(f"{beyond} errors beyond ±{LIMIT:.0%} drawn at the edge (triangles)")
    other = val.drop(drawn.index) if not val.empty else val
    if len(other):
        med = other["tokens_per_s_per_gpu_rel_error"].abs().median()
        missing.append(f"not drawn: {len(other)} cross-fingerprint predictions (another engine build's or GPU type's "
                       f"calibration; tokens/s median |error| {med:.1%}; in the CSV)")
    bottom = note(fig, missing)
    fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))
    res.n_points = len(drawn) + (len(pro) if pro is not None else 0)
    res.cells = sorted(set(val["cell_id"])) if "cell_id" in val.columns else []
    res.missing = missing
    return fig, res
