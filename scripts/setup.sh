#!/usr/bin/env bash
# Installs what fuselab's build and tests need and is missing: the wasm32 rustup target (and,
# for the wasm threads build, nightly's rust-src and wasm32 target),
# wasm-bindgen-cli at the exact wasm-bindgen version in Cargo.lock (when the crate uses it),
# Debian's chromium + chromium-driver (and node/npm), the npm dev dependencies (npm ci), a
# Python venv (.venv) with the pinned onnx/onnxruntime/numpy/pytest, the regenerated ONNX
# node-test corpus, and the real-model test set (scripts/fetch_models.py). Idempotent: each step
# is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; this machine kind ships Rust via rustup" >&2
  exit 1
fi

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  log "adding rustup target wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi

# The threads build (scripts/build_wasm.sh) rebuilds the standard library with atomics, which
# needs a nightly toolchain with rust-src and the wasm32 target. This machine kind ships a
# nightly beside stable; rustup adds the two components.
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "setup: no nightly toolchain (rustup toolchain list): the wasm threads build needs one" >&2
  exit 1
fi
if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -qx rust-src; then
  log "adding rust-src to the nightly toolchain (wasm threads build)"
  rustup component add rust-src --toolchain nightly
fi
if ! rustup target list --toolchain nightly --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  log "adding wasm32-unknown-unknown to the nightly toolchain"
  rustup target add wasm32-unknown-unknown --toolchain nightly
fi

# wasm-bindgen-cli must equal the wasm-bindgen crate version in Cargo.lock exactly.
wb=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock 2>/dev/null || true)
if [ -n "$wb" ]; then
  have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
  if [ "$have" != "$wb" ]; then
    log "installing wasm-bindgen-cli $wb (a few minutes)"
    # No --locked: the CLI's own lockfile pins a crate version this registry does not serve.
    cargo install wasm-bindgen-cli --version "$wb"
  fi
fi

# Debian packages: headless Chromium + its WebDriver for the wasm and page tests, node/npm for
# the page build, lavapipe for the WebGPU backend (only what is missing; apt needs root, which CI is).
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
# Mesa's lavapipe: a CPU Vulkan driver, so the WebGPU backend's tests run without a GPU.
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]} (apt)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

# Vite 8 (the consumer-app test) needs Node.js >= 20.19; this machine kind ships 20.20.
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'; then
  echo "setup: Node.js $(node --version) is too old: the page build and tests need >= 20.19" >&2
  exit 1
fi

# npm dev dependencies, exactly as package-lock.json pins them (reinstalled when it changes).
lock=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.fuselab-lock 2>/dev/null || true)" != "$lock" ]; then
  log "npm ci (package-lock.json)"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock" > node_modules/.fuselab-lock
fi

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  log "installing python3-venv"
  apt-get update -qq && apt-get install -y -qq python3-venv
fi
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import onnx, onnxruntime, numpy, pytest, sympy, onnxscript' 2>/dev/null; then
  log "creating .venv with scripts/requirements.txt"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r scripts/requirements.txt
fi

if [ ! -f tests/data/node/MANIFEST.json ]; then
  log "regenerating the ONNX node-test corpus"
  .venv/bin/python scripts/gen_node_tests.py tests/data/node
fi

# Real models for tests/python/test_models.py: the onnx wheel's nine light CNNs with seeded
# weights, and every .onnx of the pinned rapidocr, rapidocr-onnxruntime and silero-vad wheels
# (pip download from PyPI). ~1.4 GB under tests/data/models/ (gitignored); CI should cache that
# folder, keyed on scripts/fetch_models.py and scripts/requirements.txt. The script checks each
# file against its MANIFEST.json entry and only redoes what is missing or stale.
log "real models (scripts/fetch_models.py; the first time ~3 min and a 53 MB download)"
.venv/bin/python scripts/fetch_models.py

# The real-size models' weights (tests/models/real/*.onnx.data, ~2.2 GB, gitignored): seeded
# random values that scripts/gen_weights.py writes in a few seconds; kept when already complete.
log "real-size model weights (scripts/gen_weights.py)"
.venv/bin/python scripts/gen_weights.py
