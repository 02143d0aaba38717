// The page's wasm work, off the main thread, in stages the page calls one by one: load, optimize,
// layout (each side), parity, then bench, profile and download on demand.
// Protocol: the page posts { id, cmd, ...args }; the worker answers { id, ok: true, result } or
// { id, ok: false, error }, and for long work posts { id, progress: { done, total } } meanwhile.
import * as single from "../../pkg/fuselab.js";
import { threadsUrl, wasmThreads, wasmUrl } from "../../pkg/wasm_url.js";
import { layoutGraph } from "./layout.js";

// The most threads the page's pool starts (fewer where the machine has fewer cores).
const MAX_POOL = 4;

// The wasm API in use: the threads build (threads/, beside this bundle, loaded unbundled) where
// the page is cross-origin isolated and the browser runs wasm threads, with a pool of up to
// MAX_POOL Web Workers; else the relaxed-SIMD or SIMD128 build on this thread (pkg/wasm_url.js).
// This Worker is the caller that blocks while the pool works, as the threads build asks.
let fl = single;
let engine = { build: "", pool: 1 };
const ready = (async () => {
  if (wasmThreads) {
    try {
      const threaded = await import(threadsUrl().href);
      await threaded.default();
      const want = Math.max(1, Math.min(navigator.hardwareConcurrency || 1, MAX_POOL));
      engine = { build: "threads", pool: await threaded.startThreads(want) };
      fl = threaded;
      return;
    } catch (e) {
      console.warn(`fuselab: the threads build did not start (${e.message}); running on one thread`);
    }
  }
  const url = wasmUrl();
  await single.default({ module_or_path: url });
  engine = { build: url.pathname.endsWith(".relaxed.wasm") ? "relaxed-simd" : "simd128", pool: 1 };
})();
const now = () => performance.now();

let original = null; // Model
let optimized = null; // Optimized
let views = null; // { before, after }: the optimized graphs' GraphViews
let benching = 0; // benchmarks running (a load may arrive while one awaits)
const retired = []; // models a load replaced while a benchmark used them

function pickModel(files) {
  const onnx = files.filter((f) => f.name.toLowerCase().endsWith(".onnx"));
  if (onnx.length === 0) throw new Error("no .onnx file among the dropped files");
  if (onnx.length > 1) throw new Error(`drop one .onnx at a time (got ${onnx.map((f) => f.name).join(", ")})`);
  const external = {};
  for (const f of files) if (f !== onnx[0]) external[f.name] = f.bytes;
  return { model: onnx[0], external };
}

const commands = {
  // Which build runs and how many threads its benchmarks may use.
  async ping() {
    return engine;
  },

  async load({ files }) {
    const { model, external } = pickModel(files);
    // A benchmark still running on the old model frees it when it ends.
    if (benching) retired.push(original);
    else original?.free();
    optimized?.free();
    original = optimized = views = null; // a failed load leaves no freed model behind
    original = fl.Model.load(model.bytes, Object.keys(external).length ? external : undefined);
    return { name: model.name, bytes: model.bytes.length, summary: original.summary() };
  },

  // Stage 2: the fusion rules only (no parity: a model the reference backend cannot run still
  // optimizes). The views are kept for the layout stage.
  async optimize({ dims, target }) {
    if (!original) throw new Error("load a model first");
    optimized?.free();
    optimized = null;
    views = null;
    const t0 = now();
    optimized = original.optimize({ dims, target, parity: false });
    const optimize_ms = now() - t0;
    views = { before: optimized.graphBefore(), after: optimized.graphAfter() };
    return { report: optimized.report(), optimize_ms };
  },

  // Stage 3, one side at a time: a layout failure on one side leaves the other.
  async layout({ side, collapsed }, progress) {
    if (!views) throw new Error("optimize first");
    const t0 = now();
    const graph = layoutGraph(views[side], (step) => progress({ step }), collapsed ?? []);
    return { graph, layout_ms: now() - t0 };
  },

  // Stage 4: parity, as `fuselab optimize` checks it (same rules, dims, seed and tolerance; the
  // rules run again, which is what the wasm API offers). Its failure is reported, not thrown
  // past the graphs.
  async parity({ dims, target }) {
    if (!original) throw new Error("load a model first");
    const t0 = now();
    const checked = original.optimize({ dims, target, parity: true });
    try {
      return { parity: checked.report().parity, parity_ms: now() - t0 };
    } finally {
      checked.free();
    }
  },

  // Both backends run the bench policy of src/bench.rs (warm-up, runs per sample, which graph
  // runs next, the statistics); this only asks for samples in batches, to report progress. On
  // WebGPU both graphs are prepared once (pipelines, weights), the fused one with the backend's
  // lowering as `fuselab bench --backend webgpu` runs it; each run uploads the inputs, submits
  // every dispatch and reads the outputs back, as an application would.
  async bench({ runs, dims, backend, threads }, progress) {
    if (!optimized) throw new Error("optimize first");
    const opt = optimized.model();
    let bench = null;
    benching++;
    try {
      bench =
        backend === "webgpu"
          ? await fl.GpuBench.prepare(original, opt, { dims })
          : new fl.Bench(original, opt, { dims, backend, threads: threads ?? 1 });
      const repeat = await bench.calibrate(undefined, now);
      const original_ms = [];
      const optimized_ms = [];
      const batch = Math.max(1, Math.ceil(runs / 50));
      for (let done = 0; done < runs; ) {
        const n = Math.min(batch, runs - done);
        const t = await bench.step(n, now);
        for (let i = 0; i < n; i++) {
          original_ms.push(t[2 * i]);
          optimized_ms.push(t[2 * i + 1]);
        }
        done += n;
        progress({ done, total: runs });
        await new Promise((r) => setTimeout(r, 0)); // let progress messages out
      }
      const gpu = bench instanceof fl.GpuBench ? { dispatches: bench.dispatches(), nodes: bench.nodes() } : {};
      return { repeat, original_ms, optimized_ms, summary: bench.summary(), ...gpu };
    } finally {
      bench?.free();
      opt.free();
      if (--benching === 0) for (const m of retired.splice(0)) m?.free();
    }
  },

  // Both graphs profiled on the reference backend (Model.profile, src/profile/): the optimized
  // one's node names are graphAfter()'s, so the page can light a candidate's nodes.
  async profile({ runs, dims }) {
    if (!optimized) throw new Error("optimize first");
    const opt = optimized.model();
    try {
      return { before: original.profile({ dims }, runs, now), after: opt.profile({ dims }, runs, now) };
    } finally {
      opt.free();
    }
  },

  async optimizedBytes() {
    if (!optimized) throw new Error("optimize first");
    return optimized.bytes();
  },
};

self.onmessage = async ({ data }) => {
  const { id, cmd, ...args } = data;
  try {
    await ready;
    const fn = commands[cmd];
    if (!fn) throw new Error(`unknown command ${cmd}`);
    const result = await fn(args, (p) => self.postMessage({ id, progress: p }));
    self.postMessage({ id, ok: true, result });
  } catch (e) {
    self.postMessage({ id, ok: false, error: e instanceof Error ? e.message : String(e) });
  }
};
