// The wasm build's speed outside the browser, in node's V8 (the engine Chromium runs it on):
// original vs fused through the npm package's Bench API, the same code path (and statistics,
// src/bench.rs) as the page's benchmark. With several --pkg folders (wasm-bindgen outputs of different builds) the builds
// take turns in one process, so their ratio is measured under the same noise.
//
//   node benches/wasm.mjs --model tests/models/gpt2_tiny.onnx --dim batch=1 --dim seq=8 \
//     --runs 200 [--pkg pkg --pkg /tmp/pkg3]
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);
const all = (flag) => args.flatMap((a, i) => (a === flag ? [args[i + 1]] : []));
const one = (flag, def) => all(flag).at(-1) ?? def;
if (args.includes("--help")) {
  console.log("node benches/wasm.mjs --model M.onnx [--dim N=V]... [--runs R] [--rounds K] [--pkg DIR]...");
  process.exit(0);
}
const model = readFileSync(one("--model", "tests/models/gpt2_tiny.onnx"));
const dims = Object.fromEntries(all("--dim").map((d) => d.split("=")).map(([k, v]) => [k, Number(v)]));
const runs = Number(one("--runs", 200));
const rounds = Number(one("--rounds", 4));
const pkgs = all("--pkg").length ? all("--pkg") : ["pkg"];
const now = () => performance.now();

const builds = [];
for (const dir of pkgs) {
  const js = await import(pathToFileURL(resolve(dir, "fuselab.js")));
  await js.default({ module_or_path: readFileSync(resolve(dir, "fuselab_bg.wasm")) });
  const m = js.Model.load(model);
  const o = m.optimize({ dims });
  const bench = new js.Bench(m, o.model(), { dims });
  const repeat = bench.calibrate(undefined, now);
  builds.push({ dir, bench, repeat, report: o.report() });
}
// Rounds alternate the builds; inside a round Bench interleaves original and fused.
for (let r = 0; r < rounds; r++) for (const b of builds) b.bench.step(Math.ceil(runs / rounds), now);
const first = builds[0].bench.summary().optimized.median_ms;
for (const b of builds) {
  const s = b.bench.summary();
  const [mo, mf] = [s.original.median_ms, s.optimized.median_ms];
  console.log(
    `${b.dir}: ${b.report.nodes_before} -> ${b.report.nodes_after} nodes; original median ${mo.toFixed(4)} ms, ` +
      `fused ${mf.toFixed(4)} ms, speedup ${s.speedup.toFixed(2)}x (${s.samples} runs, ${s.repeat} per sample)` +
      (builds.length > 1 ? `; fused time vs ${builds[0].dir}: ${(mf / first).toFixed(2)}x` : ""),
  );
}
