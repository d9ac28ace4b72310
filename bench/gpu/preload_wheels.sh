#!/usr/bin/env bash
# First half of a two-call install, for when the checkout plus the whole wheel archive exceed what one device call
# may carry (64 MiB): this call carries `.whlxzA` (bench/gpu/pack_wheels.sh --split) and installs its wheels into
# /tmp/site; the next call, on the same warm machine (issue it at once: an idle machine goes back after 30 s),
# carries `.whlxz` with the rest and sources setup_offline.sh as usual.
#   bash bench/gpu/preload_wheels.sh        # carry: [".whlxzA"]
set -euo pipefail
TMP=$(mktemp -d)
tar xJf .whlxzA/whl.tar.xz -C "$TMP"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$TMP"/.whl/*.whl
ls "$TMP/.whl" | sed 's/^/preloaded /'
rm -rf "$TMP"
