"""Figures: one module per figure, each a function of the aggregated tables.

Every figure module has the same interface: ``NAME`` (the output name), ``TABLES`` (the tables it reads) and
``draw(tables) -> (figure, FigureResult)``, which draws what exists and says what is missing; figures that draw a
selection of cells also have ``select(runs)`` (named in their report captions). :func:`render` draws one figure and
saves it (PNG and PDF, deterministic); the workflow's figure rules, the CLI and the benchmark use it.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from calorimeter.figures import (
    data_quality,
    fig04_parallelism,
    fig05_links,
    fig08_optimization,
    fig10_kernels,
    fig13_microbatch,
    fig15_stages,
    fig17_sm_clock,
    fig17_temperature,
    placement,
    projection,
    projection_validation,
    scale_compare,
    throttle,
    throughput,
    timeline,
    training,
)
from calorimeter.figures.common import FigureResult, Tables, not_drawn_figure, save, training_only

#: every figure of the report, by output name, in report order (the study's figures in its order, then the others)
FIGURES: dict[str, ModuleType] = {m.NAME: m for m in (
    throughput, training, fig04_parallelism, fig05_links, fig08_optimization, fig10_kernels, fig13_microbatch,
    fig15_stages, fig17_temperature, fig17_sm_clock, scale_compare, timeline, throttle, data_quality, placement)}


#: figures about every cell of any kind (the data quality of a calibration cell matters too)
ALL_KINDS = ("data_quality",)

#: the projection's figures (``snakemake projection``): drawn from the projection's tables, not the sweep's
PROJECTION_FIGURES: dict[str, ModuleType] = {m.NAME: m for m in (projection_validation, projection)}


def render(name: str, tables: Tables, png: Path, pdf: Path | None = None) -> FigureResult:
    """Draw figure ``name`` (of :data:`FIGURES` or :data:`PROJECTION_FIGURES`) from the tables and save it as PNG
    (and PDF). A figure whose ``needs(tables)`` names what the sweep lacks (GPU telemetry on CPU ranks, kernel
    traces) is drawn as that sentence alone, without axes, and its result says so (``not_drawn``)."""
    notes: list[str] = []
    module = {**FIGURES, **PROJECTION_FIGURES}[name]
    if name in FIGURES and name not in ALL_KINDS:  # training figures never draw a calibration cell as a model
        tables, notes = training_only(tables)
    why = module.needs(tables) if hasattr(module, "needs") else ""
    if why:
        fig, res = not_drawn_figure(getattr(module, "TITLE", name), why), FigureResult(name, not_drawn=why)
    else:
        fig, res = module.draw(tables)
    res.missing = [*res.missing, *notes]
    save(fig, png, pdf)
    return res
