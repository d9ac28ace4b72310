"""Files in and out through one door each: every result file the package writes goes through the atomic writer
(records/atomic.py), and run.json is read only through ``RunRecord`` (records/run_record.py). Read from the source
(about 0.3 s), so a new writer or reader that bypasses them fails here with its file and line."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "calorimeter"
#: the calls that write a whole file (those that also return text, ``to_csv()``, only given a path)
WRITES = ("savefig", "to_csv", "to_parquet", "write_text", "write_bytes")
#: files that write on their own, and why
OWN_WRITERS = {
    "records/atomic.py": "the atomic writer itself",
    # runs inside a user's command (no calorimeter import there): writes a temporary file and renames it itself
    "command/hook/sitecustomize.py": "temporary file and os.replace, without the package",
}


def _unguarded_writes(path: Path) -> list[int]:
    """Lines of write calls that are not inside a ``lambda`` (the callback :func:`write_atomic` calls with the
    temporary path) or a nested ``def _write``."""
    tree = ast.parse(path.read_text())
    parents: dict[ast.AST, ast.AST] = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES
                and (node.args or node.func.attr.startswith("write_"))):
            continue
        up, guarded = parents.get(node), False
        while up is not None and not guarded:
            guarded = isinstance(up, ast.Lambda) or (isinstance(up, ast.FunctionDef) and up.name.startswith("_write"))
            up = parents.get(up)
        if not guarded:
            found.append(node.lineno)
    return found


def test_every_writer_goes_through_the_atomic_writer() -> None:
    bad = [f"{p.relative_to(SRC)}:{line}" for p in sorted(SRC.rglob("*.py"))
           if str(p.relative_to(SRC)) not in OWN_WRITERS for line in _unguarded_writes(p)]
    assert not bad, "writes outside records.atomic.write_atomic:\n" + "\n".join(bad)


def test_the_check_sees_a_direct_write(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f(df, p):\n    df.to_csv(p)\n    write_atomic(p, lambda t: df.to_csv(t))\n")
    assert _unguarded_writes(f) == [2]


def test_run_json_is_read_only_through_run_record() -> None:
    """No module outside records/ parses a run.json itself (``read_run_record`` upgrades old names and says why a
    file cannot be used)."""
    raw = re.compile(r"json\.loads?\([^)]*(run_json|RUN_JSON|run\.json)")
    bad = [f"{p.relative_to(SRC)}:{i}" for p in sorted(SRC.rglob("*.py")) if p.parent.name != "records"
           for i, line in enumerate(p.read_text().splitlines(), 1) if raw.search(line)]
    assert not bad, "run.json parsed outside records/:\n" + "\n".join(bad)
