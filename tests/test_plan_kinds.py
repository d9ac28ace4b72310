"""A cell kind's behaviour lives in its registry entry (calorimeter.plan.kinds): the schema names the same kinds, a
new entry is planned, named and recorded by its flags alone, and no module outside the registry branches on a kind's
name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from calorimeter.plan import kinds
from calorimeter.plan.cell import Cell, as_recorded
from calorimeter.plan.config import load_schema
from calorimeter.plan.kinds import KINDS, CellKind, get_kind, kind_of, kinds_where
from calorimeter.plan.plan import check_cell

SRC = Path(kinds.__file__).resolve().parents[1]


def test_the_schema_names_the_registrys_kinds() -> None:
    one, many = load_schema()["$defs"]["cell_values"]["properties"]["kind"]["oneOf"]
    assert set(one["enum"]) == set(many["items"]["enum"]) == set(KINDS)


def test_a_new_kind_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, "probe", CellKind("probe", "x:run", "a probe", checks=lambda c: [
        f"needs 2 ranks, has {c.world_size}"] if c.world_size < 2 else []))
    monkeypatch.setitem(KINDS, "adapt", CellKind("adapt", "x:run", "adapters", trains_model=True, adapters=True,
                                                 id_form="layout", id_tag="ad-r{lora_rank}"))
    probe = Cell(sweep="s", model="-", hardware="cpu", nodes=1, gpus_per_node=2, kind="probe")
    assert probe.cell_id == "probe_cpu-1x2" and probe.adapter_rank is None
    assert check_cell(probe).status == "planned" and check_cell(Cell(**{**vars(probe), "gpus_per_node": 1})).reasons \
        == ["needs 2 ranks, has 1"]
    assert as_recorded(probe.to_dict()) == probe.to_dict()
    adapt = Cell(sweep="s", model="tiny-llama", hardware="cpu", nodes=1, gpus_per_node=1, kind="adapt", lora_rank=4)
    assert adapt.cell_id.endswith("_ad-r4") and adapt.adapter_rank == 4
    assert "adapt" in kinds_where(trains_model=True) and "probe" not in kinds_where(trains_model=True)
    assert "params_total" in check_cell(adapt).estimates  # a training kind: the training checks and estimates


def test_kinds_are_asked_by_their_flags() -> None:
    assert kind_of(None) is get_kind("train") and kind_of("") is get_kind("train") and kind_of("gone") is None
    assert kinds_where(trains_model=True) == ("train", "lora")
    command = Cell(sweep="s", model="-", hardware="cpu", nodes=1, gpus_per_node=2, kind="command", command="x",
                   label="fsdp2")
    shown = as_recorded(command.to_dict())
    assert shown["engine"] == "command" and shown["tp"] is None and shown["lr"] is None and shown["seq_len"] == 128


#: a kind's name compared with a value: ``kind == "lora"``, ``"train" != row["kind"]``, ``kind in ("train", ...)``
_BRANCH = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](?P<a>[a-z-]+)["']|["'](?P<b>[a-z-]+)["']\s*(==|!=)""")


def test_no_module_but_the_registry_branches_on_a_kinds_name() -> None:
    found = set()
    for path in SRC.rglob("*.py"):
        if path == Path(kinds.__file__).resolve():
            continue
        for line in path.read_text().splitlines():
            for m in _BRANCH.finditer(line if "kind" in line else ""):
                if (m.group("a") or m.group("b")) in KINDS:
                    found.add(str(path.relative_to(SRC)))
    assert not found, sorted(found)
