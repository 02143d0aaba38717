#!/usr/bin/env bash
# Every check fuselab has: format, lints, native and wasm builds, Rust tests (unit, integration,
# ONNX conformance), the Python client suite against onnxruntime, the wasm size budget, and the
# page and npm package tests in headless Chromium. Run scripts/setup.sh first (.ci/run does both).
# No check may pass by not running: no GPU adapter fails the WebGPU tests (FUSELAB_REQUIRE_GPU),
# and pytest lists its skips and xfails (-rxs).
set -euo pipefail
cd "$(dirname "$0")/.."

# wgpu (the WebGPU backend's tests, on lavapipe) warns without a runtime dir.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/fuselab-xdg-$(id -u)}"
mkdir -p -m 0700 "$XDG_RUNTIME_DIR"

step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

step "cargo fmt --check"
cargo fmt --check
step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings
step "cargo clippy (wasm32: lib and the wasm test)"
cargo clippy --target wasm32-unknown-unknown --lib --test wasm -- -D warnings
step "cargo clippy (wasm32 threads build: nightly, atomics, feature wasm-threads)"
RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd,+atomics,+bulk-memory" \
  cargo +nightly clippy -Z build-std=panic_abort,std --target wasm32-unknown-unknown --lib \
  --features wasm-threads --target-dir target/wasm-threads -- -D warnings
step "wasm API tests (wasm-bindgen-test-runner, headless Chromium via chromium-driver)"
# The runner gives the whole page 20 s by default; the WebGPU model parity tests take ~30 s on
# SwiftShader. --nocapture prints their per-model diffs and dispatch counts.
WASM_BINDGEN_TEST_TIMEOUT=600 \
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test --target wasm32-unknown-unknown --test wasm -- --nocapture
step "the wasm GEMM test again on the relaxed-SIMD build (the npm package's second .wasm)"
RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" \
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test --target wasm32-unknown-unknown --target-dir target/wasm-relaxed --test wasm -- simd128
step "cargo test"
# The WebGPU tests (tests/webgpu.rs) skip on a machine without a GPU adapter; here that is a
# failure: setup.sh installs lavapipe, so a missing adapter means a broken setup.
export FUSELAB_REQUIRE_GPU=1
cargo test
step "ONNX conformance summary (per case: target/onnx-node-results.tsv)"
cargo test -q --test onnx_conformance -- --nocapture 2>&1 | grep -E '^conformance|per-case'
step "release CLI for the Python client tests"
cargo build --release --bin fuselab
step "pytest (onnx.checker + onnxruntime as the client)"
# -rxs lists every skip and xfail with its reason.
FUSELAB_BIN="$PWD/target/release/fuselab" .venv/bin/python -m pytest -q -rxs tests/python
step "npm package and demo site (wasm-bindgen --target web, wasm-opt, esbuild -> www/dist)"
npm run build
step "wasm size budget (scripts/check_wasm_size.sh)"
bash scripts/check_wasm_size.sh
step "page end to end (playwright-core + Debian chromium)"
FUSELAB_BIN="$PWD/target/release/fuselab" npm run test:e2e
step "onnxruntime-web (npm) runs optimize --target ort-webgpu models on its WebGPU and wasm EPs"
FUSELAB_BIN="$PWD/target/release/fuselab" npm run test:ortweb
step "npm package: pack contents, TypeScript consumer, README example (Vite and plain module)"
npm run test:pack
