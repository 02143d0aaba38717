#!/usr/bin/env python3
"""Writes docs/models.md: every real model of tests/python/test_models.py with its size, op
count and op histogram, what fuselab's reference backend lacks for it, what `fuselab optimize`
fuses, the parity results, and the time of one run in fuselab and in onnxruntime.

Run from the repository root with the project venv, after scripts/fetch_models.py and a release
build (`cargo build --release --bin fuselab`):

    .venv/bin/python scripts/models_report.py [--fuselab target/release/fuselab] [--runs 10]
        [--only SUBSTRING] [--out docs/models.md] [--json FILE]

Per model, on the inputs real_models.SPECS gives it (the pytest table's inputs):
  run       `fuselab run --input ...` vs onnxruntime (CPU): max |diff| over all outputs, and
            whether it is within the model's tolerance; or the CLI's error
  fused     `fuselab optimize --no-parity`: nodes before -> after, fused ops; "ort ok" when
            onnxruntime on the optimized model gives the original's outputs (within tolerance)
  parity    `fuselab optimize --input ...` (its own parity check, on the same inputs): ok and
            max |diff|, or the error
  time      median ms of one run: fuselab (`fuselab bench --runs N --warmup 1`, reference
            backend, original and optimized graph, on the same inputs via --input) and
            onnxruntime 1 thread (intra- and inter-op), default graph optimizations, on the
            SPECS inputs, after one warm-up run
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
import real_models  # noqa: E402
from real_models import SPECS, make_feeds, model_id, real_model_files, reported_gaps  # noqa: E402

HISTOGRAM_HEAD = 8
CLI_TIMEOUT_S = 900


def sh(cmd: list, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


def file_stem(name: str) -> str:
    """How `fuselab run` names DIR/<output>.npy."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name)


def op_histogram(model: onnx.ModelProto) -> tuple[collections.Counter, int]:
    """Op types of the main graph (`domain.Op` outside ai.onnx), and the number of nodes inside
    subgraphs (If/Loop/Scan bodies)."""
    main = collections.Counter(
        n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        for n in model.graph.node
    )

    def inner(g: onnx.GraphProto) -> int:
        count = 0
        for n in g.node:
            for a in n.attribute:
                subs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
                count += sum(len(s.node) + inner(s) for s in subs)
        return count

    return main, inner(model.graph)


def error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1].removeprefix("fuselab: error: ") if lines else "(no message)"


def max_diff(got: dict[str, np.ndarray], want: dict[str, np.ndarray], atol: float, rtol: float):
    """(max |diff| over every output, whether all are within atol + rtol * |want|)."""
    worst, ok = 0.0, True
    for name, w in want.items():
        g = got[name]
        if g.shape != w.shape or g.dtype != w.dtype:
            return float("inf"), False
        if not np.issubdtype(w.dtype, np.floating):
            same = np.array_equal(g, w)
            worst, ok = max(worst, 0.0 if same else float("inf")), ok and same
            continue
        d = np.abs(g.astype(np.float64) - w.astype(np.float64))
        d[np.isnan(g) & np.isnan(w)] = 0.0
        if d.size:
            worst = max(worst, float(np.nanmax(d)) if not np.isnan(d).all() else float("inf"))
        ok = ok and bool((d <= atol + rtol * np.abs(w.astype(np.float64))).all())
    return worst, ok


def ort_session(path: Path, threads: int | None, level: str = "all") -> ort.InferenceSession:
    so = ort.SessionOptions()
    if level == "basic":
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if threads:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def ort_outputs(path: Path, feeds: dict, level: str = "all") -> dict[str, np.ndarray]:
    sess = ort_session(path, threads=None, level=level)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def ort_time_ms(path: Path, feeds: dict, runs: int) -> float:
    sess = ort_session(path, threads=1)
    sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def report_one(fuselab: Path, path: Path, runs: int, work: Path) -> dict:
    mid = model_id(path)
    spec = SPECS[mid]
    model = onnx.load(str(path))
    hist, in_subgraphs = op_histogram(model)
    # The spec's dims by name and its full input shapes axis by axis, as test_models passes them.
    pairs = list(spec.dims.items())
    pairs += [(f"{n}[{i}]", v) for n, shape in spec.shapes.items() for i, v in enumerate(shape)]
    dims = [a for k, v in pairs for a in ("--dim", f"{k}={v}")]
    row: dict = {
        "model": mid,
        "bytes": path.stat().st_size,
        "nodes": len(model.graph.node),
        "subgraph_nodes": in_subgraphs,
        "histogram": hist.most_common(),
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
    }
    feeds = make_feeds(model, spec)
    want = ort_outputs(path, feeds, spec.ort_level)
    row["ort_ms"] = ort_time_ms(path, feeds, runs)

    # fuselab run vs onnxruntime
    given: list = []
    for name, arr in feeds.items():
        f = work / f"in_{file_stem(name)}.npy"
        np.save(f, arr)
        given += ["--input", f"{name}={f}"]
    r = sh([fuselab, "run", path, *dims, "--out", work / "out", *given])
    row["missing_ops"] = sorted(reported_gaps(r.returncode, r.stderr) or [])
    if r.returncode == 0:
        got = {n: np.load(work / "out" / f"{file_stem(n)}.npy") for n in want}
        d, ok = max_diff(got, want, spec.atol, spec.rtol)
        row["run"] = {"ok": ok, "max_abs_diff": d}
    else:
        row["run"] = {"ok": False, "error": error_line(r.stderr)}

    # optimize --no-parity: what fuses; onnxruntime on the result
    out, rep = work / "opt.onnx", work / "report.json"
    r = sh([fuselab, "optimize", path, "-o", out, "--report", rep, "--no-parity", *dims])
    if r.returncode == 0:
        report = json.loads(rep.read_text())
        fused = {"nodes_after": report["nodes_after"], "fusions": report["fusions"]}
        opt = onnx.load(str(out), load_external_data=False)
        domains = {n.domain for n in opt.graph.node} - {"", "ai.onnx", "com.microsoft"}
        if not domains:
            got = ort_outputs(out, feeds)
            fused["ort_max_abs_diff"], fused["ort_ok"] = max_diff(got, want, spec.atol, spec.rtol)
            fused["ort_ms"] = ort_time_ms(out, feeds, runs)
        row["optimize"] = fused
    else:
        row["optimize"] = {"error": error_line(r.stderr)}

    # optimize with parity
    tol = ["--tolerance", str(spec.atol)] if spec.atol != real_models.DEFAULT_ATOL else []
    r = sh([fuselab, "optimize", path, "-o", out, "--report", rep, *dims, *given, *tol])
    if r.returncode == 0:
        p = json.loads(rep.read_text())["parity"]
        row["parity"] = {"ok": p["ok"], "max_abs_diff": p["max_abs_diff"]}
    else:
        row["parity"] = {"ok": False, "error": error_line(r.stderr)}

    # fuselab timing (only where it runs)
    if row["run"].get("error") is None:
        r = sh([fuselab, "bench", path, "--runs", runs, "--warmup", 1, "--json", *dims, *given])
        if r.returncode == 0:
            b = json.loads(r.stdout)
            row["fuselab_ms"] = {"original": b["original"]["median_ms"],
                                 "optimized": b["optimized"]["median_ms"]}
    return row


# ---------------------------------------------------------------------------------------------
# markdown


def fmt_ms(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"


def fmt_diff(v: float) -> str:
    return "0" if v == 0 else f"{v:.2g}"


def status(row: dict) -> str:
    if row["missing_ops"]:
        return "lacks " + ", ".join(row["missing_ops"])
    run = row["run"]
    if "error" in run:
        return "error: " + run["error"].replace("|", "\\|")
    return ("ok" if run["ok"] else "**differs**") + f" ({fmt_diff(run['max_abs_diff'])})"


def fused_cell(row: dict) -> str:
    o = row["optimize"]
    if "error" in o:
        return "error"
    parts = [f"{row['nodes']} → {o['nodes_after']}"]
    if o["fusions"]:
        parts.append(", ".join(f"{k} {v}" for k, v in sorted(o["fusions"].items())))
    if "ort_ok" in o:
        bad = f"**differs** ({fmt_diff(o['ort_max_abs_diff'])})"
        parts.append("ORT " + ("ok" if o["ort_ok"] else bad))
    return "; ".join(parts)


def parity_cell(row: dict) -> str:
    p = row["parity"]
    if "error" in p:
        return "n/a (lacks ops)" if row["missing_ops"] else "error"
    return ("ok" if p["ok"] else "**fails**") + f" ({fmt_diff(p['max_abs_diff'])})"


def to_markdown(rows: list[dict], fuselab: Path, runs: int) -> str:
    version = sh([fuselab, "--version"]).stdout.strip()
    # The commit the binary's checkout is at (where it was built), else this one's.
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=fuselab.parent).stdout.strip() or "unknown"
    by_source = collections.defaultdict(list)
    for r in rows:
        by_source[str(Path(r["model"]).parent)].append(r)
    runnable = sum(1 for r in rows if r["run"].get("ok"))
    lines = [
        "# Real models",
        "",
        "Generated by `scripts/models_report.py` (do not edit by hand); the same models and inputs",
        "as `tests/python/test_models.py`. Sources: `tests/data/models/` from",
        "`scripts/fetch_models.py` (the onnx wheel's light CNNs with seeded weights; the rapidocr,",
        "rapidocr-onnxruntime and silero-vad wheels' models), `tests/models/zoo/` from",
        "`scripts/export_models.py` (our small random-weight exports).",
        "",
        f"Generated {datetime.date.today().isoformat()} with {version} (built at commit {commit}), "
        f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}, "
        f"Python {platform.python_version()}, on {platform.machine()} "
        f"({os.cpu_count()} cores, shared).",
        "",
        f"fuselab runs {runnable} of {len(rows)} models today.",
        "",
        "Columns: **nodes** in the main graph (+ inside If/Loop bodies); **fuselab run** = what",
        "the reference backend lacks (main graph; the CLI's list), or `ok (max |diff|)` against",
        "onnxruntime on the same inputs within the model's tolerance; **optimize** = `fuselab",
        "optimize --no-parity`: nodes before → after, fused ops, and whether onnxruntime on the",
        "optimized model matches the original; **parity** = `fuselab optimize` with its own",
        "check (max |diff| original vs optimized on the reference backend); **ms** = median of one",
        f"run over {runs} runs: fuselab reference backend (original / optimized graph) and",
        "onnxruntime CPU with 1 thread (original / optimized). The machine is shared: read ratios.",
        "",
    ]
    for source, group in by_source.items():
        lines += [f"## `{source}`", "",
                  "| model | MB | nodes | fuselab run | optimize | parity | fuselab ms | ORT ms |",
                  "|---|---:|---:|---|---|---|---:|---:|"]
        for r in group:
            fl = r.get("fuselab_ms") or {}
            ort_opt = r["optimize"].get("ort_ms")
            nodes = f"{r['nodes']:,}"
            if r["subgraph_nodes"]:
                nodes += f" (+{r['subgraph_nodes']:,})"
            lines.append(
                f"| `{Path(r['model']).name}` | {r['bytes'] / 1e6:.1f} | {nodes} | {status(r)} | "
                f"{fused_cell(r)} | {parity_cell(r)} | "
                f"{fmt_ms(fl.get('original'))} / {fmt_ms(fl.get('optimized'))} | "
                f"{fmt_ms(r['ort_ms'])} / {fmt_ms(ort_opt)} |"
            )
        lines.append("")
    lines += ["## Op histograms (main graph, most frequent first)", ""]
    for r in rows:
        head = ", ".join(f"{op} {n}" for op, n in r["histogram"][:HISTOGRAM_HEAD])
        more = len(r["histogram"]) - HISTOGRAM_HEAD
        opsets = ", ".join(f"{d} {v}" for d, v in sorted(r["opsets"].items()))
        tail = f", … {more} more types" if more > 0 else ""
        lines.append(f"- `{r['model']}` ({opsets}): {head}{tail}")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fuselab", type=Path, default=REPO / "target" / "release" / "fuselab")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per model and runtime")
    ap.add_argument("--only", default="", help="only models whose id contains this")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "models.md")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args()
    models = [p for p in real_model_files() if args.only in model_id(p)]
    if not models:
        raise SystemExit("models_report: no models; run scripts/fetch_models.py first")
    rows = []
    for p in models:
        t = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            rows.append(report_one(args.fuselab.resolve(), p, args.runs, Path(d)))
        print(f"models_report: {model_id(p)}: {status(rows[-1])} ({time.perf_counter() - t:.1f} s)",
              file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    args.out.write_text(to_markdown(rows, args.fuselab.resolve(), args.runs))
    print(f"models_report: wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
