"""The ``projection:`` block of a sweep config, resolved: one definition of every key's default.

The schema (``src/calorimeter/plan/config.schema.yaml``, ``projection``) describes the keys; the workflow
(``workflow/rules/projection.smk``) and ``bench/`` read them only through :meth:`ProjectionSettings.from_config`, so
schema and code cannot disagree on a default (tests/test_projection_settings.py checks every key).
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calorimeter.plan.kinds import COLLECTIVES_PARQUET
from calorimeter.projection.fingerprint import KEY_FIELDS
from calorimeter.projection.validation import COVERAGE

#: the H200 sets of 2026-11-21, before the engine recorded its kernels (the scale folds of projection.sweep)
SETS_2026_11_21: tuple[str, ...] = (
    "results/reference/h200x2-2026-11-21/gpu-llama8b",
    "results/reference/h200x2-moe-tp-check-2026-11-21/h200x2-moe-tp-check",
    "results/reference/h200x4-2026-11-21/h200x4-parallelism",
    "results/reference/h200x8-2026-11-21/h200x8-parallelism",
)
#: the committed measurements the model is calibrated on by default: every engine build the project has records of
#: (one calibration per GPU type and fingerprint is fitted from them; the newest that matches the engine projected
#: for is used). The current engine (2026-11-22 on: cuDNN attention, Liger kernels, symm_mem TP overlap) on 2x H200
#: (findings, TP overlap, placement, fidelity, engine benchmark) and 1x H100 (findings); the 2026-11-21 records
#: (before the engine recorded its kernels) for the cross-fingerprint error and as the fallback of other engines.
DEFAULT_CALIBRATION: tuple[str, ...] = (
    "results/reference/findings-2026-11-23/h200x2-findings",
    "results/reference/findings-2026-11-23/h100x1-findings",
    "results/reference/h200x2-tp-overlap-2026-11-23/h200x2-tp-overlap",
    "results/reference/h200x2-placement-2026-11-23b/h200x2-placement",
    "results/reference/h200x2-fidelity-2026-11-23/h200x2-fidelity",
    "results/reference/h200x2-engine-speed-2026-11-23c",
    # 2026-11-25: the steady findings sweep on one H200 (with LoRA cells) and the H100 findings reproduction
    "results/reference/findings-steady-2026-11-25/h200x1-findings-steady",
    "results/reference/h100x1-findings-repro-2026-11-25/h100x1-findings",
    # 2026-11-26: the steady 2-GPU findings set (ZeRO-3 and TP2+SP overlap on/off, recompute, micro-batch)
    "results/reference/findings-steady-2026-11-26/h200x2-findings-steady",
    # 2026-11-27: the H100 twin of the steady 1-GPU sweep (three repetition passes)
    "results/reference/findings-steady-2026-11-25/h100x1-findings-steady",
    # 2026-11-27: the host-bound regime on 2x H200, steady and repeated (TP2+SP overlap over sequence 1024-8192 and
    # micro-batch 1-4, symmetric memory, and its ring twin at 2048 / 4096)
    "results/reference/hostbound-2026-11-27/h200x2-hostbound",
    "results/reference/hostbound-2026-11-27/h200x2-hostbound-ring",
    # 2026-11-27, third session: the 2026-11-23 host-bound configurations at 2048 measured steady on a fourth machine
    # (and one again there), and the measurement-protocol A/B on a fifth (TP2+SP overlap off at 2048, four runs)
    "results/reference/hostbound-2026-11-27/h200x2-hostbound-2048",
    "results/reference/hostbound-2026-11-27/rerun/h200x2-hostbound-2048",
    "results/reference/hostbound-2026-11-27/ab/ab-fixed-0/h200x2-hostbound-ab-fixed",
    "results/reference/hostbound-2026-11-27/ab/ab-steady-1/h200x2-hostbound-ab-steady",
    "results/reference/hostbound-2026-11-27/ab/ab-nosampler-2/h200x2-hostbound-ab-nosampler",
    "results/reference/hostbound-2026-11-27/ab/ab-fixed-3/h200x2-hostbound-ab-fixed",
    # 2026-11-27, fourth session: TP2+SP overlap off and ZeRO-3 dp2 at 2048, three repetitions each on a sixth 2x H200
    # machine and on 2x H100 (the first 2-GPU H100 cells of the current engine), with the host probes in the records
    "results/reference/hostprobe-2026-11-27/h200x2-hostprobe",
    "results/reference/hostprobe-2026-11-27/h100x2-hostprobe",
    # 2026-11-27, sixth session: sequence 16384 on 2x H200 (outside every earlier calibration's range) and ZeRO-3 dp2
    # at micro-batch 2; first projected prospectively (bench/projection_prospective.py), then added here
    "results/reference/h200x2-extrapolation-2026-11-27f/h200x2-extrapolation",
    "results/reference/h200x2-zero3-check-2026-11-27f/h200x2-zero3-check",
    *SETS_2026_11_21,
)
#: calibration sets join the default calibration as soon as they are committed (the calibration rule reruns on them):
#: every sweep folder with aggregated tables inside a set folder named ``<gpu>x<gpus>-calibration-<date>``
#: (config/reference/<gpu>-calibration.yaml, a 4-GPU layout set, a MoE set: adding one is data, not code)
CALIBRATION_SWEEP_GLOB = "results/reference/*-calibration-*/*"
#: ``collectives`` sets join the default curves likewise: every sweep folder holding ``collectives`` cells inside a
#: set folder named ``<gpu>x<gpus>-collectives-<date>`` (group sizes 2 and 4 of a 4-GPU node next to the 2-GPU ones)
COLLECTIVES_SWEEP_GLOB = "results/reference/*-collectives-*/*"

#: the default collective curves: the committed NCCL sweep (``kind: collectives``) on 2x H200, and every committed
#: ``collectives`` set (:data:`COLLECTIVES_SWEEP_GLOB`); an unmeasured group size carries the nearest measured one's
#: bus bandwidth over, and traced collectives fill sizes they do not cover
DEFAULT_COLLECTIVES: tuple[str, ...] = (
    "results/reference/h200x2-collectives-2026-11-23/h200x2-collectives",
)


def default_calibration(root: str | Path = ".") -> tuple[str, ...]:
    """:data:`DEFAULT_CALIBRATION` plus every committed calibration sweep (relative to ``root``)."""
    found = sorted(str(Path(p).relative_to(root)) for p in glob.glob(str(Path(root) / CALIBRATION_SWEEP_GLOB))
                   if (Path(p) / "tables" / "runs.parquet").is_file())
    return (*DEFAULT_CALIBRATION, *(p for p in found if p not in DEFAULT_CALIBRATION))


def default_collectives(root: str | Path = ".") -> tuple[str, ...]:
    """:data:`DEFAULT_COLLECTIVES` plus every committed ``collectives`` set (relative to ``root``)."""
    found = sorted(str(Path(p).relative_to(root)) for p in glob.glob(str(Path(root) / COLLECTIVES_SWEEP_GLOB))
                   if glob.glob(str(Path(p) / "cells" / "*" / COLLECTIVES_PARQUET)))
    return (*DEFAULT_COLLECTIVES, *(p for p in found if p not in DEFAULT_COLLECTIVES))


@dataclass(frozen=True)
class ProjectionSettings:
    """The resolved ``projection:`` block.

    Attributes:
        calibration: sweep folders the model is calibrated on (default :func:`default_calibration`).
        collectives: sweep folders of ``collectives`` cells; absent: :func:`default_collectives`; ``[]``: none (the
            curves come from the kernel traces alone).
        network: inter-node network override (None: the hardware profile's).
        validation: folds of sweep folders; empty (default): leave-one-configuration-out over the calibration cells.
        engine: fingerprint fields of the engine projected for (``{}``, default: the newest engine recorded for
            the cell's GPU type).
        coverage: the stated coverage of every error band.
    """

    calibration: tuple[str, ...] = field(default_factory=default_calibration)
    collectives: tuple[str, ...] = field(default_factory=default_collectives)
    network: dict[str, float] | None = None
    validation: tuple[dict[str, Any], ...] = ()
    engine: dict[str, str] = field(default_factory=dict)
    coverage: float = COVERAGE

    @classmethod
    def from_config(cls, config: dict[str, Any] | None, root: str | Path = ".") -> ProjectionSettings:
        """From a (validated) sweep config; keys absent or null take the defaults above.

        Raises:
            ValueError: an ``engine`` key that is not a fingerprint field, or a coverage outside (0, 1).
        """
        p = dict((config or {}).get("projection") or {})
        engine = dict(p.get("engine") or {})
        bad = sorted(set(engine) - set(KEY_FIELDS))
        if bad:
            raise ValueError(f"projection.engine: unknown key(s) {bad}; expected some of {list(KEY_FIELDS)}")
        coverage = float(p["coverage"]) if p.get("coverage") is not None else COVERAGE
        if not 0.0 < coverage < 1.0:
            raise ValueError(f"projection.coverage: {coverage} is not within (0, 1)")
        return cls(calibration=tuple(p["calibration"]) if p.get("calibration") else default_calibration(root),
                   collectives=(tuple(p["collectives"]) if p.get("collectives") is not None
                                else default_collectives(root)),
                   network=dict(p["network"]) if p.get("network") else None,
                   validation=tuple(p.get("validation") or ()), engine={k: str(v) for k, v in engine.items()},
                   coverage=coverage)


__all__ = ["CALIBRATION_SWEEP_GLOB", "COLLECTIVES_SWEEP_GLOB", "DEFAULT_CALIBRATION", "DEFAULT_COLLECTIVES",
           "SETS_2026_11_21", "ProjectionSettings", "default_calibration", "default_collectives"]
