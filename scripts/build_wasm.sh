#!/usr/bin/env bash
# Builds the npm package's wasm: cargo (wasm32, release) -> wasm-bindgen --target web -> pkg/
# (fuselab.js, fuselab.d.ts, fuselab_bg.wasm, fuselab_bg.relaxed.wasm, wasm_url.js, and the
# threads build in pkg/threads/), then shrinks
# each .wasm with wasm-opt -Oz from
# npm's binaryen (Debian's is too old for current Rust output) and orders its functions for gzip
# (scripts/reorder_wasm_functions.mjs). Prints raw and gzipped sizes.
# Needs `npm ci` first (for wasm-opt) and scripts/setup.sh (target, wasm-bindgen-cli).
set -euo pipefail
cd "$(dirname "$0")/.."

# Two builds of one source: SIMD128 (every current browser, node >= 16) and SIMD128 + relaxed
# SIMD (Chromium since 114; engines without it refuse the whole module), whose matrix kernels' multiply-adds are one
# f32x4.relaxed_madd each. js/wasm_url.js picks the one the engine validates. RUSTFLAGS replaces
# .cargo/config.toml's flags, so it names simd128 again; its own target dir keeps both cached.
cargo build --lib --profile wasm-release --target wasm32-unknown-unknown
RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" cargo build --lib --profile wasm-release \
  --target wasm32-unknown-unknown --target-dir target/wasm-relaxed
rm -rf pkg pkg-relaxed
wasm-bindgen --target web --out-dir pkg --out-name fuselab \
  target/wasm32-unknown-unknown/wasm-release/fuselab.wasm
wasm-bindgen --target web --out-dir pkg-relaxed --out-name fuselab \
  target/wasm-relaxed/wasm32-unknown-unknown/wasm-release/fuselab.wasm
# One fuselab.js must load either .wasm: the glue (import names, exports) has to be the same.
if ! cmp -s pkg/fuselab.js pkg-relaxed/fuselab.js; then
  echo "build_wasm.sh: wasm-bindgen wrote different glue for the relaxed-SIMD build" >&2
  exit 1
fi
mv pkg-relaxed/fuselab_bg.wasm pkg/fuselab_bg.relaxed.wasm
rm -rf pkg-relaxed

# The threads build: SIMD128 + relaxed SIMD + atomics, its memory shared with the Web Workers of
# rayon's pool (feature wasm-threads, wasm-bindgen-rayon). The standard library has to be rebuilt
# with atomics (nightly, -Z build-std). The linker makes the memory shared and imported (the glue
# creates it and hands it to every worker), lets it grow to the 4 GiB that limits.rs states, and
# exports the thread-local-storage symbols wasm-bindgen's thread start needs. wasm-bindgen writes
# its own glue for it (a shared memory, a worker script under snippets/), so it lives in
# pkg/threads/ with its .wasm.
link="--shared-memory --import-memory --max-memory=4294967296 --export=__wasm_init_tls \
--export=__tls_size --export=__tls_align --export=__tls_base"
RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd,+atomics,+bulk-memory $(printf -- '-C link-arg=%s ' $link)" \
  cargo +nightly build -Z build-std=panic_abort,std --lib \
  --profile wasm-release --target wasm32-unknown-unknown --features wasm-threads \
  --target-dir target/wasm-threads
wasm-bindgen --target web --out-dir pkg/threads --out-name fuselab \
  target/wasm-threads/wasm32-unknown-unknown/wasm-release/fuselab.wasm
rm -f pkg/threads/.gitignore pkg/threads/package.json
cp js/wasm_url.js js/wasm_url.d.ts pkg/
raw=$(stat -c %s pkg/fuselab_bg.wasm)
features=(--enable-simd --enable-relaxed-simd --enable-bulk-memory --enable-nontrapping-float-to-int
  --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue)
# shrink FILE: wasm-opt in place.
# Three -Oz passes (each finds a little more: 801,0xx → 799,2xx bytes gzipped on 2026-12-05) and
# --low-memory-unused: an address computed as `p + c` (c < 1024) may become a load/store offset,
# which differs only where p + c would wrap past 2^32 into the first 1 KiB; Rust's pointers never
# do (−2.7 KB gz). -g keeps the name section for the reordering below; functions go in name order
# first (the copies of one generic function and one module's functions together).
# Then the functions in an order that puts similar bodies next to each other, inside gzip's 32 KB
# window (scripts/reorder_wasm_functions.mjs renames them by rank; wasm-opt moves them): on
# 2026-12-05 name order took the gzipped size from 799,631 to 778,956 and this order to 756,5xx,
# with the raw size and everything at run time unchanged. The last wasm-opt drops the name section
# (no -g) with one more -Oz pass (the passes that -g turns off are worth 1.5 KB gzipped), and the
# producers/target_features sections (nothing reads them at run time).
# Further arguments: more features (--enable-threads for the threads build).
shrink() {
  local f=$1 base=${1%.wasm}
  shift
  local features=("${features[@]}" "$@")
  node_modules/.bin/wasm-opt -g --reorder-functions-by-name -Oz -Oz -Oz --low-memory-unused \
    "${features[@]}" "$f" -o "$base.named.wasm"
  node scripts/reorder_wasm_functions.mjs "$base.named.wasm" "$base.ordered.wasm"
  node_modules/.bin/wasm-opt --reorder-functions-by-name -Oz --low-memory-unused --strip-producers \
    --strip-target-features "${features[@]}" "$base.ordered.wasm" -o "$f"
  rm "$base.named.wasm" "$base.ordered.wasm"
}
shrink pkg/fuselab_bg.wasm
shrink pkg/fuselab_bg.relaxed.wasm
shrink pkg/threads/fuselab_bg.wasm --enable-threads
rm -f pkg/.gitignore pkg/package.json
for f in pkg/fuselab_bg.wasm pkg/fuselab_bg.relaxed.wasm pkg/threads/fuselab_bg.wasm; do
  printf '%s: %d bytes after wasm-opt -Oz, %d gzipped\n' "$f" "$(stat -c %s "$f")" \
    "$(gzip -9 -c "$f" | wc -c)"
done
printf '(pkg/fuselab_bg.wasm was %d bytes from wasm-bindgen)\n' "$raw"
