"""JSON values: the type of what calorimeter's files carry where no class of its own types them.

The parts of a file that code reads and decides on have classes of their own (:class:`calorimeter.plan.cell.Cell`,
:class:`calorimeter.plan.settings.LauncherSettings`, :class:`calorimeter.records.job.JobRecord`,
:class:`calorimeter.records.rank.RankReport`, :class:`calorimeter.records.rank.RankDeath`,
:class:`calorimeter.records.run_record.RunRecord`, ...); what a file only carries on (a sweep config before it is
resolved, a record's free-form sections, a DeepSpeed config, NVML's device facts, a trace's events) is a
:data:`JsonObject`: a mapping of names to JSON values, nothing a JSON file cannot hold.
"""

from __future__ import annotations

from typing import TypeAlias

#: a JSON value
Json: TypeAlias = None | bool | int | float | str | list["Json"] | dict[str, "Json"]
#: a JSON object
JsonObject: TypeAlias = dict[str, Json]

__all__ = ["Json", "JsonObject"]
