"""Every value that reaches a job script is one printable line: checked before anything is submitted.

submitit writes each sbatch parameter as ``#SBATCH --<name>=<value>`` and each setup entry as a line of the job
script. A newline inside a value would end the ``#SBATCH`` line and run the rest as a shell command; other control
characters garble the script. The sweep schema refuses them in the sweep file; this check covers every other way in
(profile resources, ``--set-resources``, environment variables expanded by Snakemake, programmatic callers).
"""

from __future__ import annotations

import re
from typing import Any

from calorimeter.plan.json_types import JsonObject

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
#: where each submitit parameter comes from, for messages
ORIGIN = {
    "partition": "launcher.slurm.partition or the profile's slurm_partition",
    "account": "launcher.slurm.account or the profile's slurm_account",
    "qos": "launcher.slurm.qos or the profile's slurm_qos",
    "constraint": "launcher.slurm.constraint or the profile's slurm_constraint",
    "setup": "launcher.slurm.setup",
    "additional_parameters": "launcher.slurm.extra",
}


class SbatchValueError(ValueError):
    """A value would not stay on its own line of the job script."""


def _check(name: str, value: Any, origin: str) -> None:
    text = str(value)
    m = _CONTROL.search(text)
    if m:
        shown = text if len(text) <= 60 else text[:40] + "..."
        raise SbatchValueError(f"sbatch {name}: {shown!r} contains the control character {m.group()!r} at position "
                               f"{m.start()} (set in {origin}); every value of a job script must be one printable "
                               "line")


def check_sbatch_parameters(params: JsonObject) -> JsonObject:
    """Refuse control characters in any value (and malformed option names) of submitit's SLURM parameters.

    Returns:
        ``params`` unchanged.

    Raises:
        SbatchValueError: naming the parameter, the character and where the value was set.
    """
    for key, value in params.items():
        origin = ORIGIN.get(key, "the cell or the launcher settings")
        if key == "setup":
            for i, line in enumerate(value or []):
                _check(f"setup[{i}]", line, origin)
        elif key == "additional_parameters":
            for opt, v in (value or {}).items():
                if not _OPTION.fullmatch(str(opt)):
                    shown = str(opt) if len(str(opt)) <= 60 else str(opt)[:40] + "..."
                    raise SbatchValueError(f"sbatch option name {shown!r} (set in {origin}) is not an option name: "
                                           "letters, digits, '-' and '_' only")
                _check(f"--{opt}", v, origin)
        else:
            _check(f"--{key.replace('_', '-')}", value, origin)
    return params
