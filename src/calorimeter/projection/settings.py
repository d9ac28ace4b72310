"""The ``projection:`` block of a sweep config, resolved: one definition of every key's default.

The schema (``src/calorimeter/plan/config.schema.yaml``, ``projection``) describes the keys; the workflow
(``workflow/rules/projection.smk``) and ``bench/`` read them only through :meth:`ProjectionSettings.from_config`, so
schema and code cannot disagree on a default (tests/test_projection_settings.py checks every key). The default
measurements are data: the calibration catalogue (:mod:`calorimeter.projection.catalogue`, config/calibration.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calorimeter.projection.catalogue import Fold, default_calibration, default_collectives
from calorimeter.projection.collectives import NetworkOverride
from calorimeter.projection.fingerprint import KEY_FIELDS
from calorimeter.projection.targets import COVERAGE


@dataclass(frozen=True)
class ProjectionSettings:
    """The resolved ``projection:`` block.

    Attributes:
        calibration: sweep folders the model is calibrated on (default: the catalogue's,
            :func:`~calorimeter.projection.catalogue.default_calibration`).
        collectives: sweep folders of ``collectives`` cells; absent: the catalogue's
            (:func:`~calorimeter.projection.catalogue.default_collectives`); ``[]``: none (the curves come from the
            kernel traces alone).
        network: inter-node network override (None: the hardware profile's).
        validation: folds of sweep folders; empty (default): leave-one-configuration-out over the calibration cells.
        engine: fingerprint fields of the engine projected for (``{}``, default: the newest engine recorded for
            the cell's GPU type).
        coverage: the stated coverage of every error band.
    """

    calibration: tuple[str, ...] = field(default_factory=default_calibration)
    collectives: tuple[str, ...] = field(default_factory=default_collectives)
    network: NetworkOverride | None = None
    validation: tuple[Fold, ...] = ()
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
                   network=NetworkOverride(**p["network"]) if p.get("network") else None,
                   validation=tuple(Fold.from_dict(f) for f in p.get("validation") or ()),
                   engine={k: str(v) for k, v in engine.items()},
                   coverage=coverage)


__all__ = ["ProjectionSettings"]
