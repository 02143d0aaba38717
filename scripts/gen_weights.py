#!/usr/bin/env python3
"""Writes the external weight files of the real-size models (tests/models/real/*.onnx) from a seed.

The committed .onnx files hold the graphs; every weight is external data in `NAME.onnx.data`
(git-ignored, hundreds of MB). Each external tensor says how it is filled in its
`metadata_props` key `fuselab.init`:

    normal STD   values ~ N(0, STD²) (float32)
    ones         1.0 (norm weights)
    zeros        0.0 (biases)

Values are a function of (seed, tensor name) only, so the files are the same on every machine;
a data file that already has its full size is kept (delete it to regenerate). CI runs this before the tests; a developer runs it once after cloning:

    .venv/bin/python scripts/gen_weights.py                 # every tests/models/real/*.onnx
    .venv/bin/python scripts/gen_weights.py FILE.onnx ...   # these models only
"""
from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "tests" / "models" / "real"
SEED = 16
KEY = "fuselab.init"
CHUNK = 1 << 22  # values drawn per step (bounded memory for large tensors)


def external(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def spec(t: onnx.TensorProto) -> str:
    meta = {e.key: e.value for e in t.metadata_props}
    if KEY not in meta:
        raise SystemExit(f"{t.name}: external tensor without a '{KEY}' entry in metadata_props")
    if t.data_type != onnx.TensorProto.FLOAT:
        raise SystemExit(f"{t.name}: only float32 tensors are generated, not type {t.data_type}")
    return meta[KEY]


def fill(out, t: onnx.TensorProto) -> None:
    """Writes tensor `t`'s values at its offset, CHUNK values at a time."""
    how = spec(t).split()
    n = int(np.prod(t.dims, dtype=np.int64))
    ext = external(t)
    offset, length = int(ext.get("offset", 0)), int(ext["length"])
    if length != n * 4:
        raise SystemExit(f"{t.name}: external length {length} != {n} float32 values")
    rng = np.random.default_rng([SEED, zlib.crc32(t.name.encode())])
    out.seek(offset)
    for start in range(0, n, CHUNK):
        k = min(CHUNK, n - start)
        if how[0] == "normal":
            v = rng.standard_normal(k, dtype=np.float32) * np.float32(float(how[1]))
        elif how[0] == "ones":
            v = np.ones(k, np.float32)
        elif how[0] == "zeros":
            v = np.zeros(k, np.float32)
        else:
            raise SystemExit(f"{t.name}: unknown init {spec(t)!r}")
        out.write(v.astype("<f4").tobytes())


def generate(model_path: Path) -> Path | None:
    m = onnx.load(str(model_path), load_external_data=False)
    tensors = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if not tensors:
        return None
    locations = {external(t)["location"] for t in tensors}
    if len(locations) != 1:
        raise SystemExit(f"{model_path}: expected one data file, got {sorted(locations)}")
    data = model_path.parent / locations.pop()
    size = max(int(external(t).get("offset", 0)) + int(external(t)["length"]) for t in tensors)
    if data.is_file() and data.stat().st_size == size:
        return data
    start = time.perf_counter()
    tmp = data.with_suffix(data.suffix + ".part")
    with open(tmp, "wb") as out:
        out.truncate(size)
        for t in tensors:
            fill(out, t)
    tmp.replace(data)
    print(f"gen_weights: {data.relative_to(REPO) if data.is_relative_to(REPO) else data}: "
          f"{len(tensors)} tensors, {size / 2**20:.0f} MiB in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", type=Path)
    args = ap.parse_args()
    models = args.models or sorted(REAL.glob("*.onnx"))
    if not models:
        print(f"gen_weights: no models under {REAL}", file=sys.stderr)
        return 1
    for p in models:
        generate(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
