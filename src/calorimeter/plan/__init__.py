"""What a cell is, and the plan of a sweep (no torch import; the ground floor: imports no other package).

Config, grid expansion and validation; the cell's model, hardware, memory and FLOP estimates; its workload per
pipeline stage (:mod:`~calorimeter.plan.work`), rank layout (:mod:`~calorimeter.plan.layout`), kind
(:mod:`~calorimeter.plan.kinds`) and placement policy (:mod:`~calorimeter.plan.placement`). See docs/architecture.md.
"""

from calorimeter.plan.cell import Cell
from calorimeter.plan.config import ConfigError, load_config
from calorimeter.plan.definitions import register_environment_definitions
from calorimeter.plan.plan import Plan, PlannedCell, make_plan, plan_file

# The models and hardware of the sweep a workflow runs, in each of its processes (Snakemake's scripts, the ranks).
register_environment_definitions()

__all__ = ["Cell", "ConfigError", "Plan", "PlannedCell", "load_config", "make_plan", "plan_file"]
