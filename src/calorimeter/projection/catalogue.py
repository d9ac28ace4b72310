"""The calibration catalogue (``config/calibration.yaml``): which committed measurements the projection is fitted on
by default, the engine build and regimes of each, the folds of the earlier validation design, and the set that prices
sweeps before they run. Data, not code: a new measurement set is an entry in the file.

Light (yaml, no pandas): ``calorimeter plan`` reads the pricing set through it. The file is found under the root given
(the workflow's and ``bench/``'s checkout), else in the checkout this package runs from.
"""

from __future__ import annotations

import functools
import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import yaml

from calorimeter.plan.kinds import COLLECTIVES_PARQUET
from calorimeter.projection.regimes import BASE_REGIMES

#: the catalogue, relative to the repository root
CATALOGUE_FILE = "config/calibration.yaml"
#: calibration sets join the default calibration as soon as they are committed (the calibration rule reruns on them):
#: every sweep folder with aggregated tables inside a set folder named ``<gpu>x<gpus>-calibration-<date>``
#: (config/reference/<gpu>-calibration.yaml, a 4-GPU layout set, a MoE set: adding one is data, not code)
CALIBRATION_SWEEP_GLOB = "results/reference/*-calibration-*/*"
#: ``collectives`` sets join the default curves likewise: every sweep folder holding ``collectives`` cells inside a
#: set folder named ``<gpu>x<gpus>-collectives-<date>`` (group sizes 2 and 4 of a 4-GPU node next to the 2-GPU ones)
COLLECTIVES_SWEEP_GLOB = "results/reference/*-collectives-*/*"


def repo_root() -> Path:
    """The repository this package runs from (src/calorimeter/projection/catalogue.py -> the root)."""
    return Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class CatalogueSet:
    """One entry: sweep folders measured by one engine build.

    Attributes:
        sweeps: sweep folders relative to the repository root, in reading order.
        note: what was measured and why.
        engine: the engine build (a key of :attr:`Catalogue.engines`; empty for collective curves).
        regimes: the base regimes its cells were measured in (:data:`~calorimeter.projection.regimes.BASE_REGIMES`;
            checked against the cells by :func:`calorimeter.projection.measured.catalogue_disagreements`).
    """

    sweeps: tuple[str, ...]
    note: str
    engine: str = ""
    regimes: tuple[str, ...] = ()


class FoldDict(TypedDict):
    """A fold as plain data (a sweep config's ``projection.validation`` entry)."""

    name: str
    train: list[str]
    test: list[str]


@dataclass(frozen=True)
class Fold:
    """Train on ``train`` sweep folders, predict the cells of ``test`` (a sweep config's ``projection.validation``
    entry; the catalogue's ``folds``)."""

    name: str
    train: tuple[str, ...]
    test: tuple[str, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fold:
        """From a ``projection.validation`` entry (or the catalogue's)."""
        return cls(str(d["name"]), tuple(str(p) for p in d["train"]), tuple(str(p) for p in d["test"]))

    def to_dict(self) -> FoldDict:
        """As a ``projection.validation`` entry (plain data: a Snakemake rule's params)."""
        return {"name": self.name, "train": list(self.train), "test": list(self.test)}


@dataclass(frozen=True)
class Catalogue:
    """The parsed catalogue file.

    Attributes:
        engines: engine build -> what it is.
        calibration: the default calibration sets.
        collectives: the default collective-curve sets.
        folds: the earlier validation design's folds.
        prices: the committed set whose ``calibration.json`` and ``timing.json`` price sweeps before they run.
        path: the file read.
    """

    engines: dict[str, str]
    calibration: tuple[CatalogueSet, ...]
    collectives: tuple[CatalogueSet, ...]
    folds: tuple[Fold, ...]
    prices: str
    path: Path

    @property
    def calibration_sweeps(self) -> tuple[str, ...]:
        """Every calibration sweep, in the catalogue's order."""
        return tuple(s for e in self.calibration for s in e.sweeps)

    @property
    def collectives_sweeps(self) -> tuple[str, ...]:
        """Every collective-curve sweep, in the catalogue's order."""
        return tuple(s for e in self.collectives for s in e.sweeps)

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: Path) -> Catalogue:
        """From the parsed file.

        Raises:
            ValueError: a missing or misspelt key, an entry without sweeps or note, an engine the file does not
                define, a regime not a base regime (the message names the file, the entry and the key).
        """
        def fail(where: str, why: str) -> ValueError:
            return ValueError(f"{path}: {where}: {why}")

        known = {"engines", "calibration", "collectives", "folds", "prices"}
        if not isinstance(d, dict) or set(d) - known or "prices" not in d:
            raise fail("top level", f"expected the keys {sorted(known)} (prices required), got {sorted(d or {})}")
        engines = {str(k): str(v) for k, v in (d.get("engines") or {}).items()}

        def entries(key: str, with_engine: bool) -> tuple[CatalogueSet, ...]:
            out = []
            for i, e in enumerate(d.get(key) or []):
                where = f"{key}[{i}]"
                allowed = {"sweeps", "note", *(("engine", "regimes") if with_engine else ())}
                if not isinstance(e, dict) or set(e) - allowed:
                    got = sorted(e) if isinstance(e, dict) else e
                    raise fail(where, f"expected the keys {sorted(allowed)}, got {got!r}")
                if not e.get("sweeps") or not e.get("note"):
                    raise fail(where, "needs sweeps (a list of sweep folders) and a note")
                if with_engine and e.get("engine") not in engines:
                    raise fail(f"{where}.engine", f"{e.get('engine')!r} is not one of the engines {sorted(engines)}")
                bad = [r for r in e.get("regimes") or [] if r not in BASE_REGIMES]
                if bad or (with_engine and not e.get("regimes")):
                    raise fail(f"{where}.regimes", f"{bad or 'none'}: expected some of {list(BASE_REGIMES)}")
                out.append(CatalogueSet(tuple(str(s) for s in e["sweeps"]), str(e["note"]).strip(),
                                        str(e.get("engine") or ""), tuple(e.get("regimes") or ())))
            return tuple(out)

        folds = []
        for i, f in enumerate(d.get("folds") or []):
            if not isinstance(f, dict) or set(f) != {"name", "train", "test"}:
                raise fail(f"folds[{i}]", "expected the keys name, train, test")
            folds.append(Fold.from_dict(f))
        return cls(engines, entries("calibration", True), entries("collectives", False), tuple(folds),
                   str(d["prices"]), path)


def catalogue_path(root: str | Path = ".") -> Path:
    """The catalogue under ``root``, else the one of the checkout this package runs from."""
    here = Path(root) / CATALOGUE_FILE
    return here if here.is_file() else repo_root() / CATALOGUE_FILE


@functools.lru_cache(maxsize=8)
def _read(path: Path, mtime_ns: int) -> Catalogue:
    return Catalogue.from_dict(yaml.safe_load(path.read_text()), path)


def catalogue(root: str | Path = ".") -> Catalogue:
    """The catalogue found from ``root`` (:func:`catalogue_path`), parsed (once per file version).

    Raises:
        ValueError: the file is malformed (:meth:`Catalogue.from_dict`).
    """
    path = catalogue_path(root)
    return _read(path, path.stat().st_mtime_ns)


def _joined(root: str | Path, pattern: str, holds: str) -> list[str]:
    """Sweep folders matching ``pattern`` under ``root`` that hold ``holds`` (a glob), relative to ``root``."""
    return sorted(str(Path(p).relative_to(root)) for p in glob.glob(str(Path(root) / pattern))
                  if glob.glob(str(Path(p) / holds)))


def default_calibration(root: str | Path = ".") -> tuple[str, ...]:
    """The catalogue's calibration sweeps plus every committed calibration sweep (relative to ``root``)."""
    listed = catalogue(root).calibration_sweeps
    found = _joined(root, CALIBRATION_SWEEP_GLOB, "tables/runs.parquet")
    return (*listed, *(p for p in found if p not in listed))


def default_collectives(root: str | Path = ".") -> tuple[str, ...]:
    """The catalogue's collective-curve sweeps plus every committed ``collectives`` set (relative to ``root``)."""
    listed = catalogue(root).collectives_sweeps
    found = _joined(root, COLLECTIVES_SWEEP_GLOB, f"cells/*/{COLLECTIVES_PARQUET}")
    return (*listed, *(p for p in found if p not in listed))


__all__ = ["CALIBRATION_SWEEP_GLOB", "CATALOGUE_FILE", "COLLECTIVES_SWEEP_GLOB", "Catalogue",
           "CatalogueSet", "Fold", "catalogue", "catalogue_path", "default_calibration",
           "default_collectives", "repo_root"]
