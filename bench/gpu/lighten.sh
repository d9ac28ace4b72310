#!/usr/bin/env bash
# Take the committed measurements out of the working tree while the checkout is sent to a GPU node, and bring them
# back after. Where the node receives the checkout's tracked files that are present with a size limit (counted in
# disk blocks, with anything sent along: 64 MiB for the nodes the committed sets were measured on), results/reference/
# is most of them (61 MiB of 65 on 2026-11-27e: even the first half of the wheel archive no longer fitted), and a GPU
# node never reads it (run_reference.sh trains records into /tmp).
# A sparse checkout keeps every file in git and only takes results/reference/ off the disk; the node's
# source.patch leaves results/ out anyway (records/provenance.PATCH_EXCLUDES).
#   bash bench/gpu/lighten.sh on     # before sending the checkout: ~3.4 MiB travel, both wheel halves fit with it
#   bash bench/gpu/lighten.sh off    # after the runs: results/reference/ back; then keep_reference.sh as usual
# With it on, send both wheel archives (`.whlxzA`, `.whlxz`: bench/gpu/pack_wheels.sh --split) with the checkout;
# setup_offline.sh unpacks both.
set -euo pipefail
# The set that prices sweeps (`prices:` in config/calibration.yaml: its calibration.json and timing.json, ~0.35 MB)
# stays, so that the node's `calorimeter plan` and its progress lines project each cell's wall time and the ETA.
PRICES=$(awk '/^prices:/{print $2}' config/calibration.yaml)
case "${1:-}" in
  on)  git sparse-checkout set --no-cone '/*' '!/results/reference/' "/$PRICES/calibration.json" "/$PRICES/timing.json"
       git ls-files -t | awk '$1 == "H" {print substr($0, 3)}' | tr '\n' '\0' | du -c -k --files0-from=- | tail -1 ;;
  off) git sparse-checkout disable ;;
  *)   echo "usage: bash bench/gpu/lighten.sh on|off" >&2; exit 2 ;;
esac
