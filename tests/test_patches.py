"""Every source patch a record names can be found and checked: next to the record, in the patch store, rebuilt from
history by a recipe, or listed as unrecoverable with its reason (records/patches.py, `calorimeter provenance`)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from calorimeter.cli import main
from calorimeter.records import patches
from calorimeter.records.provenance import DIFF_OPTIONS, diff_pathspec, git_text

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "results" / "reference"
STORE = ROOT / patches.PATCH_STORE


def test_every_committed_record_finds_its_patch_or_says_why() -> None:
    """A record naming a patch that is neither in the repository (file or recipe) nor listed as unrecoverable fails
    here; so does a stored file whose name is not its hash, and a provenance table that is not the generated one."""
    rows = patches.check([REFERENCE], STORE, ROOT, rebuild_recipes=False)
    bad = patches.failures(rows)
    assert not bad, "\n".join(f"{r.record.relative_to(ROOT)}: {r.resolution.status}: {r.resolution.source}"
                              for r in bad[:10])  # type: ignore[union-attr]
    assert sum(r.patch is not None for r in rows) >= 85
    for f in STORE.glob("*.patch*"):
        assert hashlib.sha256(patches.read_patch_file(f)).hexdigest() == f.name.split(".")[0], f.name
    index = patches.load_index(STORE)
    named = {r.patch.sha256 for r in rows if r.patch is not None}
    for sha, entry in index.items():
        assert sha in named and entry.get("how") or entry.get("unrecoverable"), sha
    table = patches.table_markdown(rows, REFERENCE, index)
    assert (REFERENCE / "PROVENANCE.md").read_text() == table, (
        "results/reference/PROVENANCE.md is stale: calorimeter provenance check --quick --table "
        "results/reference/PROVENANCE.md")


def test_a_records_patch_is_written_out_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    stored = sorted(f for f in STORE.glob("*.patch") if f.stat().st_size)[0]
    record = next(r for r in REFERENCE.rglob("run.json") if stored.name[:64] in r.read_text())
    assert main(["provenance", "patch", str(record.parent), "-o", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p").read_bytes() == stored.read_bytes()
    clean = next(r for r in REFERENCE.rglob("run.json") if '"dirty": false' in r.read_text())
    assert main(["provenance", "patch", str(clean)]) == 2  # names no patch: said, no traceback


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def _record(folder: Path, commit: str, data: bytes) -> Path:
    folder.mkdir(parents=True)
    git = {"commit": commit, "dirty": True, "patch": "source.patch", "patch_sha256": hashlib.sha256(data).hexdigest(),
           "patch_bytes": len(data)}
    (folder / "run.json").write_text(json.dumps({"provenance": {"git": git}}))
    return folder / "run.json"


def test_a_recipe_rebuilds_a_patch_of_newer_files_on_older_git_metadata(tmp_path: Path) -> None:
    """The node case: its git metadata at commit A, its files those of a later commit B (B's new file untracked
    there), plus a hand edit. The recipe (B's files + the stored hand edit) gives the patch back byte for byte; a
    wrong recipe is a mismatch, an unknown hash is missing, a listed one is unrecoverable, and only the last two
    differ in whether a check passes."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("A = 1\n")
    (repo / "z.sh").write_text("tar czf out.tgz .\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "A")
    a = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "a.py").write_text("A = 2\n")
    (repo / "new.py").write_text("NEW = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "B")
    b = _git(repo, "rev-parse", "HEAD").strip()
    node = tmp_path / "node"  # A's metadata, B's files, new.py untracked, then a hand edit of z.sh
    _git(tmp_path, "clone", "-q", str(repo), str(node))
    _git(node, "checkout", "-q", a)
    (node / "a.py").write_text("A = 2\n")
    (node / "new.py").write_text("NEW = 1\n")
    (node / "z.sh").write_text("tar czf out.tgz --exclude=x .\n")
    # the patch as the records these recipes recover wrote it: tracked files only (records now add untracked ones)
    data = git_text(["diff", "HEAD", *DIFF_OPTIONS, *diff_pathspec()], node).encode()
    store = tmp_path / "store"
    store.mkdir()
    edit = patches.file_chunks(data.decode())
    overlay = next(v for k, v in edit.items() if "z.sh" in k).encode()
    (store / "edit.patch").write_bytes(overlay)
    run_json = _record(tmp_path / "res" / "s" / "cells" / "c1", a, data)
    ref = patches.patch_ref(run_json, json.loads(run_json.read_text()))
    assert ref is not None
    recipe = {"parts": [{"files_of": b}, {"patch": "edit.patch"}], "how": "t"}
    got = patches.resolve(ref, store, repo, {ref.sha256: recipe})
    assert got.status == patches.OK and got.data == data
    assert patches.resolve(ref, store, repo, {ref.sha256: {"parts": [{"files_of": b}]}}).status == patches.MISMATCH
    assert patches.resolve(ref, store, repo, {ref.sha256: {**recipe, "commit": "f" * 40}}).status == patches.NO_HISTORY
    (store / patches.INDEX_NAME).write_text("{}")
    rows = patches.check([tmp_path / "res"], store, repo)
    assert [r.resolution.status for r in patches.failures(rows)] == [patches.MISSING]  # type: ignore[union-attr]
    (store / patches.INDEX_NAME).write_text(json.dumps({ref.sha256: {"unrecoverable": "the node was lost"}}))
    rows = patches.check([tmp_path / "res"], store, repo)
    assert not patches.failures(rows) and rows[0].resolution.source == "the node was lost"  # type: ignore[union-attr]
    stored = patches.store_patch(tmp_path / "p", store) if (tmp_path / "p").write_bytes(data) else None
    assert stored is not None and stored.name == f"{ref.sha256}.patch"
    assert patches.resolve(ref, store, repo).source.startswith("in the store")
    stored.unlink()  # described in the index, its file gone: missing, not accepted
    described = patches.resolve(ref, store, repo, {ref.sha256: {"how": "t"}}, rebuild_recipes=False)
    assert described.status == patches.MISSING


def test_keep_reference_files_each_patch_once_in_the_store(tmp_path: Path) -> None:
    """bench/gpu/keep_reference.sh: a kept set's records keep their run.json, their patch goes to the store under its
    hash (one file for cells that share it), and the closing check finds every patch."""
    data = b"diff --git a/x b/x\n"
    res = tmp_path / "res"
    for cell in ("c1", "c2"):
        _record(res / "sweep" / "cells" / cell, "0" * 40, data)
        (res / "sweep" / "cells" / cell / "source.patch").write_bytes(data)
    tar = tmp_path / "r.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        t.add(res, arcname=".")
    store, dest = tmp_path / "store", tmp_path / "dest"
    env = {**os.environ, "PATCH_STORE": str(store), "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ['PATH']}"}
    r = subprocess.run(["bash", "bench/gpu/keep_reference.sh", str(tar), str(dest)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in store.iterdir()] == [f"{hashlib.sha256(data).hexdigest()}.patch"]
    assert (dest / "sweep" / "cells" / "c1" / "run.json").is_file()
    assert not (dest / "sweep" / "cells" / "c1" / "source.patch").exists()
    assert "0 record(s) whose patch is missing or wrong" in r.stdout


@pytest.mark.integration
def test_the_committed_recipes_rebuild_their_patches_from_history() -> None:
    """The two 60 MB patches kept as recipes, rebuilt from this repository's history (~10 s; a shallow clone says
    which commits it lacks instead)."""
    rows = patches.check([REFERENCE / "hostprobe-2026-11-27"], STORE, ROOT)
    statuses = {r.resolution.status for r in rows if r.resolution is not None}
    assert statuses <= {patches.OK, patches.NO_HISTORY} and rows, statuses
