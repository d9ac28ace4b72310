"""The regime of a projected row, the band each regime takes from the validation's measured errors, and the machine
class a projection is for.

A row's regime is its base (``dense GPU-bound``, ``dense host-bound`` as the model calls it, ``MoE``) plus how it lies
outside its calibration: a parallel degree or GPU count above the calibrated ones while the layout was calibrated
(``extrapolated in GPU count``), a parallelism (tensor, pipeline, data, expert, ZeRO-3) the calibration has only at
degree 1 (``layout never measured``; a MoE row's degrees count against the calibration's MoE cells alone),
sequence, micro-batch, model size, a MoE model with no MoE cell in the calibration (``MoE never calibrated``),
inter-node links (assumed). Each regime's band is the stated-coverage quantile
of the absolute errors of held-out rows in that regime (:mod:`calorimeter.projection.validation`), and a row takes
the widest band among its regimes, never narrower than the measured spread between machines of its base regime (the
spread a projection that does not know the machine cannot remove). A regime with no measured error is refused with
the reason: the row carries no numbers (``refused``), never a band resting on an assumption.

Why per regime: with one band for every in-range row and the cross-fingerprint error added to every extrapolated one,
dense 4-GPU cells projected from the 1-2 GPU calibration within a few percent carried +-20% bands, and Mixtral cells
projected a fifth to twice too fast lay outside theirs (4x H100: docs/projection.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypedDict

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import HardwareProfile

GPU_BOUND = "dense GPU-bound"
HOST_BOUND = "dense host-bound"
MOE = "MoE"
#: the base regimes (the first label of every row)
BASE_REGIMES: tuple[str, ...] = (GPU_BOUND, HOST_BOUND, MOE)
GPU_COUNT = "extrapolated in GPU count"
SEQUENCE = "extrapolated in sequence"
MICRO_BATCH = "extrapolated in micro-batch"
MODEL_SIZE = "extrapolated in model size"
NEW_LAYOUT = "layout never measured"
MOE_UNSEEN = "MoE never calibrated"
#: calibration-range key -> the extrapolation a value outside its range makes
#: (:data:`calorimeter.projection.calibration.RANGE_KEYS`)
#: the parallel degrees of a layout (ZeRO-3 as 0/1); a MoE cell counts them once more under ``moe_<key>``
#: (:func:`calorimeter.projection.calibration.range_values`): a MoE row's layout is in range only where a MoE cell
#: measured it (its routing, all-to-all and expert GEMMs change with the layout; dense cells time none of them)
PARALLEL_KEYS: tuple[str, ...] = ("tp", "pp", "dp", "ep", "zero3")
MOE_PARALLEL_KEYS: tuple[str, ...] = tuple(f"moe_{k}" for k in PARALLEL_KEYS)
EXTRAPOLATION_OF: dict[str, str] = {**dict.fromkeys((*PARALLEL_KEYS, *MOE_PARALLEL_KEYS, "world_size"), GPU_COUNT),
                                    "seq_len": SEQUENCE, "micro_batch": MICRO_BATCH, "model_params": MODEL_SIZE,
                                    "experts": MODEL_SIZE}
#: the extrapolations, in report order
EXTRAPOLATIONS: tuple[str, ...] = (GPU_COUNT, SEQUENCE, MICRO_BATCH, MODEL_SIZE, NEW_LAYOUT)
#: parallel layouts: a value above a calibrated largest of 1 (0 for ZeRO-3) is a layout never measured
LAYOUT_KEYS: tuple[str, ...] = (*PARALLEL_KEYS, *MOE_PARALLEL_KEYS)


def engine_own(label: str) -> bool:
    """Whether a regime's error is the engine's own: MoE's (its routing, dispatch, expert loop and gradient path are
    DeepSpeed's MoE as this engine runs it), so an error measured on another engine's cells bands none of its rows.
    The others measure the model's structure (collective curves at other group sizes, the pipeline schedule, work
    counts) and pool every engine and GPU type with rows in them."""
    return label.startswith(MOE)

#: the fewest held-out rows a regime's own band is built from (fewer: refused; the dense base regimes pool instead,
#: :data:`calorimeter.projection.bands.BAND_MIN_CELLS`)
MIN_REGIME_ROWS = 5


def band_key(base: str, label: str) -> str:
    """The key of a regime's band: a base regime's own, an extrapolation's within its base regime
    (``dense GPU-bound, extrapolated in sequence``: a GPU-bound and a host-bound row err differently beyond the range,
    and MoE errors never band a dense row), ``MoE never calibrated`` its own."""
    return label if label in (base, MOE_UNSEEN) else f"{base}, {label}"


@dataclass(frozen=True)
class Regime:
    """One row's regimes.

    Attributes:
        labels: the base regime first, then every extrapolation (:data:`EXTRAPOLATIONS`, :data:`MOE_UNSEEN`).
        factor: extrapolation -> how far beyond the calibration's range the row lies (value over the calibrated
            largest, or smallest over value below it; the farthest key of that extrapolation).
        inter_node: the cell spans nodes (links from the hardware profile: assumed, never measured).
    """

    labels: tuple[str, ...]
    factor: dict[str, float] = field(default_factory=dict)
    inter_node: bool = False

    @property
    def base(self) -> str:
        """The base regime."""
        return self.labels[0]

    @property
    def extrapolations(self) -> tuple[str, ...]:
        """Every regime but the base."""
        return self.labels[1:]

    def band_keys(self) -> list[tuple[str, str]]:
        """(band key, regime) of every regime of the row (:func:`band_key`)."""
        return [(band_key(self.base, lab), lab) for lab in self.labels]

    def describe(self) -> str:
        """``dense GPU-bound; extrapolated in GPU count x2``."""
        return "; ".join(f"{lab} x{self.factor[lab]:.3g}" if lab in self.factor else lab for lab in self.labels)


def regime_of(values: dict[str, float], ranges: dict[str, list[float]], host_bound: bool, nodes: int = 1
              ) -> Regime:
    """The regime of a row with these range values (:func:`calorimeter.projection.calibration.range_values`) under a
    calibration of these ranges, as the model calls it host-bound or not."""
    base = MOE if values.get("experts", 0) > 0 else (HOST_BOUND if host_bound else GPU_BOUND)
    found: dict[str, float] = {}
    layout_new, count_keys = False, []
    for key, v in values.items():
        lo_hi = ranges.get(key)
        if not lo_hi or lo_hi[0] <= v <= lo_hi[1]:
            continue
        lo, hi = lo_hi
        if key == "experts" and hi <= 0:
            found[MOE_UNSEEN] = math.inf
            continue
        if key in LAYOUT_KEYS and v > hi and hi <= (0 if key.endswith("zero3") else 1):
            layout_new = True
            continue
        label = EXTRAPOLATION_OF[key]
        f = (v / hi if v > hi else lo / v) if min(lo, hi, v) > 0 else math.inf
        found[label] = max(found.get(label, 1.0), f)
        if label == GPU_COUNT:
            count_keys.append(key)
    if layout_new:
        found[NEW_LAYOUT] = math.inf
        if count_keys == ["world_size"]:  # more GPUs only because of the new layout: that layout's regime
            del found[GPU_COUNT]
    labels = [base] + [lab for lab in (*EXTRAPOLATIONS, MOE_UNSEEN) if lab in found]
    return Regime(tuple(labels), {lab: f for lab, f in found.items() if math.isfinite(f)}, nodes > 1)


class RegimeBandDict(TypedDict, total=False):
    """A :class:`RegimeBand` as calibration.json holds it (keys absent in older files take the defaults)."""

    band: dict[str, float]
    rows: int
    factor: float
    sources: list[str]
    reason: str
    pure: bool


@dataclass
class RegimeBand:
    """One regime's measured band.

    Attributes:
        band: metric -> relative half-width at the stated coverage (absent: never measured for that metric).
        rows: held-out rows it was measured on.
        factor: for an extrapolation, the median of those rows' :attr:`Regime.factor` (a row farther out takes the
            band times its doublings over these: ``log2 f_row / log2 f_measured``).
        pure: for an extrapolation, whether its rows lie outside the range in that way alone.
        sources: where the rows came from (``<GPU type>/<fingerprint>: <design>``).
        reason: why there is no band (the row is refused), empty where there is one.
    """

    band: dict[str, float] = field(default_factory=dict)
    rows: int = 0
    factor: float = math.nan
    sources: list[str] = field(default_factory=list)
    reason: str = ""
    pure: bool = True

    def to_dict(self) -> RegimeBandDict:
        """JSON-ready."""
        return {"band": self.band, "rows": self.rows, "factor": self.factor, "sources": self.sources,
                "reason": self.reason, "pure": self.pure}

    @classmethod
    def from_dict(cls, d: RegimeBandDict) -> RegimeBand:
        """Inverse of :meth:`to_dict`."""
        return cls(dict(d.get("band", {})), int(d.get("rows", 0)), float(d.get("factor", math.nan)),
                   list(d.get("sources", [])), str(d.get("reason", "")), bool(d.get("pure", True)))


def scaled(band: float, rb: RegimeBand, row_factor: float | None) -> float:
    """A regime's band for a row ``row_factor`` beyond the range: the measured band times how many of the measured
    distances (in doublings) the row lies out, never less than the band itself."""
    if row_factor is None or not (rb.factor > 1.0) or not (row_factor > 1.0):
        return band
    return band * max(1.0, math.log2(row_factor) / math.log2(rb.factor))


@dataclass(frozen=True)
class BandChoice:
    """A row's band for one metric: the half-width (NaN: not measured for that metric), the regime that set it, and
    the reason the row is refused (empty: not refused)."""

    half: float
    basis: str
    refused: str


def choose_band(regime: Regime, bands: dict[str, RegimeBand], metric: str,
                machine_floor: dict[str, float] | None = None) -> BandChoice:
    """The widest of the row's regimes' bands for ``metric`` (:meth:`Regime.band_keys`; each scaled by how far the row
    lies out), at least the machine spread of its base regime (``machine_floor``: metric -> half-width); refused where
    a regime has no band at all (its :attr:`RegimeBand.reason`; a MoE row of a calibration without MoE cells: that
    reason alone)."""
    unseen = bands.get(MOE_UNSEEN)
    if MOE_UNSEEN in regime.labels and (unseen is None or not unseen.band):  # the reason that matters, alone
        why = unseen.reason if unseen is not None and unseen.reason else "no measured error"
        return BandChoice(math.nan, "", f"{MOE_UNSEEN}: {why}")
    half, basis, refused = -math.inf, "", []
    for key, label in regime.band_keys():
        rb = bands.get(key)
        if rb is None or not rb.band:
            refused.append(f"{key}: {rb.reason if rb is not None and rb.reason else 'no measured error'}")
            continue
        b = scaled(rb.band.get(metric, math.nan), rb, regime.factor.get(label))
        if not math.isfinite(b):
            return BandChoice(math.nan, f"{key}: {metric} never measured", "; ".join(refused))
        if b > half:
            half, basis = b, f"{key} ({rb.rows} held-out rows)"
    if refused:
        return BandChoice(math.nan, "", "; ".join(refused))
    floor = (machine_floor or {}).get(metric, math.nan)
    if math.isfinite(floor) and floor > half:
        half, basis = floor, f"spread between machines ({regime.base})"
    return BandChoice(half, basis, "")


#: the projected row's column of how far it lies beyond its calibration, per extrapolation (1: inside)
BEYOND_COLUMNS: dict[str, str] = {GPU_COUNT: "beyond_gpu_count", SEQUENCE: "beyond_sequence",
                                  MICRO_BATCH: "beyond_micro_batch", MODEL_SIZE: "beyond_model_size"}


def regime_columns(regime: Regime) -> dict[str, Any]:
    """A row's regime columns: ``regime`` (its regimes, ``; ``-joined, the base first) and :data:`BEYOND_COLUMNS`."""
    out: dict[str, Any] = {"regime": "; ".join(regime.labels)}
    for label, col in BEYOND_COLUMNS.items():
        out[col] = regime.factor.get(label, 1.0)
    return out


def regime_from_columns(row: dict[str, Any]) -> Regime:
    """Inverse of :func:`regime_columns` (a validation table's row)."""
    labels = tuple(str(row["regime"]).split("; "))
    return Regime(labels, {lab: float(row[col]) for lab, col in BEYOND_COLUMNS.items()
                           if lab in labels and col in row and float(row[col]) > 1.0})


def machine_class(cell: Cell, hw: HardwareProfile, network: Any = None) -> str:
    """The machine class a row projects for: GPU type, GPUs per node, intra-node link; where it spans nodes, their
    count and network (``network``: :class:`calorimeter.projection.collectives.Network`; assumed, never measured)."""
    s = f"{hw.name.upper()} {hw.memory_gb:.0f} GB, {cell.gpus_per_node} per node, {hw.interconnect}"
    if cell.nodes > 1:
        bw = f"{network.nic_gbit_s_per_gpu:g} Gbit/s per GPU, {network.source}" if network is not None else "network"
        s += f"; {cell.nodes} nodes over {bw} (assumed)"
    return s


__all__ = ["BASE_REGIMES", "BEYOND_COLUMNS", "EXTRAPOLATIONS", "EXTRAPOLATION_OF", "GPU_BOUND", "GPU_COUNT",
           "HOST_BOUND", "MICRO_BATCH", "MIN_REGIME_ROWS", "MODEL_SIZE", "MOE", "MOE_UNSEEN", "NEW_LAYOUT",
           "SEQUENCE", "BandChoice", "Regime", "RegimeBand", "RegimeBandDict", "band_key", "choose_band",
           "engine_own", "machine_class", "regime_columns", "regime_from_columns", "regime_of", "scaled"]
