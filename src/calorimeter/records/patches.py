"""The source patch of a record measured from a modified tree: where it is kept and how its hash is checked.

A record from a modified tree names ``provenance.git.patch`` (``source.patch``), its SHA-256 and size: the commit plus
that patch give back the code that measured (:func:`calorimeter.records.provenance.git_patch`). The patch is found

1. next to the record (``<cell>/source.patch``, where a run writes it), else
2. in the patch store (``results/reference/patches/``), content-addressed: ``<sha256>.patch`` or
   ``<sha256>.patch.gz`` (``bench/gpu/keep_reference.sh`` puts a kept set's patches there, one file per hash), else
3. rebuilt from this repository's history by a recipe in the store's ``patches.json``: for patches too large to
   keep (the node's git metadata older than its files, so that the patch held whole re-encoded measurement files),
   the parts whose per-file diffs make the patch, each accepted only if the rebuilt bytes have the recorded
   SHA-256, or
4. listed in ``patches.json`` as unrecoverable, with the reason.

``calorimeter provenance check`` checks every record of a folder this way; ``calorimeter provenance patch RECORD``
writes a record's patch out, to apply on its commit.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calorimeter.plan.json_types import JsonObject
from calorimeter.records.atomic import write_atomic
from calorimeter.records.paths import RUN_JSON
from calorimeter.records.provenance import DIFF_OPTIONS, diff_pathspec, git_text

#: the patch store of the committed reference sets, relative to the checkout
PATCH_STORE = Path("results/reference/patches")
#: the store's index: recipes of patches rebuilt from history, unrecoverable patches, and how each was recovered
INDEX_NAME = "patches.json"
#: the SHA-256 of the empty patch (a tree whose only changes lay in the patch's excluded paths)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

#: how a patch rebuilt from history is kept
RECIPE = f"recipe in {INDEX_NAME} (git history)"
#: outcomes of resolving a record's patch; only ``ok`` and ``unrecoverable`` (said, with its reason) pass a check
OK, UNRECOVERABLE, MISSING, MISMATCH, NO_HISTORY = "ok", "unrecoverable", "missing", "hash mismatch", "no history"


@dataclass(frozen=True)
class PatchRef:
    """What a record says of its patch."""

    record: Path
    commit: str | None
    name: str
    sha256: str
    size_bytes: int | None
    excludes: tuple[str, ...]


@dataclass(frozen=True)
class Resolution:
    """Where a record's patch was found (or why not), and its bytes when found with the right hash."""

    status: str
    #: how it is kept (next to the record, stored, recipe, empty), or why it is not found
    source: str
    data: bytes | None = None
    #: False for a recipe accepted without rebuilding it (``rebuild_recipes=False``): its hash is not checked
    hash_checked: bool = True


def patch_ref(run_json: Path, record: JsonObject) -> PatchRef | None:
    """The patch a record names (None for a record that names none: a clean tree, or one measured before records
    kept their patch)."""
    git = (record.get("provenance") or {}).get("git") or {}
    if not git.get("patch") or not git.get("patch_sha256"):
        return None
    return PatchRef(run_json, git.get("commit"), str(git["patch"]), str(git["patch_sha256"]), git.get("patch_bytes"),
                    tuple(git.get("patch_excludes") or ()))


def load_index(store: Path) -> dict[str, JsonObject]:
    """The store's ``patches.json`` (sha256 -> entry); empty when there is none."""
    path = store / INDEX_NAME
    return json.loads(path.read_text()) if path.is_file() else {}


def stored_file(store: Path, sha256: str) -> Path | None:
    """The store's file of this hash, plain or gzipped."""
    for name in (f"{sha256}.patch", f"{sha256}.patch.gz"):
        if (store / name).is_file():
            return store / name
    return None


def read_patch_file(path: Path) -> bytes:
    """A patch file's bytes (gunzipped when its name ends in .gz)."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def store_patch(path: Path, store: Path = PATCH_STORE) -> Path:
    """Keep a patch file in the store under its SHA-256 (once per content); returns the stored file."""
    return store_patch_bytes(path.read_bytes(), store)


def store_patch_bytes(data: bytes, store: Path = PATCH_STORE) -> Path:
    """Keep a patch's bytes in the store under their SHA-256 (once per content); returns the stored file."""
    sha = hashlib.sha256(data).hexdigest()
    existing = stored_file(store, sha)
    if existing is not None:
        return existing
    store.mkdir(parents=True, exist_ok=True)
    out = store / f"{sha}.patch"
    write_atomic(out, lambda p: p.write_bytes(data))
    return out


def file_chunks(patch: str) -> dict[str, str]:
    """A patch split into its files: the ``diff --git`` header line -> that file's part. (A line of a file's content
    never starts with ``diff --git``: it carries a ``+``/``-``/`` `` prefix, or is base85.)"""
    chunks: dict[str, str] = {}
    key = None
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git "):
            key = line
            chunks[key] = ""
        if key is None:
            raise ValueError("a patch must start with a `diff --git` line")
        chunks[key] += line
    return chunks


def _header_path(header: str) -> str:
    """The path a ``diff --git a/P b/P`` header names, in the order git lists files."""
    return header[len("diff --git "):].rstrip("\n")


@functools.lru_cache(maxsize=2)
def _files_of(repo: Path, commit: str, tree: str, excludes: tuple[str, ...], abbrev: int) -> dict[str, str]:
    """The files of a ``files_of`` part (see :func:`rebuild`); kept for the next recipe with the same part."""
    text = git_text(["diff", commit, tree, *DIFF_OPTIONS, "--no-renames", "--diff-filter=a", f"--abbrev={abbrev}",
                     *diff_pathspec(excludes)], repo)
    return file_chunks(text) if text else {}


def rebuild(ref: PatchRef, entry: JsonObject, store: Path, repo: Path) -> bytes:
    """The bytes of a recipe's patch: each part's files, a later part's file replacing an earlier one's, in git's
    order. Parts: ``{"files_of": COMMIT}``: the diff from the record's commit to COMMIT's files, modified and deleted
    files only (what ``git diff HEAD`` shows on a tree holding COMMIT's files with older git metadata: the files added
    since are untracked there), with the record's excluded paths and a text file's object names abbreviated to the
    entry's ``abbrev`` (7: git's default length in a repository of this size then); ``{"patch": NAME}``: a file of
    the store."""
    commit = entry.get("commit") or ref.commit
    if not commit:
        raise ValueError("the record names no commit")
    files: dict[str, str] = {}
    for part in entry["parts"]:
        if "files_of" in part:
            files.update(_files_of(repo.resolve(), commit, str(part["files_of"]), ref.excludes,
                                   int(entry.get("abbrev", 7))))
        else:
            text = read_patch_file(store / str(part["patch"])).decode()
            files.update(file_chunks(text) if text else {})
    return "".join(files[h] for h in sorted(files, key=lambda h: _header_path(h).encode())).encode()


def _has_commit(repo: Path, commit: str) -> bool:
    try:
        git_text(["cat-file", "-e", f"{commit}^{{commit}}"], repo)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def resolve(ref: PatchRef, store: Path = PATCH_STORE, repo: Path | None = None, index: dict | None = None,
            rebuild_recipes: bool = True) -> Resolution:
    """Find a record's patch and check its SHA-256 (see the module's text for the order).

    ``rebuild_recipes=False`` accepts a recipe without rebuilding it (a quick check: the recipe is there)."""
    repo = repo or Path.cwd()
    index = load_index(store) if index is None else index
    candidates = [(ref.record.parent / ref.name, "next to the record")]
    found = stored_file(store, ref.sha256)
    if found is not None:
        candidates.append((found, f"in the store ({''.join(found.suffixes)})"))
    for path, where in candidates:
        if path.is_file():
            data = read_patch_file(path)
            if hashlib.sha256(data).hexdigest() == ref.sha256:
                return Resolution(OK, where, data)
            return Resolution(MISMATCH, f"{where}: its SHA-256 is {hashlib.sha256(data).hexdigest()[:12]}")
    if ref.sha256 == EMPTY_SHA256:
        return Resolution(OK, "empty (the tree's changes lay only in excluded paths)", b"")
    entry = index.get(ref.sha256)
    if entry is None:
        return Resolution(MISSING, "neither next to the record nor in the store, and no recipe or reason in "
                          f"{store / INDEX_NAME}")
    if "unrecoverable" in entry:
        return Resolution(UNRECOVERABLE, str(entry["unrecoverable"]))
    if "parts" not in entry:
        return Resolution(MISSING, f"{INDEX_NAME} says how it was recovered, but {ref.sha256}.patch is not in the "
                          "store")
    if not rebuild_recipes:
        return Resolution(OK, RECIPE, hash_checked=False)
    needed = [c for c in [entry.get("commit") or ref.commit] + [p["files_of"] for p in entry["parts"] if "files_of"
                                                                  in p] if c]
    absent = [c for c in needed if not _has_commit(repo, c)]
    if absent:
        return Resolution(NO_HISTORY, f"the recipe needs commit(s) {', '.join(c[:12] for c in absent)}, not in "
                          "this clone's history (a full clone has them)")
    data = rebuild(ref, entry, store, repo)
    got = hashlib.sha256(data).hexdigest()
    if got != ref.sha256:
        return Resolution(MISMATCH, f"recipe rebuilt {len(data)} bytes with SHA-256 {got[:12]}")
    return Resolution(OK, RECIPE, data)


def records(folders: Iterable[Path]) -> Iterator[tuple[Path, JsonObject]]:
    """Every cell record (``run.json``) under the folders, attempt folders left out (their record is the cell's,
    or one set aside), in path order."""
    for folder in folders:
        for run_json in sorted(Path(folder).rglob(RUN_JSON)):
            if "attempts" not in run_json.parts:
                yield run_json, json.loads(run_json.read_text())


@dataclass(frozen=True)
class RecordProvenance:
    """One record's git state and, for a modified tree, where its patch stands."""

    record: Path
    commit: str | None
    state: str
    patch: PatchRef | None
    resolution: Resolution | None


#: a record's git state, as the provenance table words it
CLEAN, MODIFIED_WITH_PATCH, MODIFIED_NO_PATCH, NO_GIT = (
    "clean tree", "modified tree, patch named", "modified tree, no patch recorded", "no git state recorded")


def check(folders: Iterable[Path], store: Path = PATCH_STORE, repo: Path | None = None,
          rebuild_recipes: bool = True) -> list[RecordProvenance]:
    """Every record of the folders with its git state, and its patch resolved (each distinct patch resolved once)."""
    index = load_index(store)
    seen: dict[tuple[Path | None, str], Resolution] = {}
    out = []
    for run_json, record in records(folders):
        git = (record.get("provenance") or {}).get("git") or {}
        ref = patch_ref(run_json, record)
        resolution = None
        if ref is not None:
            local = run_json.parent / ref.name
            key = (local if local.is_file() else None, ref.sha256)
            if key not in seen:
                seen[key] = resolve(ref, store, repo, index, rebuild_recipes)
            resolution = seen[key]
            state = MODIFIED_WITH_PATCH
        elif git.get("dirty"):
            state = MODIFIED_NO_PATCH
        elif git.get("commit"):
            state = CLEAN
        else:
            state = NO_GIT
        out.append(RecordProvenance(run_json, git.get("commit"), state, ref, resolution))
    return out


def state_counts(rows: list[RecordProvenance]) -> dict[str, int]:
    """How many records have each git state, in the order of the provenance table."""
    return {s: sum(1 for r in rows if r.state == s) for s in (CLEAN, MODIFIED_WITH_PATCH, MODIFIED_NO_PATCH, NO_GIT)}


def failures(rows: list[RecordProvenance]) -> list[RecordProvenance]:
    """Records whose named patch is neither found with its hash nor listed as unrecoverable."""
    return [r for r in rows if r.resolution is not None and r.resolution.status not in (OK, UNRECOVERABLE)]


def _set_of(record: Path, root: Path) -> str:
    """The first folder of a record's path under ``root`` (a set of results/reference)."""
    record, root = record.resolve(), root.resolve()
    rel = record.relative_to(root) if record.is_relative_to(root) else record
    return rel.parts[0] if len(rel.parts) > 1 else root.name


def table_markdown(rows: list[RecordProvenance], root: Path, index: dict[str, JsonObject]) -> str:
    """The provenance table of a folder of sets: per set, its records' git states and patches; then per patch, how
    it is kept (written by ``calorimeter provenance check --table``)."""
    lines = ["# Provenance of the committed records", "",
             "Generated by `calorimeter provenance check --quick --table <this file>` from the records of its folder: "
             "do not edit by hand.", "",
             "A record names the commit it ran on and whether the tree was modified; from 2026-11-25 on, a record "
             "from a modified tree also names its `source.patch` by SHA-256, so that commit + patch give back the "
             "code that measured. A record from a modified tree before that names no patch: its modification "
             "was not recorded and cannot be recovered; one with no git state predates git states in records "
             "(2026-11-21). `calorimeter provenance patch <cell folder>` writes a record's patch out, to apply on its "
             "commit.", "",
             "| set | records | clean tree | modified, patch found | modified, patch not found (below) | "
             "modified, no patch recorded | no git state | commits |",
             "|---|---|---|---|---|---|---|---|"]
    by_set: dict[str, list[RecordProvenance]] = {}
    for r in rows:
        by_set.setdefault(_set_of(r.record, root), []).append(r)
    for name, rs in sorted(by_set.items()):
        def n(pred: Any, rs: list[RecordProvenance] = rs) -> int:
            return sum(1 for r in rs if pred(r))
        commits = sorted({(r.commit or "")[:8] for r in rs if r.commit})
        lines.append(
            f"| {name} | {len(rs)} | {n(lambda r: r.state == CLEAN)} | "
            f"{n(lambda r: r.resolution is not None and r.resolution.status == OK)} | "
            f"{n(lambda r: r.resolution is not None and r.resolution.status != OK)} | "
            f"{n(lambda r: r.state == MODIFIED_NO_PATCH)} | {n(lambda r: r.state == NO_GIT)} | "
            f"{', '.join(f'`{c}`' for c in commits)} |")
    lines += ["", f"All: {len(rows)} records; " + "; ".join(f"{v} {k}" for k, v in state_counts(rows).items()) + ".",
              "",
              "## The patches", "",
              "| SHA-256 | bytes | commit | records | kept as | how it was recovered |", "|---|---|---|---|---|---|"]
    patches: dict[str, list[RecordProvenance]] = {}
    for r in rows:
        if r.patch is not None:
            patches.setdefault(r.patch.sha256, []).append(r)
    for sha, rs in sorted(patches.items(), key=lambda kv: (kv[1][0].commit or "", kv[0])):
        ref, res = rs[0].patch, rs[0].resolution
        assert ref is not None and res is not None
        entry = index.get(sha, {})
        kept = res.source if res.status == OK else f"**{res.status}**: {res.source}"
        commits = ", ".join(f"`{c[:8]}`" for c in sorted({r.commit or "" for r in rs}))
        lines.append(f"| `{sha[:16]}` | {ref.size_bytes} | {commits} | {len(rs)} | {kept} | "
                     f"{entry.get('how', '')} |")
    return "\n".join(lines) + "\n"
