#!/usr/bin/env bash
# The npm package's size budget: each shipped .wasm (pkg/fuselab_bg.wasm,
# pkg/fuselab_bg.relaxed.wasm and pkg/threads/fuselab_bg.wasm, as scripts/build_wasm.sh leaves
# them after wasm-opt -Oz) must be at most 2.5 MB raw and 800 KB gzipped (gzip -9), in decimal
# units (1 MB = 1,000,000 bytes; docs/benchmarks.md has the history); the threads build may be
# 20 KB more gzipped (rayon, its Web Worker adapter and the atomics in the standard library,
# +11 KB gz when it was added). Prints both figures; exits 1 naming the figure over budget.
# scripts/test.sh runs it after `npm run build`.
#
#   bash scripts/check_wasm_size.sh [WASM]...   # default: the three builds in pkg/
set -euo pipefail
cd "$(dirname "$0")/.."

RAW_BUDGET=2500000
GZIP_BUDGET=800000

over=0
# Each build a browser may download: both must fit.
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(pkg/fuselab_bg.wasm pkg/fuselab_bg.relaxed.wasm pkg/threads/fuselab_bg.wasm)
fi
for w in "${files[@]}"; do
  {
    gzip_budget=$GZIP_BUDGET
    case "$w" in */threads/*) gzip_budget=$((GZIP_BUDGET + 20000)) ;; esac
    if [ ! -f "$w" ]; then
      echo "check_wasm_size: $w not found: run \`npm run build:wasm\` (scripts/build_wasm.sh) first" >&2
      exit 1
    fi
    raw=$(stat -c %s "$w")
    gz=$(gzip -9 -c "$w" | wc -c)
    printf '%s: %d bytes raw (budget %d), %d bytes gzipped (budget %d)\n' \
      "$w" "$raw" "$RAW_BUDGET" "$gz" "$gzip_budget"
    if [ "$raw" -gt "$RAW_BUDGET" ]; then
      echo "check_wasm_size: FAILED: $w is $raw bytes, $((raw - RAW_BUDGET)) over the $RAW_BUDGET-byte raw budget" >&2
      over=1
    fi
    if [ "$gz" -gt "$gzip_budget" ]; then
      echo "check_wasm_size: FAILED: $w is $gz bytes gzipped, $((gz - gzip_budget)) over the $gzip_budget-byte gzip budget" >&2
      over=1
    fi
  }
done
exit "$over"
