"""``run.json`` read through one door: the typed, versioned :class:`RunRecord`.

The file's format does not change (a JSON object, written by :func:`calorimeter.records.record.build_record`,
``schema_version`` :data:`SCHEMA_VERSION`); :class:`RunRecord` is its read model. :func:`read_run_record` parses a
file, checks that it is a cell record, brings older names up to date (:func:`calorimeter.records.legacy.upgrade_record`,
so ``results/reference/`` records read like new ones) and gives the parts every reader uses as typed fields, each
with the default an older or a failed record implies. ``data`` keeps the upgraded object for whatever no field names.

Version history: 1 (records before ``schema_version`` existed are read as 1: their differences are names, which the
upgrade handles); 2: only additions and one correction, so a version-1 record reads as before: a
``command`` cell's ``cell`` says ``engine: command`` and None for what its command decides (layout, ZeRO stage,
data, seed, learning rate: :data:`calorimeter.plan.kinds.COMMAND_DECIDES`; version 1 gave the engine's defaults), and
its record has a ``command`` section (the command, how it was launched, the files it ran with their SHA-256, the
packages it imported); ``evidence.rank_output`` holds every rank's output tail (the rank the reason names first)
instead of ``evidence.log_tail``; failure classes ``node_lost`` and a ``timeout`` that was never requeued.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from calorimeter.plan.json_types import JsonObject
from calorimeter.records.legacy import upgrade_record
from calorimeter.records.rank import RankOutput

#: the run.json format written today
SCHEMA_VERSION = 2


class RecordError(ValueError):
    """A run.json that cannot be used, and why (``missing``, ``not JSON (...)``, ``not a cell record (...)``)."""


def _mapping(d: JsonObject, key: str) -> JsonObject:
    value = d.get(key)
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class RunRecord:
    """One cell's record (run.json), with today's names.

    Attributes:
        cell: the cell's parameters as recorded (``Cell.to_dict()``; older records lack newer keys).
        status: ``ok``, ``oom``, ``failed`` or ``transient``.
        failure_class: ``ok``, ``oom``, ``failed``, ``timeout``, ``transient`` (empty in the oldest records).
        reason: why it is not ``ok`` (empty when it is).
        metrics: throughput metrics of a training cell, or a calibration kind's summary (empty when not ok).
        provenance: git, packages, hosts, ``ranks`` (one entry per rank: node, device_info, stage, ...), launcher.
        hardware: the hardware profile (``peak_bf16_tflops``, ...).
        model: the model's dimensions (None for kinds without a model).
        placement: the placement decision (empty for records from before placement).
        warmup: how the warm-up was decided (empty for records from before the steady-state warm-up).
        loss: loss and gradient norm per step of rank 0.
        peak_memory_bytes: the largest peak over the ranks (None when no rank said).
        telemetry_files: telemetry tables written next to run.json.
        kind_files: a calibration kind's output files.
        schema_version: the format version the file was written in.
        data: the whole (upgraded) object.
    """

    cell: JsonObject
    status: str
    failure_class: str = ""
    reason: str = ""
    metrics: JsonObject = field(default_factory=dict)
    provenance: JsonObject = field(default_factory=dict)
    hardware: JsonObject = field(default_factory=dict)
    model: JsonObject | None = None
    placement: JsonObject = field(default_factory=dict)
    warmup: JsonObject = field(default_factory=dict)
    loss: tuple[JsonObject, ...] = ()
    peak_memory_bytes: int | None = None
    telemetry_files: tuple[str, ...] = ()
    kind_files: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION
    data: JsonObject = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: JsonObject) -> RunRecord:
        """The record of a run.json object (upgraded; not modified).

        Raises:
            RecordError: it is not a cell record (no ``cell`` mapping or no ``status``).
        """
        if not isinstance(d, dict) or not isinstance(d.get("cell"), dict) or not isinstance(d.get("status"), str):
            raise RecordError("not a cell record (no 'cell' mapping or no 'status')")
        d = upgrade_record(d)
        model = d.get("model")
        peak = d.get("peak_memory_bytes")
        return cls(cell=d["cell"], status=d["status"], failure_class=str(d.get("failure_class") or ""),
                   reason=str(d.get("reason") or ""), metrics=_mapping(d, "metrics"),
                   provenance=_mapping(d, "provenance"), hardware=_mapping(d, "hardware"),
                   model=model if isinstance(model, dict) else None, placement=_mapping(d, "placement"),
                   warmup=_mapping(d, "warmup"), loss=tuple(d.get("loss") or ()),
                   peak_memory_bytes=int(peak) if peak is not None else None,
                   telemetry_files=tuple(d.get("telemetry_files") or ()), kind_files=tuple(d.get("kind_files") or ()),
                   schema_version=int(d.get("schema_version") or 1), data=d)

    @property
    def cell_id(self) -> str:
        """The cell's id."""
        return str(self.cell.get("cell_id") or self.data.get("cell_id") or "")

    @property
    def kind(self) -> str:
        """The cell's kind (records from before cell kinds trained)."""
        return str(self.cell.get("kind") or "train")

    @property
    def ok(self) -> bool:
        """The cell measured what it was for."""
        return self.status == "ok"

    @property
    def launcher(self) -> JsonObject:
        """What the launcher recorded: executor, job_id, attempt, wall_time_s, reattached, ..."""
        value = self.provenance.get("launcher")
        return value if isinstance(value, dict) else {}

    @property
    def engine(self) -> JsonObject:
        """The engine rank 0 ran: ``kernels``, ``kernel_choice``, ``overlap``, ``torch`` (empty in records from before
        the engine recorded its kernels, and for kinds without an engine); read through
        :class:`calorimeter.projection.fingerprint.Fingerprint`."""
        return _mapping(self.data, "engine")

    @property
    def command(self) -> JsonObject:
        """A ``command`` cell's command, launcher, files (with SHA-256) and packages (empty before version 2)."""
        return _mapping(self.data, "command")

    @property
    def rank_output(self) -> list[RankOutput]:
        """Every rank's output tail, the rank the reason names first (``evidence.rank_output``; empty before
        version 2)."""
        return [RankOutput.from_dict(o) for o in _mapping(self.data, "evidence").get("rank_output") or []]

    @property
    def ranks(self) -> list[JsonObject]:
        """Per rank: rank, local_rank, node, hostname, device_info, stage, ... (``provenance.ranks``)."""
        return list(self.provenance.get("ranks") or [])


def read_run_record(path: str | Path) -> RunRecord:
    """The record in a run.json file.

    Raises:
        RecordError: the file is missing, unreadable, not JSON or not a cell record (the message says which).
    """
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RecordError("missing") from None
    except (OSError, UnicodeDecodeError) as e:
        text = f"{type(e).__name__}: {e}".splitlines()[0]
        raise RecordError(f"cannot be read ({text if len(text) <= 200 else text[:180] + '...'})") from e
    except ValueError as e:
        raise RecordError(f"not JSON ({e})") from e
    return RunRecord.from_dict(d)
