#!/usr/bin/env python3
"""The whole `fuselab optimize` against onnxruntime's transformers optimizer on a real-size model:
wall time and peak RSS of each, alternated in one run (issue 16, item 3).

Run from the repository root after `cargo build --release --bin fuselab` and `bash setup.sh`
(which writes tests/models/real/*.data):

    .venv/bin/python benches/real_size_optimizer.py [--model gpt2_small] [--rounds 3]

fuselab: `fuselab optimize MODEL -o OUT --external-data --dim batch=1 --dim seq=16` (load,
passes, parity at 1x16, save). onnxruntime: `optimize_model(MODEL, model_type="gpt2",
num_heads=12, hidden_size=768, opt_level=0)` then `save_model_to_file(OUT,
use_external_data_format=True)`, in a fresh Python process each time. Each command runs as its
own child process; its wall time is measured around it and its peak RSS read from `os.wait4`.
The order alternates every round. Ratios are taken within a round, because this machine is
shared and absolute times drift between rounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "models" / "real"

ORT_SCRIPT = """
import logging, sys
logging.disable(logging.WARNING)
from onnxruntime.transformers.optimizer import optimize_model
m = optimize_model(sys.argv[1], model_type="gpt2", num_heads=int(sys.argv[3]),
                   hidden_size=int(sys.argv[4]), opt_level=0)
m.save_model_to_file(sys.argv[2], use_external_data_format=True)
"""

# model stem -> (heads, hidden): the transformers optimizer needs them.
SHAPES = {"gpt2_small": (12, 768)}


def measure(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of `cmd` run as a child; raises if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss * 1024  # ru_maxrss is in KiB on Linux


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt2_small", choices=sorted(SHAPES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fuselab", type=Path, default=REPO / "target" / "release" / "fuselab")
    args = ap.parse_args()

    model = REAL / f"{args.model}.onnx"
    data = REAL / f"{args.model}.onnx.data"
    if not data.exists():
        raise SystemExit(f"{data} is missing: run `bash setup.sh` (scripts/gen_weights.py)")
    size = model.stat().st_size + data.stat().st_size
    heads, hidden = SHAPES[args.model]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fl_out, ort_out = Path(tmp) / "fuselab.onnx", Path(tmp) / "ort.onnx"
        fl = [str(args.fuselab), "optimize", str(model), "-o", str(fl_out), "--external-data",
              "--dim", "batch=1", "--dim", "seq=16"]
        ort = [sys.executable, "-c", ORT_SCRIPT, str(model), str(ort_out), str(heads), str(hidden)]
        for r in range(args.rounds):
            order = [("fuselab", fl), ("onnxruntime", ort)]
            if r % 2:
                order.reverse()
            got = {}
            for name, cmd in order:
                got[name] = measure(cmd)
                for p in Path(tmp).iterdir():
                    p.unlink()
            rows.append(got)
            (fw, fm), (ow, om) = got["fuselab"], got["onnxruntime"]
            print(f"round {r + 1}: fuselab {fw:.2f} s, {fm / 1e9:.2f} GB; onnxruntime {ow:.2f} s, "
                  f"{om / 1e9:.2f} GB; wall ratio {fw / ow:.3f}", file=sys.stderr)

    def med(name: str, i: int) -> float:
        return statistics.median(row[name][i] for row in rows)

    ratios = [row["fuselab"][0] / row["onnxruntime"][0] for row in rows]
    print(f"| {args.model} ({size / 1e6:.0f} MB) | fuselab | onnxruntime |")
    print("|---|---:|---:|")
    print(f"| wall, median of {args.rounds} (s) | {med('fuselab', 0):.2f} | {med('onnxruntime', 0):.2f} |")
    print(f"| peak RSS, median (GB) | {med('fuselab', 1) / 1e9:.2f} | {med('onnxruntime', 1) / 1e9:.2f} |")
    print(f"| peak RSS / model bytes | {med('fuselab', 1) / size:.2f}x | {med('onnxruntime', 1) / size:.2f}x |")
    print(f"| wall ratio fuselab/onnxruntime per round | {', '.join(f'{x:.3f}' for x in ratios)} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
