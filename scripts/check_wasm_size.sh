#!/usr/bin/env bash
# The npm package's size budget: the shipped .wasm (pkg/fuselab_bg.wasm, as scripts/build_wasm.sh
# leaves it after wasm-opt -Oz) must be at most 2.5 MB raw and 800 KB gzipped (gzip -9), in
# decimal units (1 MB = 1,000,000 bytes; docs/benchmarks.md has the history). Prints both figures;
# exits 1 naming the figure over budget. scripts/test.sh runs it after `npm run build`.
#
#   bash scripts/check_wasm_size.sh [WASM]      # default: pkg/fuselab_bg.wasm
set -euo pipefail
cd "$(dirname "$0")/.."

RAW_BUDGET=2500000
GZIP_BUDGET=800000

wasm=${1:-pkg/fuselab_bg.wasm}
if [ ! -f "$wasm" ]; then
  echo "check_wasm_size: $wasm not found: run \`npm run build:wasm\` (scripts/build_wasm.sh) first" >&2
  exit 1
fi
raw=$(stat -c %s "$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
printf '%s: %d bytes raw (budget %d), %d bytes gzipped (budget %d)\n' \
  "$wasm" "$raw" "$RAW_BUDGET" "$gz" "$GZIP_BUDGET"
over=0
if [ "$raw" -gt "$RAW_BUDGET" ]; then
  echo "check_wasm_size: FAILED: $wasm is $raw bytes, $((raw - RAW_BUDGET)) over the $RAW_BUDGET-byte raw budget" >&2
  over=1
fi
if [ "$gz" -gt "$GZIP_BUDGET" ]; then
  echo "check_wasm_size: FAILED: $wasm is $gz bytes gzipped, $((gz - GZIP_BUDGET)) over the $GZIP_BUDGET-byte gzip budget" >&2
  over=1
fi
exit "$over"
