"""The engine fingerprint of a measured cell: what its kernel times, collective times and power depend on; the one
reader of a record's ``engine`` block (the projection's calibrations and ``calorimeter compare`` both use it).

Read from the cell's record (:class:`~calorimeter.records.run_record.RunRecord`: ``engine`` and ``provenance``) and
its telemetry (power limit). The engine build (the key, :data:`KEY_FIELDS`):

* ``gpu``: the device name of rank 0 (``NVIDIA H200``);
* ``power_limit_w``: the GPUs' power limit as the node sampler read it (median), rounded to a watt;
* ``torch``, ``deepspeed``, ``megatron_core``: the package versions the ranks ran;
* ``attention``: ``auto`` where the engine chose the attention kernel per shape (``attention: auto``, the default:
  it times the backends at the cell's shape, so one engine build runs cuDNN at one sequence and another backend at
  the next: a policy, one fingerprint), else the kernel that ran (``engine.kernels.attention``; ``default`` resolved
  to the backend PyTorch's default picked, ``engine.kernel_choice.attention_probe.pytorch_default``);
* ``fused``: the fused elementwise kernels (``liger``, ``compile``, ``eager``).

What the cell ran (properties of the cell, not of the engine build: a calibration lists the mechanisms its cells ran
and the key leaves them out; a reproduction is compared on them, :meth:`Fingerprint.ran`):

* ``tp_overlap``: the tensor-parallel overlap mechanism (``symm_mem``, ``ring``, ``none``, ``n/a`` without tensor
  parallelism);
* ``attention_ran``: the attention kernel as the record names it (``default`` not resolved);
* ``expand_kv``: whether the key/value heads were expanded for that kernel;
* ``overlap_comm``: DeepSpeed's ``overlap_comm``.

A field the record does not hold is ``unrecorded``. Records written before the engine recorded its kernel choices
have no ``engine`` block: their attention and fused kernels are ``unrecorded`` and they never match a fingerprint
that names them. Two fingerprints match when every field recorded on both sides is equal and both name their kernels
(:func:`matches`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.records.paths import SweepPaths
from calorimeter.records.run_record import RecordError, RunRecord, read_run_record

UNRECORDED = "unrecorded"
#: the fields that make up an engine build's identity (the key); tp_overlap is the cell's
KEY_FIELDS: tuple[str, ...] = ("gpu", "power_limit_w", "torch", "deepspeed", "megatron_core", "attention", "fused")
#: the key fields the host's side of an iteration depends on: the software that issues the work, not the GPU that
#: runs it (the host-bound floor of one configuration is the host's: calorimeter.projection.hosts)
SOFTWARE_FIELDS: tuple[str, ...] = ("torch", "deepspeed", "megatron_core", "attention", "fused")


@dataclass(frozen=True)
class Fingerprint:
    """One engine build on one GPU type (see the module docstring for each field)."""

    gpu: str = UNRECORDED
    power_limit_w: str = UNRECORDED
    torch: str = UNRECORDED
    deepspeed: str = UNRECORDED
    megatron_core: str = UNRECORDED
    attention: str = UNRECORDED
    fused: str = UNRECORDED
    tp_overlap: str = UNRECORDED
    attention_ran: str = UNRECORDED
    expand_kv: str = UNRECORDED
    overlap_comm: str = UNRECORDED

    @classmethod
    def of(cls, record: RunRecord, power_limit_w: float | None = None) -> Fingerprint:
        """The fingerprint of one cell's record, with the power limit from its telemetry if known."""
        ranks = record.ranks or [{}]
        return cls.of_engine(record.engine, record.provenance.get("packages") or {}, ranks[0].get("device"),
                             power_limit_w)

    @classmethod
    def of_engine(cls, engine: dict[str, Any], packages: dict[str, Any] | None = None, gpu: str | None = None,
                  power_limit_w: float | None = None) -> Fingerprint:
        """From a record's ``engine`` block (an engine-benchmark line holds one too), the package versions and rank
        0's device, where known."""
        packages = packages or {}
        kernels, overlap = engine.get("kernels") or {}, engine.get("overlap") or {}
        limit = UNRECORDED if power_limit_w is None or power_limit_w != power_limit_w else str(round(power_limit_w))
        return cls(gpu=str(gpu or UNRECORDED), power_limit_w=limit,
                   torch=_version(packages.get("torch") or engine.get("torch")),
                   deepspeed=_version(packages.get("deepspeed")), megatron_core=_version(packages.get("megatron-core")),
                   attention=_attention(engine), fused=_recorded(kernels.get("fused")),
                   tp_overlap=_recorded(overlap.get("tp_comm_overlap")),
                   attention_ran=_recorded(kernels.get("attention")), expand_kv=_recorded(kernels.get("expand_kv")),
                   overlap_comm=_recorded(overlap.get("deepspeed_overlap_comm")))

    @property
    def engine(self) -> dict[str, str]:
        """The key fields."""
        return {f: getattr(self, f) for f in KEY_FIELDS}

    @property
    def key(self) -> str:
        """Short stable id of the engine fields: ``<attention>-<fused>-<hash8>``."""
        digest = hashlib.sha1(json.dumps(self.engine, sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.attention}-{self.fused}-{digest}"

    @property
    def software(self) -> dict[str, str]:
        """The :data:`SOFTWARE_FIELDS`: the same on two GPU types when one engine build ran on both."""
        return {f: getattr(self, f) for f in SOFTWARE_FIELDS}

    @property
    def kernels_recorded(self) -> bool:
        """Whether the record names its kernel choices (the oldest records do not)."""
        return self.attention != UNRECORDED and self.fused != UNRECORDED

    def to_dict(self) -> dict[str, str]:
        """JSON-ready."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fingerprint:
        """Inverse of :meth:`to_dict` (unknown keys ignored, missing ones ``unrecorded``)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: str(v) for k, v in d.items() if k in names and v is not None})

    def ran(self) -> dict[str, str]:
        """What of the engine ran in this cell and could change its numbers, as a reproduction is compared on it: the
        kernels as they ran, the overlap mechanisms and torch's major.minor version (a patch release is the same
        engine); empty for a record without an engine block."""
        if self.attention_ran == UNRECORDED and self.fused == UNRECORDED:
            return {}
        return {"attention": self.attention_ran, "expand_kv": self.expand_kv, "fused": self.fused,
                "overlap_comm": self.overlap_comm, "tp_overlap": self.tp_overlap,
                "torch": ".".join(self.torch.split(".")[:2])}

    def describe(self) -> str:
        """One line for logs and the ``assumed`` column."""
        e = self.engine
        return (f"{e['gpu']} {e['power_limit_w']} W, torch {e['torch']}, DeepSpeed {e['deepspeed']}, "
                f"Megatron-core {e['megatron_core']}, attention {e['attention']}, fused {e['fused']}")


def matches(a: Fingerprint, b: Fingerprint) -> bool:
    """Whether two engines are the same build: both name their kernels and every key field recorded on both sides
    is equal (a field ``unrecorded`` on one side is not compared)."""
    if not (a.kernels_recorded and b.kernels_recorded):
        return False
    return all(x == y for x, y in zip(a.engine.values(), b.engine.values(), strict=True)
               if UNRECORDED not in (x, y))


def _attention(engine: dict[str, Any]) -> str:
    att = (engine.get("kernels") or {}).get("attention")
    if not att:
        return UNRECORDED
    if (engine.get("kernel_choice") or {}).get("attention_requested") == "auto":
        return "auto"  # the engine times the backends per shape and picks one: a policy, not one kernel
    if att == "default":
        probe = (engine.get("kernel_choice") or {}).get("attention_probe") or {}
        return str(probe.get("pytorch_default") or "default")
    return str(att)


def _version(v: Any) -> str:
    return str(v).split("+")[0] if v else UNRECORDED


def _recorded(v: Any) -> str:
    return str(v) if v is not None and v != "" else UNRECORDED


def recorded_at(record: RunRecord | None) -> str:
    """When the cell ran: its launcher attempt stamp (``20261123T004225Z``), empty if not recorded."""
    return str(record.launcher.get("attempt") or "") if record is not None else ""


def _power_limit(telemetry: Path) -> float | None:
    if not telemetry.is_file():
        return None
    try:
        v = pd.read_parquet(telemetry, columns=["power_limit_w"])["power_limit_w"].dropna()
    except (KeyError, ValueError, OSError):
        return None
    return float(v.median()) if len(v) else None


def read_records(source: str | Path, cell_ids: list[str]) -> dict[str, RunRecord | None]:
    """Each cell's ``run.json`` of a sweep folder, read once (None where missing or unreadable)."""
    sweep = SweepPaths(Path(source))
    out: dict[str, RunRecord | None] = {}
    for cid in cell_ids:
        try:
            out[cid] = read_run_record(sweep.cell(cid).run_json)
        except (RecordError, OSError):
            out[cid] = None
    return out


def read_fingerprints(source: str | Path, cell_ids: list[str],
                      records: dict[str, RunRecord | None] | None = None) -> pd.DataFrame:
    """One row per cell of a sweep folder: ``cell_id``, the fingerprint fields, ``fingerprint`` (the key) and
    ``recorded_at``. A cell without a ``run.json`` gets an all-``unrecorded`` fingerprint. ``records``: the cells'
    records when already read (:func:`read_records`)."""
    sweep = SweepPaths(Path(source))
    records = records if records is not None else read_records(source, cell_ids)
    rows = []
    for cid in cell_ids:
        paths = sweep.cell(cid)
        record = records.get(cid)
        fp = Fingerprint.of(record, _power_limit(paths.telemetry)) if record is not None else Fingerprint()
        rows.append({"cell_id": cid, **fp.to_dict(), "fingerprint": fp.key, "recorded_at": recorded_at(record)})
    return pd.DataFrame(rows, columns=["cell_id", *(f.name for f in fields(Fingerprint)), "fingerprint",
                                       "recorded_at"])


def fingerprint_of(row: pd.Series | dict[str, Any]) -> Fingerprint:
    """The fingerprint held in a measured runs row (columns of :func:`read_fingerprints`)."""
    return Fingerprint.from_dict({f.name: row.get(f.name) for f in fields(Fingerprint)})


__all__ = ["KEY_FIELDS", "SOFTWARE_FIELDS", "UNRECORDED", "Fingerprint", "fingerprint_of", "matches", "read_records",
           "read_fingerprints", "recorded_at"]
