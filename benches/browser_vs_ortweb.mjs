// fuselab in the browser against onnxruntime-web (issue 16, item 5): in one headless Chromium
// page, fuselab's wasm `Session` on its own optimized graph (in a Worker) and onnxruntime-web
// 1.31's wasm EP on the original model (on the main thread) take turns run by run on identical
// inputs. At --threads 1 fuselab runs its relaxed-SIMD build; at more, its threads build
// (pkg/threads/) with a pool of that many threads (`startThreads`), as onnxruntime-web's
// `numThreads`. Prints a markdown table: median ms of each, their ratio, the largest output
// difference, the time to load and optimize, and fuselab's kernel calls split between threads
// per run.
// One browser per thread count (onnxruntime-web's `numThreads` is fixed at its first session).
//
//   node benches/browser_vs_ortweb.mjs [--runs N] [--threads 1] [--gap MS] [--model FILE[:DIM=N,...]]...
//     [--pkg DIR]   (needs pkg/, or DIR, from scripts/build_wasm.sh, and npm ci)
// Without --model: gpt2_tiny and bert_tiny at 1×8 and 1×128. A model with external data
// (tests/models/real/gpt2_small.onnx) is served with its .data file beside it.
import { existsSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { launch, within } from "../tests/js/browser.mjs";
import { ortDist, serveIsolated } from "../tests/js/ort_web.mjs";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "20" },
    threads: { type: "string", default: "1" },
    model: { type: "string", multiple: true },
    pkg: { type: "string", default: "pkg" },
    gap: { type: "string", default: "0" },
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  console.log("node benches/browser_vs_ortweb.mjs [--runs N] [--threads T] [--gap MS] [--model FILE[:DIM=N,...]]... [--pkg DIR]");
  process.exit(0);
}
const runs = Number(values.runs);
// Idle ms before each timed run: a pool's threads spin a while after their work (onnxruntime's
// and rayon's both), and on a machine with as many cores as threads that spinning slows the
// other runtime's next run. A gap lets them go to sleep first; it is not timed.
const gap = Number(values.gap);
const threads = Number(values.threads);
if (!(runs >= 1) || !(threads >= 1)) throw new Error("--runs and --threads take positive numbers");

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = resolve(root, values.pkg);
if (!existsSync(join(pkg, "fuselab_bg.wasm"))) throw new Error(`${pkg}/fuselab_bg.wasm missing: bash scripts/build_wasm.sh`);
const cases = (values.model ?? [
  "tests/models/gpt2_tiny.onnx:batch=1,seq=8",
  "tests/models/gpt2_tiny.onnx:batch=1,seq=128",
  "tests/models/bert_tiny.onnx:batch=1,seq=8",
  "tests/models/bert_tiny.onnx:batch=1,seq=128",
]).map((arg) => {
  const [file, sizes = ""] = arg.split(":");
  const dims = Object.fromEntries(sizes.split(",").filter(Boolean).map((kv) => kv.split("=")).map(([k, v]) => [k, Number(v)]));
  return { file: relative(root, join(root, file)), dims };
});

// /ort/ → onnxruntime-web's dist, /pkg/ → fuselab's wasm package, /files/ → the repository
// (models), cross-origin isolated so both runtimes may use threads.
const mounts = { "/ort/": ortDist, "/pkg/": pkg, "/files/": root };
const server = await serveIsolated(mounts);
const browser = await launch();
const page = await browser.newPage();
page.on("console", (m) => m.type() === "error" && console.error(m.text()));
page.on("pageerror", (e) => console.error(e));
await page.goto(`http://127.0.0.1:${server.address().port}/`);
// onnxruntime-web on the page's main thread, as before fuselab had threads (in a Worker it
// measured slower here: 4.6-4.7 ms on gpt2_tiny 1x128 against 2.5-3.6, one run each), fuselab
// in a module Worker
// (benches/browser_vs_ortweb_worker.mjs), each run timed on its own thread.
const { ua, build } = await within(120000, "start", page.evaluate(async (threads) => {
  const ort = await import("/ort/ort.wasm.min.mjs");
  ort.env.wasm.wasmPaths = "/ort/";
  ort.env.wasm.numThreads = threads;
  const worker = new Worker("/files/benches/browser_vs_ortweb_worker.mjs", { type: "module" });
  const ask = (msg, transfer = []) =>
    new Promise((resolve, reject) => {
      worker.onmessage = ({ data }) => (data.ok ? resolve(data.result) : reject(new Error(data.error)));
      worker.onerror = (e) => reject(new Error(e.message));
      worker.postMessage(msg, transfer);
    });
  Object.assign(window, { ort, ask });
  const build = await ask({ init: { threads } });
  return { ua: navigator.userAgent.match(/Chrome\/[\d.]+/)?.[0] ?? navigator.userAgent, build };
}, threads));

console.log(`${ua}, fuselab ${build} in a Worker, onnxruntime-web 1.31.1 wasm EP on the main thread, ${threads} thread(s) each, median of ${runs} interleaved runs${gap > 0 ? `, ${gap} ms idle before each` : ""}\n`);
console.log("| model | dims | nodes → fused | load + optimize ms | fuselab ms | onnxruntime-web ms | fuselab / ort-web | max diff | calls split |");
console.log("|---|---|---|---:|---:|---:|---:|---:|---:|");
try {
  for (const { file, dims } of cases) {
    const hasData = existsSync(join(root, `${file}.data`));
    const r = await within(1200000, file, page.evaluate(async ({ file, dims, runs, hasData, threads, gap }) => {
      const { ort, ask } = window;
      const fetchBytes = async (p) => new Uint8Array(await (await fetch(`/files/${p}`)).arrayBuffer());
      const bytes = await fetchBytes(file);
      const dataName = file.split("/").pop() + ".data";
      const data = hasData ? await fetchBytes(`${file}.data`) : null;
      const ortSession = await ort.InferenceSession.create(bytes, {
        executionProviders: ["wasm"],
        graphOptimizationLevel: "all",
        ...(data ? { externalData: [{ path: dataName, data }] } : {}),
      });
      const { loadMs, nodes } = await ask({ load: { bytes, dataName, data, dims, threads } });
      // Identical inputs: ids in [0, 16), masks all ones, positions 0..n, floats in [-1, 1).
      let seed = 12345;
      const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
      const ours = {};
      const theirs = {};
      for (const meta of ortSession.inputMetadata) {
        const shape = meta.shape.map((d) => (typeof d === "number" ? d : (dims[d] ?? 1)));
        const n = shape.reduce((a, b) => a * b, 1);
        const last = shape[shape.length - 1];
        let arr;
        if (meta.type === "int64") {
          const value = (i) =>
            /mask/.test(meta.name) ? 1 : /type/.test(meta.name) ? 0 : /position/.test(meta.name) ? i % last : Math.floor(rand() * 16);
          arr = BigInt64Array.from({ length: n }, (_, i) => BigInt(value(i)));
        } else if (meta.type === "float32") {
          arr = Float32Array.from({ length: n }, () => rand() * 2 - 1);
        } else {
          throw new Error(`input ${meta.name}: type ${meta.type} not generated`);
        }
        ours[meta.name] = { dtype: meta.type, shape, data: arr };
        theirs[meta.name] = new ort.Tensor(meta.type, arr, shape);
      }
      // Warm-up (fuselab packs constant weights at a node's second run), then take turns.
      for (let i = 0; i < 3; i++) {
        await ask({ run: ours });
        await ortSession.run(theirs);
      }
      const a = [];
      const b = [];
      let outB;
      const pause = () => new Promise((r) => setTimeout(r, gap));
      for (let i = 0; i < runs; i++) {
        if (gap > 0) await pause();
        a.push(await ask({ run: ours }));
        if (gap > 0) await pause();
        const t = performance.now();
        outB = await ortSession.run(theirs);
        b.push(performance.now() - t);
      }
      const outA = await ask({ outputs: true });
      let diff = 0;
      for (const [k, v] of Object.entries(outB)) {
        const x = outA[k]?.data;
        const y = v.data;
        if (!x || x.length !== y.length) {
          diff = Infinity;
          break;
        }
        for (let i = 0; i < y.length; i++) diff = Math.max(diff, Math.abs(Number(x[i]) - Number(y[i])));
      }
      await ortSession.release();
      const splits = await ask({ drop: true });
      const med = (v) => v.sort((p, q) => p - q)[v.length >> 1];
      return { a: med(a), b: med(b), diff, loadMs, nodes, splits: splits / (runs + 3) };
    }, { file, dims, runs, hasData, threads, gap }));
    const d = Object.entries(dims).map(([k, v]) => `${k}=${v}`).join(" ");
    console.log(`| ${file.split("/").pop()} | ${d} | ${r.nodes} | ${r.loadMs.toFixed(0)} | ${r.a.toFixed(2)} | ${r.b.toFixed(2)} | ${(r.a / r.b).toFixed(2)} | ${r.diff.toExponential(1)} | ${r.splits.toFixed(0)} per run |`);
  }
} finally {
  await browser.close();
  server.close();
}
