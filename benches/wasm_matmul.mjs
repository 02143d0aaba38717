// The wasm build's MatMul in node's V8 (the engine Chromium runs it on): one MatMul of a
// [M, K] input by a constant [K, N] weight (written by the project's Python venv with `onnx`),
// through `Model.session`, median of 30 runs after 5, in GFLOP/s. Several --pkg folders
// (wasm-bindgen outputs: fuselab.js + fuselab_bg.wasm) take turns in one process. For the
// relaxed-SIMD build, copy pkg/fuselab_bg.relaxed.wasm into a folder as fuselab_bg.wasm and run
// node with --experimental-wasm-relaxed-simd (node 20).
//
//   node [--experimental-wasm-relaxed-simd] benches/wasm_matmul.mjs --mkn 128x768x3072 \
//     [--mkn 1x768x3072]... [--pkg pkg]...
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);
const all = (flag) => args.flatMap((a, i) => (a === flag ? [args[i + 1]] : []));
const shapes = (all("--mkn").length ? all("--mkn") : ["128x768x3072", "1x768x3072"]).map((s) => s.split("x").map(Number));
const pkgs = all("--pkg").length ? all("--pkg") : ["pkg"];
const dir = mkdtempSync(join(tmpdir(), "fuselab-wasm-matmul-"));
const py = process.env.PYTHON ?? ".venv/bin/python";
const script = `
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
m, k, n, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32), "W")
g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "mm",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [w])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), out)
`;
const runtimes = [];
for (const p of pkgs) {
  const js = await import(`${pathToFileURL(resolve(p, "fuselab.js"))}?${runtimes.length}`);
  await js.default({ module_or_path: readFileSync(resolve(p, "fuselab_bg.wasm")) });
  runtimes.push({ p, js });
}
for (const [m, k, n] of shapes) {
  const file = join(dir, `mm_${m}x${k}x${n}.onnx`);
  execFileSync(py, ["-c", script, String(m), String(k), String(n), file]);
  for (const { p, js } of runtimes) {
    const s = js.Model.load(readFileSync(file)).session({});
    const x = { x: { dtype: "float32", shape: [m, k], data: Float32Array.from({ length: m * k }, (_, i) => (i % 7) / 7) } };
    for (let i = 0; i < 5; i++) s.run(x);
    const t = [];
    for (let i = 0; i < 30; i++) {
      const t0 = performance.now();
      s.run(x);
      t.push(performance.now() - t0);
    }
    t.sort((a, b) => a - b);
    const ms = t[15];
    console.log(`${p}\t${m}x${k}x${n}\t${ms.toFixed(3)} ms\t${((2 * m * k * n) / ms / 1e6).toFixed(1)} GFLOP/s`);
  }
}
