"""The measured cells a projection is calibrated on or validated against, read from sweeps' aggregated tables.

A source is a sweep folder holding ``tables/runs.parquet`` (and ``kernels.parquet``, ``gpus.parquet``), as written
by ``snakemake figures``/``snakemake`` (``results/<sweep>/``) or shipped under ``results/reference/``, or a folder
of engine-benchmark calls (:mod:`~calorimeter.projection.engine_speed`). Only cells that ran (status ``ok``) with a
measured iteration time are used; each kept or dropped cell says why. Every cell carries its engine fingerprint
(:mod:`~calorimeter.projection.fingerprint`: columns ``fingerprint``, its fields, ``recorded_at``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.plan.kinds import DEFAULT_KIND, get_kind
from calorimeter.plan.models import CATALOGUE, ModelSpec, get_model, register_model
from calorimeter.plan.vocabulary import OPTIONAL, RUN_COLUMNS
from calorimeter.projection.catalogue import Catalogue
from calorimeter.projection.engine_speed import is_engine_speed_set, load_engine_speed
from calorimeter.projection.fingerprint import UNRECORDED, fingerprint_of, matches, read_fingerprints, read_records
from calorimeter.projection.regimes import GPU_BOUND, HOST_BOUND, MOE
from calorimeter.projection.schedule import HOST_BOUND_BUSY_FRAC, untimed_schedule
from calorimeter.records.machines import machine_keys
from calorimeter.records.paths import SweepPaths
from calorimeter.records.run_record import RecordError, RunRecord, read_run_record

# HOST_BOUND_BUSY_FRAC (schedule): a host-bound cell's kernel times say little about the GPU, so it calibrates no
# compute rate (it calibrates the host launch and ZeRO-3 host times, and is still predicted and validated)
#: a traced rank busy for longer than this share of the measured iteration was not traced over one iteration of the
#: measured steps (the record's trace and metrics disagree): it calibrates nothing
MAX_BUSY_FRAC = 1.02


@dataclass
class MeasuredSet:
    """Measured cells of one or more sweeps.

    Attributes:
        runs: one row per usable cell (the runs table's columns plus ``source`` and ``machine``:
            :func:`calorimeter.records.machines.machine_keys`, NaN where no per-GPU row names it).
        kernels: one row per (cell, traced rank): ``<category>_sum_s`` for every kernel category, ``stage``, ``busy_s``.
        gpus: one row per (cell, GPU): ``stage``, ``power_avg_w``, ``sm_clock_avg_mhz``.
        dropped: cell id -> why it is not used at all.
    """

    runs: pd.DataFrame
    kernels: pd.DataFrame
    gpus: pd.DataFrame
    dropped: dict[str, str] = field(default_factory=dict)
    #: cell id -> its Cell, filled on first use (a leave-one-out validation asks ~28,000 times; one runs-table lookup
    #: each took 3.7 ms, 60% of its run time)
    _cells: dict[str, Cell] = field(default_factory=dict, repr=False, compare=False)

    def cell(self, cell_id: str) -> Cell:
        """The measured cell's parameters (built once per set; Cells are frozen)."""
        if not self._cells:
            self._cells.update({str(r["cell_id"]): cell_from_row(r) for r in self.runs.to_dict("records")})
        try:
            return self._cells[cell_id]
        except KeyError:
            raise KeyError(f"cell {cell_id!r} is not in this measured set") from None

    def subset(self, cell_ids: list[str]) -> MeasuredSet:
        """Only these cells."""
        keep = set(cell_ids)
        return MeasuredSet(self.runs[self.runs.cell_id.isin(keep)].reset_index(drop=True),
                           self.kernels[self.kernels.cell_id.isin(keep)].reset_index(drop=True),
                           self.gpus[self.gpus.cell_id.isin(keep)].reset_index(drop=True), dict(self.dropped),
                           {c: v for c, v in self._cells.items() if c in keep})

    def calibration_cells(self) -> list[str]:
        """Cells whose kernels calibrate compute and communication: traced, not host-bound, and run under a pipeline
        schedule the model times (:func:`timed_schedule`)."""
        out = []
        for _, r in self.runs[timed_schedule(self.runs)].iterrows():
            if (r["cell_id"] in set(self.kernels.cell_id)
                    and HOST_BOUND_BUSY_FRAC <= r.get("busy_frac", 0.0) <= MAX_BUSY_FRAC):
                out.append(r["cell_id"])
        return out


def timed_schedule(runs: pd.DataFrame) -> pd.Series:
    """Rows whose pipeline schedule the model times (DeepSpeed's 1F1B; ``pp_schedule`` unset): the others are
    projected as refused, so they neither calibrate nor count in a validation."""
    if "pp_schedule" not in runs:
        return pd.Series(True, index=runs.index)
    return runs["pp_schedule"].map(lambda s: not untimed_schedule(s)).astype(bool)


def cell_from_row(row: dict) -> Cell:
    """A Cell from a runs-table row (NaN and missing optional values become the defaults)."""
    clean = {}
    for k, v in row.items():
        if isinstance(v, float) and v != v:  # NaN
            continue
        clean[k] = v
    split = clean.get("pp_split")
    if isinstance(split, str):  # the runs table holds the split as its text ("[3, 5, 4, 4]", "" for none)
        split = [int(n) for n in split.strip("[] ").replace(",", " ").split()]
    clean["pp_split"] = [int(n) for n in split] if split is not None and len(split) else None
    applied = str(clean.get("placement_split") or "")
    if clean["pp_split"] is None and "/" in applied:  # the split a placement policy chose in the job (17/15)
        clean["pp_split"] = [int(n) for n in applied.split("/")]
    for k in ("nodes", "gpus_per_node", "tp", "pp", "ep", "cp", "zero_stage", "micro_batch", "global_batch",
              "seq_len", "recompute_layers"):
        if k in clean and clean[k] is not None:
            clean[k] = int(clean[k])
    for k in ("sequence_parallel", "overlap"):
        if k in clean:
            clean[k] = bool(clean[k])
    return Cell.from_dict(clean)


def _wide_kernels(long: pd.DataFrame) -> pd.DataFrame:
    """Long kernel table (one row per rank and category) -> one row per (cell, rank) with ``<cat>_sum_s``."""
    if long.empty:
        return pd.DataFrame(columns=["cell_id", "rank", "stage", "busy_s", "span_s"])
    sums = long.pivot_table(index=["cell_id", "rank"], columns="category", values="sum_s", aggfunc="sum",
                            fill_value=0.0)
    sums.columns = [f"{c}_sum_s" for c in sums.columns]
    counts = long.pivot_table(index=["cell_id", "rank"], columns="category", values="count", aggfunc="sum",
                              fill_value=0)
    counts.columns = [f"{c}_count" for c in counts.columns]
    totals = long.groupby(["cell_id", "rank"])[["stage", "busy_s", "span_s", "comm_exposed_s"]].first()
    return pd.concat([totals, sums, counts], axis=1).reset_index()


def canonical_fingerprints(runs: pd.DataFrame) -> pd.DataFrame:
    """Cells whose records leave some engine fields unrecorded (the engine benchmark's lines: no package versions, no
    power limit) join the one fully recorded fingerprint of their GPU type they match; with none or several such
    fingerprints they keep their own."""
    if "fingerprint" not in runs or runs.empty:
        return runs
    firsts = runs.drop_duplicates(["hardware", "fingerprint"])
    fps = {(row["hardware"], row["fingerprint"]): fingerprint_of(row) for _, row in firsts.iterrows()}
    complete = {k: f for k, f in fps.items() if UNRECORDED not in f.engine.values()}
    runs = runs.copy()
    for (hw, k), f in fps.items():
        if (hw, k) in complete or not f.kernels_recorded:
            continue
        cands = [c for (h, c), g in complete.items() if h == hw and matches(f, g)]
        if len(cands) == 1:
            runs.loc[(runs.hardware == hw) & (runs.fingerprint == k), "fingerprint"] = cands[0]
    return runs


def _another_id(cid: str, src: Path, seen: set[str]) -> str:
    """An id for a cell measured again in another sweep: ``<id>@<folder of the sweep>``, or, where two sweeps of one
    folder measured it (a set and its twin), ``<id>@<folder>/<sweep>``; never one already taken."""
    both = f"{cid}@{src.parent.name}/{src.name}"
    cands = itertools.chain((f"{cid}@{src.parent.name}", both), (f"{both}#{i}" for i in itertools.count(2)))
    return next(c for c in cands if c not in seen)


def register_recorded_models(source: str | Path, runs: pd.DataFrame) -> None:
    """Register the models a sweep defined (``models:`` in its file, not in the built-in catalogue) from the cells'
    records: each ``run.json`` holds the dimensions of the model that ran, so a set rebuilt without its sweep file is
    projected with the model it measured (a record whose model cannot be read leaves the name unknown: the cell is
    then dropped with that reason)."""
    sweep = SweepPaths(Path(source))
    for model, cid in runs.drop_duplicates("model")[["model", "cell_id"]].itertuples(index=False):
        if not isinstance(model, str) or model in CATALOGUE:
            continue
        try:
            spec = read_run_record(sweep.cell(cid).run_json).model
        except RecordError:
            continue
        if spec and spec.get("name") == model:
            register_model(ModelSpec.from_dict(spec))


#: cell fields the runs table has no column for (the optional ones, set only where a cell sets them): read from each
#: cell's record
RECORD_ONLY_FIELDS: tuple[str, ...] = tuple(n for n in OPTIONAL if n not in RUN_COLUMNS)


def recorded_engine_knobs(source: str | Path, cell_ids: list[str],
                          records: dict[str, RunRecord | None] | None = None) -> pd.DataFrame:
    """``cell_id`` and :data:`RECORD_ONLY_FIELDS` of each cell, from its ``run.json`` (None where unset or
    unreadable), so that a cell rebuilt from a runs row is the cell that ran (a DualPipeV pipeline is not 1F1B).
    ``records``: the cells' records when already read (:func:`~calorimeter.projection.fingerprint.read_records`)."""
    records = records if records is not None else read_records(source, cell_ids)
    rows = []
    for cid in cell_ids:
        record = records.get(cid)
        cell = record.cell if record is not None else {}
        rows.append({"cell_id": cid, **{k: cell.get(k) for k in RECORD_ONLY_FIELDS}})
    return pd.DataFrame(rows, columns=["cell_id", *RECORD_ONLY_FIELDS]).astype(object)


def load_measured(sources: list[str | Path]) -> MeasuredSet:
    """Read the tables of every source sweep folder; keep the usable cells.

    Raises:
        FileNotFoundError: a source has no ``tables/runs.parquet``.
    """
    runs, kernels, gpus, dropped = [], [], [], {}
    seen: set[str] = set()
    for src in sources:
        sweep = SweepPaths(Path(src))
        if not sweep.table("runs").is_file() and is_engine_speed_set(src):
            r, k, d = load_engine_speed(src)
            k, g = _wide_kernels(k), pd.DataFrame(columns=["cell_id"])
            dropped.update(d)
        elif not sweep.table("runs").is_file():
            raise FileNotFoundError(f"{src}: no tables/runs.parquet (build it with `snakemake figures`)")
        else:
            r = pd.read_parquet(sweep.table("runs"))
            r["source"] = str(src)
            register_recorded_models(src, r)
            records = read_records(src, list(r["cell_id"]))  # each record once, for both
            r = r.drop(columns=[c for c in RECORD_ONLY_FIELDS if c in r]).merge(
                recorded_engine_knobs(src, list(r["cell_id"]), records), on="cell_id", how="left")
            r = r.merge(read_fingerprints(src, list(r["cell_id"]), records), on="cell_id", how="left")
            k = (_wide_kernels(pd.read_parquet(sweep.table("kernels"))) if sweep.table("kernels").is_file()
                 else _wide_kernels(pd.DataFrame()))
            g = pd.read_parquet(sweep.table("gpus")) if sweep.table("gpus").is_file() else pd.DataFrame(
                columns=["cell_id"])
            g = g[[c for c in ("cell_id", "rank", "stage", "power_avg_w", "sm_clock_avg_mhz", "hostname", "node",
                               "uuid") if c in g.columns]]
        # the same cell measured again in another sweep (e.g. the TP-overlap set repeats findings cells) is another
        # measurement: it keeps its configuration and gets its own id
        again = {c: _another_id(c, Path(src), seen) for c in set(r["cell_id"]) & seen}
        if again:
            r, k, g = (x.assign(cell_id=x["cell_id"].replace(again)) for x in (r, k, g))
        seen |= set(r["cell_id"])
        runs.append(r)
        kernels.append(k)
        gpus.append(g)
    run = pd.concat(runs, ignore_index=True) if runs else pd.DataFrame()
    keep = []
    for i, r in run.iterrows():
        cid = r["cell_id"]
        if r.get("status") != "ok" or not (r.get("iteration_time_s", 0) > 0):
            dropped[cid] = f"status {r.get('status')}: nothing measured"
        elif r.get("model") not in CATALOGUE:
            dropped[cid] = f"model {r.get('model')!r} not in the catalogue"
        elif not get_kind(str(r.get("kind") or DEFAULT_KIND)).trains_model:  # a peer's command, a calibration kind
            dropped[cid] = f"kind {r.get('kind')}: not a training cell the projection models"
        else:
            keep.append(i)
    # copy(): one block per dtype, not one per source (columns are added below)
    run = run.loc[keep].drop_duplicates("cell_id", keep="last").reset_index(drop=True).copy()
    kern = pd.concat(kernels, ignore_index=True) if kernels else _wide_kernels(pd.DataFrame())
    kern = kern[kern.cell_id.isin(set(run.cell_id))].reset_index(drop=True)
    cats = [c for c in kern.columns if c.endswith(("_sum_s", "_count"))]
    kern[cats] = kern[cats].fillna(0.0)  # a category a source never traced took no time there
    busy = kern.groupby("cell_id")["busy_s"].mean()
    run["busy_frac"] = run["cell_id"].map(busy) / run["iteration_time_s"]
    run = canonical_fingerprints(run)
    gpu = pd.concat(gpus, ignore_index=True) if gpus else pd.DataFrame(columns=["cell_id"])
    gpu = gpu[gpu.cell_id.isin(set(run.cell_id))].reset_index(drop=True)
    run["machine"] = run["cell_id"].map(machine_keys(gpu))  # NaN: no per-GPU rows (the engine benchmark)
    return MeasuredSet(run, kern, gpu, dropped)


def base_regimes(ms: MeasuredSet) -> dict[str, set[str]]:
    """Source sweep -> the base regimes its cells were measured in: ``MoE`` for a MoE model, else ``dense
    host-bound`` where its GPU kernels were busy under :data:`HOST_BOUND_BUSY_FRAC` of the iteration, else ``dense
    GPU-bound``."""
    out: dict[str, set[str]] = {}
    for r in ms.runs[["source", "model", "busy_frac"]].to_dict("records"):
        hb = bool(r["busy_frac"] < HOST_BOUND_BUSY_FRAC)
        out.setdefault(str(r["source"]), set()).add(MOE if get_model(r["model"]).is_moe else HOST_BOUND if hb
                                                    else GPU_BOUND)
    return out


def catalogue_disagreements(ms: MeasuredSet, cat: Catalogue, root: str | Path = ".") -> list[str]:
    """Where the catalogue's regimes of an entry are not those its loaded cells were measured in
    (:func:`base_regimes`; sweeps relative to ``root``; entries none of whose sweeps are loaded are not judged)."""
    measured = {Path(src).resolve(): regimes for src, regimes in base_regimes(ms).items()}
    out = []
    for i, entry in enumerate(cat.calibration):
        found = [measured[p] for p in (Path(root, s).resolve() for s in entry.sweeps) if p in measured]
        if not found:
            continue
        got = set().union(*found)
        if got != set(entry.regimes):
            out.append(f"{cat.path}: calibration[{i}] ({', '.join(entry.sweeps)}) states the regimes "
                       f"{sorted(entry.regimes)}; its cells were measured in {sorted(got)}")
    return out
