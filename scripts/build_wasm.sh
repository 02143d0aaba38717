#!/usr/bin/env bash
# Builds the npm package's wasm: cargo (wasm32, release) -> wasm-bindgen --target web -> pkg/
# (fuselab.js, fuselab.d.ts, fuselab_bg.wasm), then shrinks the .wasm with wasm-opt -Oz from
# npm's binaryen (Debian's is too old for current Rust output) and orders its functions for gzip
# (scripts/reorder_wasm_functions.mjs). Prints raw and gzipped sizes.
# Needs `npm ci` first (for wasm-opt) and scripts/setup.sh (target, wasm-bindgen-cli).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --lib --profile wasm-release --target wasm32-unknown-unknown
rm -rf pkg
wasm-bindgen --target web --out-dir pkg --out-name fuselab \
  target/wasm32-unknown-unknown/wasm-release/fuselab.wasm
raw=$(stat -c %s pkg/fuselab_bg.wasm)
features=(--enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
  --enable-mutable-globals --enable-reference-types --enable-multivalue)
# Three -Oz passes (each finds a little more: 801,0xx → 799,2xx bytes gzipped on 2026-12-05) and
# --low-memory-unused: an address computed as `p + c` (c < 1024) may become a load/store offset,
# which differs only where p + c would wrap past 2^32 into the first 1 KiB; Rust's pointers never
# do (−2.7 KB gz). -g keeps the name section for the reordering below; functions go in name order
# first (the copies of one generic function and one module's functions together).
node_modules/.bin/wasm-opt -g --reorder-functions-by-name -Oz -Oz -Oz --low-memory-unused \
  "${features[@]}" pkg/fuselab_bg.wasm -o pkg/fuselab_bg.named.wasm
# Then the functions in an order that puts similar bodies next to each other, inside gzip's 32 KB
# window (scripts/reorder_wasm_functions.mjs renames them by rank; wasm-opt moves them): on
# 2026-12-05 name order took the gzipped size from 799,631 to 778,956 and this order to 756,5xx,
# with the raw size and everything at run time unchanged. The last wasm-opt drops the name section
# (no -g) with one more -Oz pass (the passes that -g turns off are worth 1.5 KB gzipped), and the
# producers/target_features sections (nothing reads them at run time).
node scripts/reorder_wasm_functions.mjs pkg/fuselab_bg.named.wasm pkg/fuselab_bg.ordered.wasm
node_modules/.bin/wasm-opt --reorder-functions-by-name -Oz --low-memory-unused --strip-producers \
  --strip-target-features "${features[@]}" pkg/fuselab_bg.ordered.wasm -o pkg/fuselab_bg.wasm
rm pkg/fuselab_bg.named.wasm pkg/fuselab_bg.ordered.wasm
opt=$(stat -c %s pkg/fuselab_bg.wasm)
gz=$(gzip -9 -c pkg/fuselab_bg.wasm | wc -c)
rm -f pkg/.gitignore pkg/package.json
printf 'pkg/fuselab_bg.wasm: %d bytes from wasm-bindgen, %d after wasm-opt -Oz, %d gzipped\n' \
  "$raw" "$opt" "$gz"
