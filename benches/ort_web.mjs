// onnxruntime-web times for original vs fuselab-optimized (`optimize --target ort-webgpu`) models,
// on its WebGPU EP and its wasm EP, in headless Chromium (here: SwiftShader for WebGPU, so the
// WebGPU times are a functional figure, not a GPU's). Prints a markdown table for
// docs/benchmarks.md: nodes, nodes placed on the CPU, CPU↔GPU copies, median ms, and the largest
// output difference from the original on the wasm EP.
//
//   node benches/ort_web.mjs [--runs N] [--seq S]      (needs target/release/fuselab, npm ci)
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { MODELS, maxDiff, openOrtWeb, prepare } from "../tests/js/ort_web.mjs";

const { values } = parseArgs({ options: { runs: { type: "string", default: "30" }, seq: { type: "string", default: "8" } } });
const runs = Number(values.runs);
const seq = Number(values.seq);
if (!(runs >= 1) || !(seq >= 1)) throw new Error("--runs and --seq take positive numbers");

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const cli = process.env.FUSELAB_BIN ?? join(root, "target", "release", "fuselab");
const dir = mkdtempSync(join(tmpdir(), "fuselab-ortweb-bench-"));
const models = [...MODELS, { file: "tests/models/zoo/whisper_encoder_tiny.onnx", dims: { batch: 2 } }];
const CPU = "CPUExecutionProvider";
const cpuCount = (r) => r.placement.filter((p) => p.ep === CPU).length;
const copies = (r) => r.placement.filter((p) => /^Memcpy/.test(p.op)).length;
const f = (x) => x.toFixed(2);

const ort = await openOrtWeb(dir);
console.log(`onnxruntime-web 1.31.1, headless Chromium, batch 2, seq ${seq} where the model has one, median of ${runs} runs\n`);
console.log("| model | nodes | CPU nodes (WebGPU EP) | copies | wasm EP ms | wasm ratio | WebGPU EP ms | WebGPU ratio | max diff wasm / WebGPU |");
console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
try {
  for (const { file, dims } of models) {
    const d = "seq" in dims ? { ...dims, seq } : dims;
    const { original, optimized, report } = prepare(cli, file, dir, "ort-webgpu");
    const ref = await ort.run(original, "wasm", d, runs);
    const optWasm = await ort.run(optimized, "wasm", d, runs);
    const origGpu = await ort.run(original, "webgpu", d, runs);
    const optGpu = await ort.run(optimized, "webgpu", d, runs);
    console.log(`| ${basename(file, ".onnx")} | ${report.nodes_before} → ${report.nodes_after} | ` +
      `${cpuCount(origGpu)} → ${cpuCount(optGpu)} | ${copies(origGpu)} → ${copies(optGpu)} | ` +
      `${f(ref.ms)} → ${f(optWasm.ms)} | ${(ref.ms / optWasm.ms).toFixed(2)}x | ` +
      `${f(origGpu.ms)} → ${f(optGpu.ms)} | ${(origGpu.ms / optGpu.ms).toFixed(2)}x | ` +
      `${maxDiff(ref.outputs, optWasm.outputs).toExponential(1)} / ${maxDiff(ref.outputs, optGpu.outputs).toExponential(1)} |`);
  }
} finally {
  await ort.close();
}
