// Model.run (plans the model on every call) against Session.run (planned once) in node's V8,
// on the optimized model, same inputs, interleaved call by call (issue 16, item 5).
//
//   node benches/wasm_session.mjs --model tests/models/gpt2_tiny.onnx --dim batch=1 --dim seq=8 \
//     [--runs 200] [--pkg pkg]
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);
const all = (flag) => args.flatMap((a, i) => (a === flag ? [args[i + 1]] : []));
const one = (flag, def) => all(flag).at(-1) ?? def;
const model = readFileSync(one("--model", "tests/models/gpt2_tiny.onnx"));
const dims = Object.fromEntries(all("--dim").map((d) => d.split("=")).map(([k, v]) => [k, Number(v)]));
const runs = Number(one("--runs", 200));
const dir = one("--pkg", "pkg");
const js = await import(pathToFileURL(resolve(dir, "fuselab.js")));
await js.default({ module_or_path: readFileSync(resolve(dir, "fuselab_bg.wasm")) });

const m = js.Model.load(model).optimize({ dims }).model();
// Fixed inputs: integers in [0, 2) (ids, masks), floats in [-1, 1).
const inputs = {};
for (const p of m.summary().inputs) {
  const shape = p.shape.map((d) => (/^\d+$/.test(d) ? Number(d) : dims[d] ?? 8));
  const n = shape.reduce((a, b) => a * b, 1);
  const data = p.dtype === "int64"
    ? BigInt64Array.from({ length: n }, (_, i) => BigInt(i % 2))
    : Float32Array.from({ length: n }, (_, i) => ((i * 7919) % 200) / 100 - 1);
  inputs[p.name] = { dtype: p.dtype, shape, data };
}
const session = m.session({ dims });
const times = { run: [], session: [] };
for (let i = 0; i < 5; i++) (m.run(inputs, { dims }), session.run(inputs));
for (let i = 0; i < runs; i++) {
  let t = performance.now();
  m.run(inputs, { dims });
  times.run.push(performance.now() - t);
  t = performance.now();
  session.run(inputs);
  times.session.push(performance.now() - t);
}
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const [a, b] = [median(times.run), median(times.session)];
console.log(`${one("--model")} ${JSON.stringify(dims)}, ${runs} runs each, interleaved: Model.run ${a.toFixed(3)} ms, ` +
  `Session.run ${b.toFixed(3)} ms (median); session/run = ${(b / a).toFixed(2)}`);
