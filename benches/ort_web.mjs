// onnxruntime-web times for original vs fuselab-optimized (`optimize --target ort-webgpu`) models,
// on its WebGPU EP and its wasm EP, in headless Chromium (here: SwiftShader for WebGPU, so the
// WebGPU times are a functional figure, not a GPU's). Prints a markdown table for
// docs/benchmarks.md: nodes, nodes placed on the CPU, CPU↔GPU copies, median ms, and the largest
// output difference from the original on the wasm EP. `--json` prints the same figures as one
// JSON array instead (benches/anchors.py reads it), with the ops each session left on the CPU
// (`cpu_ops`, original and optimized), the original's own difference on the WebGPU EP
// (`max_diff.webgpu_original`: what the EP differs by, fused or not), and `wasm_error` /
// `webgpu_error` for a model an EP cannot run; `--model FILE[:DIM=N,...]` (repeatable) times
// those files instead of the default set, e.g. `--model tests/models/gpt2_tiny.onnx:batch=2,seq=8`.
//
//   node benches/ort_web.mjs [--runs N] [--seq S] [--json] [--model FILE[:DIM=N,...]]...
//   (needs target/release/fuselab, npm ci)
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { MODELS, maxDiff, openOrtWeb, opsOn, prepare } from "../tests/js/ort_web.mjs";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "30" },
    seq: { type: "string", default: "8" },
    json: { type: "boolean", default: false },
    model: { type: "string", multiple: true },
  },
});
const runs = Number(values.runs);
const seq = Number(values.seq);
if (!(runs >= 1) || !(seq >= 1)) throw new Error("--runs and --seq take positive numbers");

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const cli = process.env.FUSELAB_BIN ?? join(root, "target", "release", "fuselab");
const dir = mkdtempSync(join(tmpdir(), "fuselab-ortweb-bench-"));
function modelArg(arg) {
  const [file, sizes = ""] = arg.split(":");
  const dims = {};
  for (const kv of sizes.split(",").filter(Boolean)) {
    const [k, v] = kv.split("=");
    if (!k || !(Number(v) >= 1)) throw new Error(`--model ${arg}: dims are NAME=N, comma-separated`);
    dims[k] = Number(v);
  }
  return { file, dims };
}
const models = values.model
  ? values.model.map(modelArg)
  : [...MODELS, { file: "tests/models/zoo/whisper_encoder_tiny.onnx", dims: { batch: 2 } }];
const CPU = "CPUExecutionProvider";
const cpuCount = (r) => r.placement.filter((p) => p.ep === CPU).length;
const copies = (r) => r.placement.filter((p) => /^Memcpy/.test(p.op)).length;
const f = (x) => x.toFixed(2);

const ort = await openOrtWeb(dir);
const rows = [];
if (!values.json) {
  console.log(`onnxruntime-web 1.31.1, headless Chromium, batch 2, seq ${seq} where the model has one, median of ${runs} runs\n`);
  console.log("| model | nodes | CPU nodes (WebGPU EP) | copies | wasm EP ms | wasm ratio | WebGPU EP ms | WebGPU ratio | max diff wasm / WebGPU |");
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
}
try {
  for (const { file, dims } of models) {
    const d = "seq" in dims && !values.model ? { ...dims, seq } : dims;
    const { original, optimized, report } = prepare(cli, file, dir, "ort-webgpu");
    const row = { model: basename(file, ".onnx"), dims: d, runs, nodes: [report.nodes_before, report.nodes_after] };
    rows.push(row);
    let ref, optWasm;
    try {
      ref = await ort.run(original, "wasm", d, runs);
      optWasm = await ort.run(optimized, "wasm", d, runs);
    } catch (e) {
      // One model onnxruntime-web refuses (an export it cannot run at these dims) is a row, not the end.
      row.wasm_error = String(e.message ?? e).split("\n")[0];
      if (!values.json) console.log(`| ${row.model} | ${row.nodes.join(" → ")} | wasm EP: ${row.wasm_error} |`);
      continue;
    }
    Object.assign(row, { wasm_ms: [ref.ms, optWasm.ms], max_diff: { wasm: maxDiff(ref.outputs, optWasm.outputs) } });
    let origGpu, optGpu;
    try {
      origGpu = await ort.run(original, "webgpu", d, runs);
      optGpu = await ort.run(optimized, "webgpu", d, runs);
    } catch (e) {
      // SwiftShader has no shader-f16: float16 models do not run on this WebGPU EP.
      row.webgpu_error = String(e.message ?? e).split("\n")[0];
      if (!values.json) console.log(`| ${row.model} | ${row.nodes.join(" → ")} | WebGPU EP: ${row.webgpu_error} |`);
      continue;
    }
    Object.assign(row, {
      cpu_nodes: [cpuCount(origGpu), cpuCount(optGpu)],
      copies: [copies(origGpu), copies(optGpu)],
      cpu_ops: [opsOn(origGpu.placement, CPU), opsOn(optGpu.placement, CPU)],
      webgpu_ms: [origGpu.ms, optGpu.ms],
    });
    row.max_diff.webgpu = maxDiff(ref.outputs, optGpu.outputs);
    // The original on the same EP: what the EP itself differs by, fused or not.
    row.max_diff.webgpu_original = maxDiff(ref.outputs, origGpu.outputs);
    if (!values.json) {
      console.log(`| ${row.model} | ${row.nodes.join(" → ")} | ${row.cpu_nodes.join(" → ")} | ${row.copies.join(" → ")} | ` +
        `${f(ref.ms)} → ${f(optWasm.ms)} | ${(ref.ms / optWasm.ms).toFixed(2)}x | ` +
        `${f(origGpu.ms)} → ${f(optGpu.ms)} | ${(origGpu.ms / optGpu.ms).toFixed(2)}x | ` +
        `${row.max_diff.wasm.toExponential(1)} / ${row.max_diff.webgpu.toExponential(1)} |`);
    }
  }
} finally {
  await ort.close();
}
if (values.json) console.log(JSON.stringify(rows, null, 1));
