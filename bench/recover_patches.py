"""Recover the source patches that records name but that are nowhere to be found, from this repository's history.

A record from a modified tree names its commit and the SHA-256 and size of ``git diff HEAD`` on that tree
(records/provenance.git_patch). The tree's changes were usually committed soon after, whole or in steps, so the patch
is the concatenation, in git's path order, of per-file diffs from the record's commit to some later version of each
changed file. This searches that space and accepts a candidate only when its bytes have the recorded SHA-256:

1. the diff to each of the next WINDOW commits, as a whole (the tree was a later commit), with and without the
   files added since (a node whose git metadata was older than its files does not see those);
2. per file, one of its versions in those commits or none, the combinations whose sizes add up to the recorded size
   exactly (a subset sum; at most MAX_COMBOS are hashed).

Found patches are written to the patch store (results/reference/patches/, one file per hash); a patch recovered
otherwise (a hand edit on the node, say) goes there by hand or as a recipe in patches.json. Then
``calorimeter provenance check --table results/reference/PROVENANCE.md`` (docs/artifact.md A.3).

    python bench/recover_patches.py [--window 60] [--dry-run]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

from calorimeter.records import patches
from calorimeter.records.provenance import DIFF_OPTIONS, diff_pathspec, git_text

MAX_COMBOS = 200_000


def _later_commits(commit: str, window: int) -> list[str]:
    return git_text(["rev-list", "--reverse", "--ancestry-path", f"{commit}..HEAD"]).split()[:window]


def _diff(commit: str, other: str, excludes: tuple[str, ...], *extra: str) -> str:
    return git_text(["diff", commit, other, *DIFF_OPTIONS, *extra, *diff_pathspec(excludes)])


def _whole(ref: patches.PatchRef, later: list[str]) -> bytes | None:
    for other in later:
        for extra in ((), ("--no-renames", "--diff-filter=a")):
            data = _diff(ref.commit or "", other, ref.excludes, *extra).encode()
            if len(data) == ref.size_bytes and hashlib.sha256(data).hexdigest() == ref.sha256:
                return data
    return None


def _per_file(ref: patches.PatchRef, later: list[str]) -> bytes | None:
    """Subset sum over per-file versions (each file: none or one of its later versions) to the recorded size."""
    size = ref.size_bytes or 0
    options: dict[str, dict[bytes, None]] = {}
    for other in later:
        for header, chunk in patches.file_chunks(_diff(ref.commit or "", other, ref.excludes)).items():
            data = chunk.encode()
            if len(data) <= size:
                options.setdefault(header, {})[data] = None
    headers = sorted(options, key=lambda h: h[len("diff --git "):].encode())
    tried = 0

    def search(i: int, left: int, chosen: list[bytes]) -> bytes | None:
        nonlocal tried
        if left == 0:
            tried += 1
            data = b"".join(chosen)
            return data if hashlib.sha256(data).hexdigest() == ref.sha256 else None
        if i == len(headers) or tried >= MAX_COMBOS:
            return None
        found = search(i + 1, left, chosen)
        for data in options[headers[i]]:
            if found is None and len(data) <= left:
                found = search(i + 1, left - len(data), [*chosen, data])
        return found

    return search(0, size, [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="*", default=["results/reference"])
    p.add_argument("--store", default=str(patches.PATCH_STORE))
    p.add_argument("--window", type=int, default=60, help="later commits to search (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="search, but write nothing")
    args = p.parse_args(argv)
    store = Path(args.store)
    missing: dict[str, patches.PatchRef] = {}
    for r in patches.check([Path(f) for f in args.folders], store, rebuild_recipes=False):
        if r.patch is not None and r.resolution is not None and r.resolution.status == patches.MISSING:
            missing.setdefault(r.patch.sha256, r.patch)
    found = 0
    for sha, ref in sorted(missing.items(), key=lambda kv: kv[1].commit or ""):
        t0 = time.perf_counter()
        later = _later_commits(ref.commit or "", args.window) if ref.commit else []
        data = _whole(ref, later) if later else None
        data = data if data is not None or not later else _per_file(ref, later)
        took = time.perf_counter() - t0
        if data is None:
            print(f"not found     {sha[:16]}  {ref.size_bytes} bytes on {(ref.commit or '?')[:8]} ({took:.1f} s): "
                  "say why in patches.json (unrecoverable) or add a recipe")
            continue
        found += 1
        where = "(dry run)" if args.dry_run else patches.store_patch_bytes(data, store).name
        print(f"recovered     {sha[:16]}  {len(data)} bytes on {(ref.commit or '?')[:8]} ({took:.1f} s) -> {where}")
    print(f"{found} of {len(missing)} missing patch(es) recovered")
    return 0 if found == len(missing) else 1


if __name__ == "__main__":
    sys.exit(main())
