// onnxruntime-web (npm) as a client of fuselab's saved models, in headless Chromium: serves the
// package's dist/ and a folder of models, creates a session per model and execution provider
// with the verbose log on, reads from that log which nodes onnxruntime placed on which provider,
// runs the model on seeded inputs and times it. Used by ort_web.test.mjs and by
// `node benches/ort_web.mjs` (the figures in docs/benchmarks.md).
import { execFileSync } from "node:child_process";
import { copyFileSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { basename, dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { launch, within } from "./browser.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const ortDist = join(root, "node_modules", "onnxruntime-web", "dist");

const MIME = { ".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm", ".html": "text/html" };

/** A static server on 127.0.0.1 (any free port), cross-origin isolated (COOP/COEP: threads in
 * wasm need SharedArrayBuffer): URL prefix → folder in `mounts`; "/" is an empty page. */
export function serveIsolated(mounts) {
  const server = createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    const headers = { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" };
    if (path === "/") {
      res.writeHead(200, { ...headers, "Content-Type": "text/html" }).end("<!doctype html><title>ort-web</title>");
      return;
    }
    const mount = Object.keys(mounts).find((m) => path.startsWith(m));
    const file = mount && normalize(join(mounts[mount], path.slice(mount.length)));
    if (!file || !file.startsWith(mounts[mount] + sep)) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = await readFile(file);
      res.writeHead(200, { ...headers, "Content-Type": MIME[extname(file)] ?? "application/octet-stream" }).end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

/** A browser page with onnxruntime-web loaded; `close()` ends both. */
export async function openOrtWeb(modelDir) {
  // /ort/ from onnxruntime-web's dist/, /models/ from `modelDir`.
  const server = await serveIsolated({ "/ort/": ortDist, "/models/": modelDir });
  const url = `http://127.0.0.1:${server.address().port}/`;
  const browser = await launch();
  const page = await browser.newPage();
  const log = [];
  page.on("console", (m) => log.push(m.text()));
  await within(30000, "page load", page.goto(url));
  await within(60000, "onnxruntime-web import", page.evaluate(async () => {
    const ort = await import("/ort/ort.webgpu.min.mjs");
    ort.env.wasm.wasmPaths = "/ort/";
    ort.env.logLevel = "verbose";
    window.ort = ort;
  }));
  return {
    /** Runs `model` (a file name under modelDir) on `ep` ("webgpu" or "wasm"). `dims` sizes the
     * symbolic input dims; inputs are seeded: int64 masks all ones, position ids 0..n, other
     * integers in [0, 16), floats uniform in [-1, 1). Returns outputs (name → {dims, data}),
     * `placement` (`placements()`), and the median time of `runs` runs, ms. */
    async run(model, ep, dims, runs = 10) {
      log.length = 0;
      const r = await within(300000, `${model} on ${ep}`, page.evaluate(async ({ model, ep, dims, runs }) => {
        const ort = window.ort;
        const session = await ort.InferenceSession.create(`/models/${model}`, {
          executionProviders: [ep],
          logSeverityLevel: 0,
          logVerbosityLevel: 0,
        });
        let seed = 12345;
        const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
        const feeds = {};
        for (const meta of session.inputMetadata) {
          const shape = meta.shape.map((d) => (typeof d === "number" ? d : dims[d] ?? 1));
          const n = shape.reduce((a, b) => a * b, 1);
          const name = meta.name;
          if (meta.type === "int64" || meta.type === "int32") {
            // Masks: row b left-padded by 2b positions (never the whole row); token types 0.
            const last = shape[shape.length - 1];
            const v = Array.from({ length: n }, (_, i) => {
              const row = Math.floor(i / last), col = i % last;
              if (/mask/.test(name)) return col < Math.min(2 * row, last - 1) ? 0 : 1;
              if (/type/.test(name)) return 0;
              if (/position/.test(name)) return col;
              return Math.floor(rand() * 16);
            });
            feeds[name] = new ort.Tensor(meta.type, meta.type === "int64" ? BigInt64Array.from(v.map(BigInt)) : Int32Array.from(v), shape);
          } else if (meta.type === "float32") {
            feeds[name] = new ort.Tensor("float32", Float32Array.from({ length: n }, () => rand() * 2 - 1), shape);
          } else if (meta.type === "float16") {
            const f = Float32Array.from({ length: n }, () => rand() * 2 - 1);
            feeds[name] = new ort.Tensor("float16", new Float16Array(f), shape);
          } else {
            throw new Error(`input ${name}: type ${meta.type} not generated`);
          }
        }
        let outs = await session.run(feeds);
        const times = [];
        for (let i = 0; i < runs; i++) {
          const t0 = performance.now();
          outs = await session.run(feeds);
          times.push(performance.now() - t0);
        }
        times.sort((a, b) => a - b);
        const result = {};
        for (const [k, t] of Object.entries(outs)) {
          const data = await t.getData();
          result[k] = { dims: t.dims, data: Array.from(data, Number) };
        }
        await session.release();
        return { outputs: result, ms: times[Math.floor(times.length / 2)] };
      }, { model, ep, dims, runs }));
      return { ...r, placement: placements(log), log: [...log] };
    },
    async close() {
      await browser.close();
      server.close();
    },
  };
}

/** The nodes onnxruntime's verbose "Node placements" log lists: [{ ep, op, name }]. When every
 * node is on one EP the log says only "All nodes placed on [EP]. Number of nodes: N": then N
 * entries with op and name "*". */
export function placements(log) {
  const out = [];
  let ep = null;
  for (const raw of log.join("\n").split("\n")) {
    const m = /VerifyEachNodeIsAssignedToAnEp\]\s(.*)$/.exec(raw);
    if (!m) continue;
    const all = /All nodes placed on \[(\w+)\]\. Number of nodes: (\d+)/.exec(m[1]);
    if (all) {
      for (let i = 0; i < Number(all[2]); i++) out.push({ ep: all[1], op: "*", name: "*" });
      continue;
    }
    const head = /placed on \[(\w+)\]/.exec(m[1]);
    const node = /^\s+(\w+) \((.*)\)$/.exec(m[1]);
    if (head) ep = head[1];
    else if (ep && node) out.push({ ep, op: node[1], name: node[2] });
  }
  return out;
}

/** Op type → count of the nodes placed on `ep`. */
export function opsOn(placement, ep) {
  const out = {};
  for (const p of placement) if (p.ep === ep) out[p.op] = (out[p.op] ?? 0) + 1;
  return out;
}

/** The models the onnxruntime-web check runs: a decoder with a causal and padding mask (GPT-2),
 * encoders with a padding mask (BERT, DistilBERT), a GQA decoder with rotary (Llama), GPT-J's
 * interleaved partial rotary (RotaryEmbedding with `interleaved` on the 3-D heads), a maskless encoder
 * (ViT, 17 tokens). Batch 2, the second row left-padded, 8 tokens: onnxruntime-web 1.31.1's
 * WebGPU attention kernels on Chromium's SwiftShader adapter are off by 1e-2 to 0.3 once the
 * sequence reaches 32 tokens, Attention and MultiHeadAttention alike (onnxruntime's CPU EP runs
 * the same saved models within 1e-6 of the originals there), so longer sequences are measured in
 * `benches/ort_web.mjs`, not asserted here. */
export const MODELS = [
  { file: "tests/models/gpt2_tiny.onnx", dims: { batch: 2, seq: 8 } },
  { file: "tests/models/bert_tiny.onnx", dims: { batch: 2, seq: 8 } },
  { file: "tests/models/zoo/distilbert_tiny.onnx", dims: { batch: 2, seq: 8 } },
  { file: "tests/models/zoo/llama_gqa_tiny.onnx", dims: { batch: 2, seq: 8 } },
  { file: "tests/models/zoo/gptj_tiny.onnx", dims: { batch: 2, seq: 8 } },
  { file: "tests/models/zoo/vit_tiny.onnx", dims: { batch: 2 } },
  // torch's opset-23 exports: the standard RotaryEmbedding (onnxruntime runs the original's
  // [1, seq, r/2] caches at batch 1 only) and the standard Gelu.
  { file: "tests/models/zoo/llama_gqa_tiny_op23.onnx", dims: { batch: 1, seq: 8 } },
  { file: "tests/models/zoo/vit_tiny_op23.onnx", dims: { batch: 2 } },
  // T5's encoder: its attention (a position bias and a padding mask) stays unfused for
  // `ort-webgpu`, whose MultiHeadAttention has no key_padding_mask; its norms fuse.
  { file: "tests/models/zoo/t5_encoder_tiny.onnx", dims: { batch: 2, seq: 8 } },
];

/** Copies `file` (relative to the repository, or absolute) to `dir` and writes fuselab's optimized model for `target` beside it (the CLI's
 * `optimize --target`). Returns the two file names and the optimize report. */
export function prepare(cli, file, dir, target = "ort-webgpu", dims = {}) {
  const base = basename(file, ".onnx");
  const original = `${base}.onnx`;
  const optimized = `${base}.${target}.onnx`;
  copyFileSync(resolve(root, file), join(dir, original));
  const report = join(dir, `${base}.${target}.json`);
  const sizes = Object.entries(dims).flatMap(([k, v]) => ["--dim", `${k}=${v}`]);
  execFileSync(cli, ["optimize", join(dir, original), "-o", join(dir, optimized), "--target", target, "--report", report, ...sizes], { stdio: "pipe" });
  return { original, optimized, report: JSON.parse(readFileSync(report, "utf8")) };
}

/** Largest |a − b| over every output the two runs share (Infinity when shapes differ or there is
 * no output to compare). */
export function maxDiff(a, b) {
  if (Object.keys(a).length === 0) return Infinity;
  let d = 0;
  for (const [k, x] of Object.entries(a)) {
    const y = b[k];
    if (!y || x.data.length !== y.data.length || x.dims.join() !== y.dims.join()) return Infinity;
    for (let i = 0; i < x.data.length; i++) {
      const e = Math.abs(x.data[i] - y.data[i]);
      if (!(e <= d)) d = Number.isNaN(e) ? Infinity : Math.max(d, e);
    }
  }
  return d;
}
