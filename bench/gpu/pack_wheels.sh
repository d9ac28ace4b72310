#!/usr/bin/env bash
# Pack .whl/ (the wheels for an offline GPU node, see setup_offline.sh) into .whlxz/whl.tar.xz, about 40% smaller:
# each wheel re-zipped without compression (a wheel's RECORD hashes its unpacked files, not the zip, so pip accepts it)
# and the whole folder xz-compressed, which shrinks Python sources far more than a wheel's per-file deflate. For when
# the checkout plus .whl/ exceed what the GPU node may receive (64 MiB for the nodes the committed sets were
# measured on): send `.whlxz` instead of `.whl`; setup_offline.sh unpacks it on the node when .whl/ is absent there.
#   bash bench/gpu/pack_wheels.sh            # .whlxz/whl.tar.xz: every wheel
#   bash bench/gpu/pack_wheels.sh --split    # .whlxzA/: sqlalchemy, greenlet, megatron-core; .whlxz/: the rest
# With --split, send both folders (`.whlxzA`, `.whlxz`) and setup_offline.sh unpacks both; that fits while
# bench/gpu/lighten.sh keeps the committed measurements off the disk (2026-11-27c: tree 57,988 KiB + archive
# 10,592 KiB was over the limit; split: 4.3 + 6.2 MiB, then sent in two runs on one node).
# The limit counts disk blocks: on 2026-11-27 the tracked tree took 57,272 KiB (`git ls-files -z | du -c
# --files0-from=-`) and this archive 10,592 KiB, 66.3 MiB together, over 64 MiB; with every committed Parquet file
# re-encoded zstd the tree took 50,092 KiB (59.3 MiB with the archive). The reference data grows by ~4 MB with each
# batch of sets kept: when it is over again, list what the node already has (a run that sends nothing along:
# `python3 -m pip list`) and rebuild .whl/ with `--skip` for those before packing. 2026-11-27d: the tree alone took
# 66,156 KiB, over the limit with nothing sent along; every Parquet file re-encoded
# (records/atomic.parquet_options: floats byte-stream split) and the validation tables gzipped: 58,116 KiB.
# 2026-11-27e: 63,300 KiB again; since then bench/gpu/lighten.sh takes results/reference/ off the disk before the
# checkout is sent (a sparse checkout): ~3.4 MiB travel and both halves go in one run.
set -euo pipefail
TMP=$(mktemp -d)
mkdir "$TMP/.whl"
for w in .whl/*.whl; do
  mkdir "$TMP/x"
  (cd "$TMP/x" && unzip -q "$OLDPWD/$w" && zip -q -0 -r -X "../.whl/$(basename "$w")" .)
  rm -rf "$TMP/x"
done
mkdir -p .whlxz
if [ "${1:-}" = --split ]; then
  mkdir -p "$TMP/a/.whl" .whlxzA
  for w in "$TMP"/.whl/{sqlalchemy,greenlet,megatron_core}-*.whl; do mv "$w" "$TMP/a/.whl/"; done
  tar cf - -C "$TMP/a" .whl | xz -9 -T0 > .whlxzA/whl.tar.xz
  ls -l .whlxzA/whl.tar.xz
fi
tar cf - -C "$TMP" .whl | xz -9 -T0 > .whlxz/whl.tar.xz
rm -rf "$TMP"
ls -l .whlxz/whl.tar.xz
