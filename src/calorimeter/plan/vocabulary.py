"""The cell's vocabulary: every name a cell is described by, once, in one order, with where it appears.

One row per name: the cell's parameters (the fields of :class:`calorimeter.plan.cell.Cell`), the values derived from
them (:meth:`Cell.to_dict` adds them) and the grid's ``parallel`` block (a layout's keys in one value). Every list of
names is derived from it, in its order:

* :data:`AXES`: the keys of a grid block and of ``defaults``, in the order of the block's product (the first varies
  slowest: the kind, the machine, the layout, then the rest); the schema's ``cell_values`` holds these and
  ``repeats``;
* :data:`RUN_COLUMNS`: the runs table's parameter columns (:mod:`calorimeter.analysis.cell`);
* :data:`CONFIGURATION`: the parameters that define a configuration (a comparison holds all but its knob:
  :mod:`calorimeter.findings.select`, ``calorimeter compare``);
* :data:`PLAN_COLUMNS`: the parameters ``calorimeter plan`` shows;
* :data:`IDENTIFYING`: those a cell's id names (for the kinds they apply to; :attr:`Cell.cell_id`, parsed back by
  :func:`calorimeter.plan.cell.parse_cell_id`); the configuration's id is the cell's id without its repetition;
* :data:`OPTIONAL`: fields left out of a cell's parameters when unset (one kind's, or engine knobs newer than the
  records), so the cells that do not set them keep the parameters they had before the fields existed;
* :data:`ID_ONLY`: those a cell's id names but no runs-table column holds (read back from the id).

tests/test_plan_vocabulary.py holds the cell's fields, the schema's grid keys and the cell id to it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Name:
    """One name of the vocabulary (see the module docstring for what each flag feeds).

    Attributes:
        name: the name.
        source: ``field`` (a parameter of the cell), ``derived`` (computed from them) or ``block`` (a grid key
            whose value sets several fields).
        axis: a key of a grid block and of ``defaults``.
        column: a parameter column of the runs table.
        configuration: it defines a configuration.
        shown: a column of ``calorimeter plan``'s table.
        identifies: the cell's id names it (where its kind uses it).
        optional: left out of the cell's parameters while unset.
    """

    name: str
    source: str = "field"
    axis: bool = False
    column: bool = False
    configuration: bool = False
    shown: bool = False
    identifies: bool = False
    optional: bool = False


_AXIS, _RUN, _CONF, _SHOWN, _ID = "axis", "column", "configuration", "shown", "identifies"


def _n(name: str, *flags: str, source: str = "field") -> Name:
    return Name(name, source, **dict.fromkeys(flags, True))


#: every name, in the one order every list keeps
VOCABULARY: tuple[Name, ...] = (
    _n("cell_id", _RUN, _SHOWN, source="derived"),
    _n("config_id", _RUN, source="derived"),
    _n("repeat", _RUN, _ID),
    _n("sweep", _RUN),
    _n("kind", _AXIS, _RUN, _CONF, _ID),
    _n("model", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("hardware", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("nodes", _AXIS, _RUN, _CONF, _ID),
    _n("gpus_per_node", _AXIS, _RUN, _CONF, _ID),
    _n("parallel", _AXIS, source="block"),
    _n("world_size", _RUN, _CONF, _SHOWN, source="derived"),
    _n("tp", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("pp", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("dp", _RUN, _CONF, _SHOWN, _ID, source="derived"),
    _n("ep", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("cp", _AXIS, _RUN, _CONF, _ID),
    _n("sequence_parallel", _AXIS, _RUN, _CONF, _ID),
    _n("zero_stage", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("recompute", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("recompute_layers", _AXIS, _RUN, _CONF, _ID),
    _n("overlap", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("micro_batch", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("global_batch", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("grad_accum", _RUN, source="derived"),
    _n("seq_len", _AXIS, _RUN, _CONF, _SHOWN, _ID),
    _n("warmup", _AXIS),
    _n("warmup_steps", _AXIS),
    _n("warmup_max_steps", _AXIS),
    _n("warmup_max_s", _AXIS),
    _n("warmup_min_s", _AXIS),
    _n("steady_window_s", _AXIS),
    _n("steady_slope_c_per_min", _AXIS),
    _n("measured_steps", _AXIS),
    _n("measured_min_s", _AXIS),
    _n("precision", _AXIS, _RUN, _CONF, _ID),
    _n("dataset", _AXIS, _ID),
    _n("seed", _AXIS),
    _n("lr", _AXIS),
    _n("parallel_label", _RUN, source="derived"),
    _n("optimization_label", _RUN, source="derived"),
    _n("pp_split", _CONF, _ID),
    _n("placement", _AXIS, _RUN, _CONF, _ID),
    _n("engine", _CONF),
    _n("command", _AXIS, "optional"),
    _n("label", _AXIS, _ID, "optional"),
    _n("log_format", _AXIS, "optional"),
    _n("lora_rank", _AXIS, _ID),
    _n("pp_schedule", _AXIS, _ID, "optional"),
    _n("bucket_elements", _AXIS, _ID, "optional"),
    _n("prefetch_elements", _AXIS, _ID, "optional"),
    _n("tp_comm_overlap", _AXIS, _ID, "optional"),
)


def names(**flags: bool | str) -> tuple[str, ...]:
    """The names whose attributes have these values, in the vocabulary's order: ``names(column=True)``."""
    return tuple(n.name for n in VOCABULARY if all(getattr(n, k) == v for k, v in flags.items()))


#: the cell's parameters (its fields)
PARAMETERS = names(source="field")
#: values derived from the parameters (:meth:`calorimeter.plan.cell.Cell.to_dict` adds them)
DERIVED = names(source="derived")
#: grid keys in product order (the first varies slowest)
AXES = names(axis=True)
#: the runs table's parameter columns
RUN_COLUMNS = names(column=True)
#: the parameters that define a configuration
CONFIGURATION = names(configuration=True)
#: the parameters ``calorimeter plan`` shows
PLAN_COLUMNS = names(shown=True)
#: the names a cell's id is made of
IDENTIFYING = names(identifies=True)
#: fields left out of a cell's parameters while unset
OPTIONAL = names(optional=True)
#: what a cell's id names beyond the configuration's columns (its TP overlap mechanism, pipeline schedule, ZeRO
#: buckets, LoRA rank, a peer's label, ...): read back from a configuration's id
#: (:func:`calorimeter.plan.cell.id_knobs`), so that two configurations that differ only there stay two in a
#: comparison or a finding's pairs
ID_ONLY = tuple(n for n in IDENTIFYING if n not in CONFIGURATION and n != "repeat")
