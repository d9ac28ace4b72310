"""Planning: config models, grid expansion, validation and memory/FLOPs estimates (no torch import)."""

from calorimeter.plan.cell import Cell
from calorimeter.plan.config import ConfigError, load_config
from calorimeter.plan.definitions import register_environment_definitions
from calorimeter.plan.plan import Plan, PlannedCell, make_plan, plan_file

# The models and hardware of the sweep a workflow runs, in each of its processes (Snakemake's scripts, the ranks).
register_environment_definitions()

__all__ = ["Cell", "ConfigError", "Plan", "PlannedCell", "load_config", "make_plan", "plan_file"]
