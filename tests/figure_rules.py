"""Checks of the rules every figure follows, on a drawn matplotlib figure: no two texts overlap, no
text runs off the canvas."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.text import Text


def visible_texts(fig: plt.Figure) -> list[tuple[Text, tuple[float, float, float, float]]]:
    """Every visible, non-empty text of the figure (titles, labels, tick labels, annotations, legend entries)
    with its bounding box in display pixels (x0, y0, x1, y1)."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    # tick labels: only those of ticks drawn (inside the view interval); matplotlib keeps others around
    all_ticks, drawn = set(), set()
    for ax in fig.axes:
        for axis in ax._axis_map.values():  # noqa: SLF001 - the x/y (and polar) axes of an Axes
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                all_ticks |= {tick.label1, tick.label2}
            if not axis.get_visible() or not ax.axison:  # e.g. the x axis of a twinx, axes drawn with axis("off")
                continue
            for tick in axis._update_ticks():  # noqa: SLF001 - the ticks matplotlib draws
                drawn |= {lab for lab in (tick.label1, tick.label2) if tick.get_visible() and lab.get_visible()}
    out = []
    for t in fig.findobj(Text):
        if t in all_ticks and t not in drawn:
            continue
        if not t.get_visible() or not t.get_text().strip():
            continue
        if t.axes is not None and not t.axes.get_visible():
            continue
        bb = t.get_window_extent(r)
        if bb.width <= 0 or bb.height <= 0:
            continue
        out.append((t, (bb.x0, bb.y0, bb.x1, bb.y1)))
    return out


def text_overlaps(fig: plt.Figure, tol_px: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes overlap by more than ``tol_px`` pixels in both directions."""
    items = visible_texts(fig)
    if len(items) < 2:
        return []
    b = np.array([box for _, box in items])
    ox = np.minimum(b[:, None, 2], b[None, :, 2]) - np.maximum(b[:, None, 0], b[None, :, 0])
    oy = np.minimum(b[:, None, 3], b[None, :, 3]) - np.maximum(b[:, None, 1], b[None, :, 1])
    hit = (ox > tol_px) & (oy > tol_px)
    i, j = np.nonzero(np.triu(hit, 1))
    return [(items[a][0].get_text(), items[c][0].get_text()) for a, c in zip(i, j, strict=True)]


def texts_off_canvas(fig: plt.Figure, tol_px: float = 1.0) -> list[str]:
    """Texts that extend beyond the figure's canvas (cut off in the saved file)."""
    w, h = fig.canvas.get_width_height()
    return [t.get_text() for t, (x0, y0, x1, y1) in visible_texts(fig)
            if x0 < -tol_px or y0 < -tol_px or x1 > w + tol_px or y1 > h + tol_px]


def _number(text: str) -> bool:
    try:
        float(text.replace("\u2212", "-").replace(",", "").replace("$", "").strip() or "x")
    except ValueError:
        return False
    return True


def _has_data(ax: plt.Axes) -> bool:
    """Whether an axes shows anything measured: a line with a finite point, a bar of non-zero height, an image, a
    collection with points."""
    from matplotlib.patches import Rectangle

    for line in ax.get_lines():
        y = np.asarray(line.get_ydata(), dtype=float)
        if y.size and np.isfinite(y).any() and not str(line.get_gid() or "").startswith(("band", "zero")):
            return True
    for p in ax.patches:
        if isinstance(p, Rectangle) and p.get_height() not in (0, 0.0) and np.isfinite(p.get_height()) \
                and not str(p.get_gid() or "").startswith(("band", "nodata")):
            return True
    return bool(ax.get_images()) or any(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets"))


def numeric_axes_without_data(fig: plt.Figure) -> list[str]:
    """Axes that show a numeric value scale (y tick labels that are numbers) but draw nothing measured: an invented
    axis (a -0.04..0.04 range reads as a measured zero or a negative temperature)."""
    fig.canvas.draw()
    out = []
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_visible() and t.get_text().strip()]
        shown = ax.yaxis.get_visible() and any(
            tick.label1.get_visible() or tick.label2.get_visible() for tick in ax.yaxis.get_major_ticks())
        if shown and labels and all(_number(t) for t in labels) and not _has_data(ax):
            out.append(f"{ax.get_title() or ax.get_ylabel() or ax.get_gid() or 'axes'}: {labels[0]}..{labels[-1]}")
    return out
