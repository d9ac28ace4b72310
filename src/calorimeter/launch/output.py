"""What each rank printed: the tail of every rank's output, for the cell log, ``calorimeter status`` and the record.

submitit writes each rank's stdout and stderr to ``<job>_<rank>_log.out|err`` in the attempt's submitit folder (a
``command`` cell's own output goes to the rank's stdout too; under SLURM, srun's messages about the step go to rank
0's stderr). :func:`rank_outputs` keeps the last lines of both for every rank, submitit's own bookkeeping lines left
out, the project's files named relative to the checkout (a record must not carry the machine's path to it);
:func:`first_failed_first` orders them so that the rank a record's reason names comes first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from calorimeter.launch.watch import alive_path
from calorimeter.records.atomic import read_json_object
from calorimeter.records.paths import AttemptPaths
from calorimeter.records.rank import RankOutput, RankReport

#: lines kept from the end of each stream of each rank
TAIL_LINES = 15
#: characters kept from the end of each line
LINE_CHARS = 400
#: the checkout this code runs from (``<root>/src/calorimeter/launch``)
_CHECKOUT = str(Path(__file__).resolve().parents[3]) + os.sep
#: submitit's own log lines (``submitit INFO (2026-11-27 19:33:35,123) - Starting with JobEnvironment(...)``)
_SUBMITIT_LINE = re.compile(r"^submitit (DEBUG|INFO|WARNING|ERROR) \(")


def _tail(path: Path, lines: int) -> list[str]:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    kept = [t for t in text if t.strip() and not _SUBMITIT_LINE.match(t)]
    return [t.replace(_CHECKOUT, "")[-LINE_CHARS:] for t in kept[-lines:]]


def rank_outputs(attempt: AttemptPaths, job_id: str, world_size: int, rank_results: list[RankReport],
                 host: str | None = None, lines: int = TAIL_LINES) -> list[RankOutput]:
    """Per rank (in rank order): ``rank``, ``host`` (from its result, else from its alive file, else ``host``: a
    local job's) and ``status`` (from its result; ``no result`` without one), ``stdout`` and ``stderr`` (their last
    ``lines`` lines)."""
    files = attempt.submitit
    pattern = re.compile(rf"^{re.escape(str(job_id))}_(\d+)_log\.(out|err)$")
    found = {int(m.group(1)) for f in (files.iterdir() if files.is_dir() else []) if (m := pattern.match(f.name))}
    results = {r.rank: r for r in rank_results}
    out = []
    for rank in sorted(found | set(range(world_size))):
        r = results.get(rank)
        where = (r.hostname if r else None) or (read_json_object(alive_path(attempt, rank)) or {}).get("host") or host
        out.append(RankOutput(rank, where, (r.status if r else "") or "no result",
                              tuple(_tail(files / f"{job_id}_{rank}_log.out", lines)),
                              tuple(_tail(files / f"{job_id}_{rank}_log.err", lines))))
    return out


def first_failed_first(outputs: list[RankOutput], reason: str, rank_results: list[RankReport]) -> list[RankOutput]:
    """``outputs`` ordered: the rank ``reason`` names (``rank <r> ...``) first, then the other ranks that failed in
    the order they failed, then those without a result, then the rest."""
    named = re.match(r"rank (\d+)", reason or "")
    ends = {r.rank: float(r.t_end_s or 0) for r in rank_results if not r.ok}

    def key(o: RankOutput) -> tuple[int, float, int]:
        if named and o.rank == int(named.group(1)):
            return 0, 0.0, o.rank
        if o.rank in ends:
            return 1, ends[o.rank], o.rank
        return (2 if o.status == "no result" else 3), 0.0, o.rank

    return sorted(outputs, key=key)


def describe_outputs(outputs: list[RankOutput], n: int = 2, indent: str = "  ") -> list[str]:
    """Lines for a person: per rank, where it ran, how it ended, and its last ``n`` lines (``(no output)``)."""
    out = []
    for o in outputs:
        where = f" on {o.host}" if o.host else ""
        tail = o.last_lines(n)
        out.append(f"{indent}rank {o.rank}{where} ({o.status}): " + (tail[0] if tail else "(no output)"))
        out.extend(f"{indent}  {t}" for t in tail[1:])
    return out
