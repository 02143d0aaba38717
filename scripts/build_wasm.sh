#!/usr/bin/env bash
# Builds the npm package's wasm: cargo (wasm32, release) -> wasm-bindgen --target web -> pkg/
# (fuselab.js, fuselab.d.ts, fuselab_bg.wasm), then shrinks the .wasm with wasm-opt -Oz from
# npm's binaryen (Debian's is too old for current Rust output). Prints raw and gzipped sizes.
# Needs `npm ci` first (for wasm-opt) and scripts/setup.sh (target, wasm-bindgen-cli).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --lib --profile wasm-release --target wasm32-unknown-unknown
rm -rf pkg
wasm-bindgen --target web --out-dir pkg --out-name fuselab \
  target/wasm32-unknown-unknown/wasm-release/fuselab.wasm
raw=$(stat -c %s pkg/fuselab_bg.wasm)
# First --reorder-functions-by-name (while wasm-bindgen's name section is still there): the
# functions in name order, so the copies of one generic function and the functions of one module
# sit next to each other, inside gzip's 32 KB window (−20.7 KB gzipped on 2026-12-05, 799,630 →
# 778,948; the raw size does not change, nor does anything at run time). Then three -Oz passes
# (each finds a little more: 801,0xx → 799,2xx bytes gzipped on 2026-12-05), no
# producers/target_features sections (nothing reads them at run time), and --low-memory-unused:
# an address computed as `p + c` (c < 1024) may become a load/store offset, which differs only
# where p + c would wrap past 2^32 into the first 1 KiB; Rust's pointers never do (−2.7 KB gz).
# The output has no name section (no -g).
node_modules/.bin/wasm-opt --reorder-functions-by-name -Oz -Oz -Oz --low-memory-unused --strip-producers --strip-target-features --enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int \
  --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
  pkg/fuselab_bg.wasm -o pkg/fuselab_bg.opt.wasm
mv pkg/fuselab_bg.opt.wasm pkg/fuselab_bg.wasm
opt=$(stat -c %s pkg/fuselab_bg.wasm)
gz=$(gzip -9 -c pkg/fuselab_bg.wasm | wc -c)
rm -f pkg/.gitignore pkg/package.json
printf 'pkg/fuselab_bg.wasm: %d bytes from wasm-bindgen, %d after wasm-opt -Oz, %d gzipped\n' \
  "$raw" "$opt" "$gz"
