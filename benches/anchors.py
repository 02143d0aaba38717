#!/usr/bin/env python3
"""Issue 15's per-model tables: writes docs/anchors.md. For every model the issue names
(tests/python/anchors.py's SUBJECTS), one table of optimizers and one of speed:

  optimizers  fuselab (no target, and --target ort-webgpu) and each anchor on the same file: node
              count, fused ops, wall time (fuselab: the report's optimize_ms, the rules alone, and
              the whole CLI call with load and save; the anchors: the call in this process)
  speed       fuselab's reference backend (`fuselab bench --clock cpu`, thread CPU time) and its
              WebGPU backend (`--backend webgpu`, wall time, dispatches per run), original vs fused
              graph interleaved in one run; onnxruntime-web 1.31.1 in headless Chromium
              (benches/ort_web.mjs) on its wasm EP and its WebGPU EP, original vs
              `--target ort-webgpu` graph, with the nodes it placed on the CPU and its copies

Inputs: batch 2 × seq 8 for text, batch 2 for ViT/Whisper, batch 1 for the CNNs (224×224), seeded.

Run from the repository root after `cargo build --release --bin fuselab` and `npm ci`:

    .venv/bin/python benches/anchors.py [--runs N] [--only SUBSTRING] [--no-browser] [--out docs/anchors.md]

WebGPU needs a Vulkan adapter (lavapipe here: export XDG_RUNTIME_DIR first); where a graph does not
run there the table says why.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
import anchors  # noqa: E402
from anchors import FUSED_OPS, SUBJECTS, histogram, timed  # noqa: E402

ANCHOR_NAMES = {
    "ort-o0": "onnxruntime transformers optimizer, opt_level 0",
    "ort-o1": "onnxruntime transformers optimizer, opt_level 1",
    "onnxscript": "onnxscript optimize_for_ort",
    "ort-session": "onnxruntime session optimizer (ORT_ENABLE_EXTENDED)",
}


def sizes(subject) -> dict[str, int]:
    """The symbolic dims every run of `subject` takes (fuselab's and onnxruntime-web's); a dim
    the model does not have (seq on ViT and Whisper) is ignored."""
    return {"batch": 1} if subject.model_type is None else {"batch": subject.batch, "seq": 8}


def dims(subject) -> list[str]:
    return [a for k, v in sizes(subject).items() for a in ("--dim", f"{k}={v}")]


def fused(hist) -> str:
    return ", ".join(f"{op} {hist[op]}" for op in sorted(FUSED_OPS) if hist[op]) or "—"


def fuselab(cli: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True, cwd=REPO, timeout=1800)


def optimize(cli: str, subject, tmp: Path, target: str | None) -> dict:
    import onnx

    out = tmp / f"{subject.name}.{target or 'any'}.onnx"
    report = out.with_suffix(".json")
    extra = ["--target", target] if target else []
    t = time.perf_counter()
    r = fuselab(cli, "optimize", subject.path, "-o", out, "--no-parity", "--report", report, *subject.args, *extra)
    cli_ms = (time.perf_counter() - t) * 1e3
    if r.returncode != 0:
        raise SystemExit(f"fuselab optimize {subject.path} failed: {r.stderr}")
    rep = json.loads(report.read_text())
    return {"nodes": rep["nodes_after"], "hist": histogram(onnx.load(str(out))), "rules_ms": rep["optimize_ms"],
            "cli_ms": cli_ms}


def bench(cli: str, subject, backend: str, runs: int) -> dict:
    clock = ["--clock", "cpu"] if backend == "reference" else []
    r = fuselab(cli, "bench", subject.path, "--backend", backend, "--runs", runs, "--warmup", max(1, runs // 10),
                "--json", *clock, *dims(subject))
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout)


def ort_web(subject, runs: int) -> dict | None:
    """onnxruntime-web's row for `subject` (benches/ort_web.mjs, one browser per model, so one
    model that fails or hangs costs only its own row); None when the bench itself failed."""
    d = ",".join(f"{k}={v}" for k, v in sizes(subject).items())
    cmd = ["node", "benches/ort_web.mjs", "--json", "--runs", str(runs),
           "--model", f"{subject.path.relative_to(REPO)}:{d}"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900)
    except subprocess.TimeoutExpired:
        print(f"onnxruntime-web bench of {subject.name}: over 900 s", file=sys.stderr)
        return None
    if r.returncode != 0:
        print(f"onnxruntime-web bench of {subject.name} failed:\n{r.stderr[-3000:]}", file=sys.stderr)
        return None
    rows = json.loads(r.stdout)
    return rows[0] if rows else None


def ms(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def section(subject, base_nodes: int, rows: list, ref: dict, gpu: dict, web: dict | None) -> list[str]:
    out = [f"## {subject.name}", "",
           f"`{subject.path.relative_to(REPO)}`, {base_nodes} nodes.", "",
           "| optimizer | nodes | fused ops | time |", "|---|---:|---|---|"]
    for name, r in rows:
        t = (f"{ms(r['rules_ms'])} ms rules / {ms(r['cli_ms'])} ms CLI" if "rules_ms" in r else f"{ms(r['ms'])} ms")
        out.append(f"| {name} | {r['nodes']} | {fused(r['hist'])} | {t} |")
    out += ["", "| run | original ms | fused ms | ratio | also |", "|---|---:|---:|---:|---|"]
    for name, b in [("fuselab reference (CPU time)", ref), ("fuselab WebGPU (lavapipe)", gpu)]:
        if "error" in b:
            out.append(f"| {name} | — | — | — | does not run: {b['error'].replace('|', '/')} |")
            continue
        also = f"max diff {b['max_abs_diff']:.1e}"
        if "dispatches" in b:
            also += f"; dispatches {b['dispatches']['original']} → {b['dispatches']['optimized']}"
        out.append(f"| {name} | {ms(b['original']['median_ms'])} | {ms(b['optimized']['median_ms'])} | "
                   f"{b['speedup']:.2f}x | {also} |")
    if web:
        diff = web.get("max_diff", {})
        for ep, key in [("wasm", "wasm_ms"), ("webgpu", "webgpu_ms")]:
            label = "onnxruntime-web wasm EP" if ep == "wasm" else "onnxruntime-web WebGPU EP (SwiftShader)"
            if key not in web:
                err = web.get(f"{ep}_error", "no result").replace("|", "/")
                out.append(f"| {label} | — | — | — | does not run: {err[-160:]} |")
                continue
            a, b = web[key]
            d = diff[ep]
            also = f"max diff {d:.1e}" if d is not None else "outputs differ in shape"
            if ep == "webgpu":
                also += (f"; CPU nodes {web['cpu_nodes'][0]} → {web['cpu_nodes'][1]}, "
                         f"copies {web['copies'][0]} → {web['copies'][1]}")
            out.append(f"| {label}, `--target ort-webgpu` graph ({web['nodes'][1]} nodes) | {ms(a)} | {ms(b)} | "
                       f"{a / b:.2f}x | {also} |")
    out.append("")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fuselab", default=os.environ.get("FUSELAB_BIN", str(REPO / "target" / "release" / "fuselab")))
    ap.add_argument("--runs", type=int, default=50, help="timed runs per graph (default 50)")
    ap.add_argument("--only", default="", help="only models whose name contains this")
    ap.add_argument("--no-browser", action="store_true", help="skip onnxruntime-web")
    ap.add_argument("--out", default=str(REPO / "docs" / "anchors.md"))
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    import onnx
    import onnxruntime
    import onnxscript

    subjects = [s for s in SUBJECTS if args.only in s.name]
    missing = [str(s.path) for s in subjects if not s.path.exists()]
    if missing:
        raise SystemExit(f"missing models (run scripts/setup.sh): {', '.join(missing)}")
    body = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in subjects:
            print(f"{s.name} ...", file=sys.stderr, flush=True)
            rows = [("**fuselab**", optimize(args.fuselab, s, Path(tmp), None)),
                    ("fuselab `--target ort-webgpu`", optimize(args.fuselab, s, Path(tmp), "ort-webgpu"))]
            for a in s.anchors:
                m, t = timed(s.run_anchor, a)
                rows.append((ANCHOR_NAMES[a], {"nodes": len(m.graph.node), "hist": histogram(m), "ms": t}))
            base = len(onnx.load(str(s.path)).graph.node)
            ref = bench(args.fuselab, s, "reference", args.runs)
            gpu = bench(args.fuselab, s, "webgpu", max(5, args.runs // 5))
            web = None if args.no_browser else ort_web(s, max(5, args.runs // 2))
            body += section(s, base, rows, ref, gpu, web)
    head = [
        "# fuselab against the anchors, model by model (issue 15)", "",
        "Written by `.venv/bin/python benches/anchors.py` "
        f"(--runs {args.runs}) on {datetime.date.today().isoformat()}: {platform.machine()}, "
        f"{os.cpu_count()} CPUs, no GPU (WebGPU: lavapipe natively, SwiftShader in Chromium); onnxruntime "
        f"{onnxruntime.__version__}, onnxscript {onnxscript.__version__}, onnx {onnx.__version__}. "
        "One run, so ratios are the figure to read: both graphs run interleaved in it. "
        "`tests/python/test_anchors.py` asserts the optimizer comparison on every test run.", "",
        "Inputs: text batch 2 × seq 8 (torch's opset-23 Llama and Phi batch 1, the only batch "
        "onnxruntime runs their standard RotaryEmbedding at), ViT and Whisper batch 2, CNNs batch 1 "
        "(224×224); seeded. "
        "\"fused ops\" counts the fused op types in each output graph (an op the export already had "
        "counts too). fuselab's time is its rules alone and the whole CLI call (load, rules, save); "
        "an anchor's is its Python call. onnxruntime-web runs the original and fuselab's "
        "`--target ort-webgpu` graph; \"CPU nodes\" are the nodes its WebGPU EP left on the CPU.", "",
        "Every fuselab graph here runs in onnxruntime within the model's bound of the original "
        "(tests/python/test_encoder_fusions.py, test_decoder_fusions.py, test_conv_fusions.py).", "",
    ]
    Path(args.out).write_text("\n".join(head + body))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
