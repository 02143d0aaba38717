// Times the page's graph layout and drawing in headless Chromium (the machine's Debian
// chromium through playwright-core), for docs/benchmarks.md ("Page"):
//   1. layoutGraph (www/src/layout.js) alone on synthetic transformer GraphViews
//      (benches/page_graphs.mjs) of 3,000 and 10,000 nodes, median of 5, in the page's engine;
//   2. the whole page on models dropped on it: built by tests/js/make_models.py (a 3,000- and a
//      10,000-node stack) and the graphs of tests/models/real (GPT-2 small, Llama 12 layers; their
//      weights made graph inputs, their .data files are not here), parity off: the page's own
//      timings (layout of each side, drop to graphs drawn) and one redraw of the fitted
//      (canvas) view.
// Needs `npm run build:www` and the Python venv with onnx. Usage: node benches/page_layout.mjs
import { build } from "esbuild";
import { join } from "node:path";
import { dropFiles, makeModel, openPage, root, statusAfter } from "../tests/js/page_helpers.mjs";

const bundle = await build({
  stdin: {
    contents: `import { layoutGraph } from "./www/src/layout.js"; import { syntheticGraph } from "./benches/page_graphs.mjs";
      window.benchLayout = (n, reps) => { const g = syntheticGraph(n); const ms = [];
        for (let i = 0; i < reps; i++) { const t = performance.now(); layoutGraph(g); ms.push(performance.now() - t); }
        ms.sort((a, b) => a - b); return { nodes: g.nodes.length, edges: g.edges.length, median: ms[reps >> 1], min: ms[0] }; };`,
    resolveDir: root,
  },
  bundle: true,
  format: "iife",
  write: false,
});
const { page, errors, close } = await openPage();
await page.addScriptTag({ content: bundle.outputFiles[0].text });
console.log(`chromium ${page.context().browser().version()}`);
for (const n of [3000, 10000]) {
  const r = await page.evaluate(([n]) => window.benchLayout(n, 5), [n]);
  console.log(`layoutGraph, synthetic ${r.nodes} nodes / ${r.edges} edges: median ${r.median.toFixed(0)} ms (min ${r.min.toFixed(0)}) of 5`);
}
await page.evaluate(() => { document.getElementById("parity-on").checked = false; }); // the form shows once a model is loaded
const models = [
  ["stack, 3,000 nodes", makeModel(["layers", "3000"], "layers3k.onnx")],
  ["stack, 10,000 nodes", makeModel(["layers", "10000"], "layers10k.onnx")],
  ["GPT-2 small graph", makeModel(["strip", join(root, "tests/models/real/gpt2_small.onnx")], "gpt2_small_graph.onnx")],
  ["Llama 12-layer graph", makeModel(["strip", join(root, "tests/models/real/llama12.onnx")], "llama12_graph.onnx")],
];
for (const [what, path] of models) {
  const name = path.split("/").pop();
  await dropFiles(page, [{ name, path }]);
  const text = await statusAfter(page, `^${name.replace(".", "\\.")}.*graphs shown`, 300000);
  if (/failed/.test(text)) throw new Error(text);
  const t = await page.evaluate(() => window.fuselabTiming);
  const nodes = await page.evaluate(() => [document.getElementById("nodes-before").textContent, document.getElementById("nodes-after").textContent]);
  await page.locator("#graphs").screenshot({ path: join(root, "target/e2e", `layout-${name.replace(".onnx", "")}.png`) });
  const redraw = await page.evaluate(async () => {
    const v = window.fuselabViews().before;
    const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
    await frame();
    const t0 = performance.now();
    v.fit();
    await frame();
    await frame();
    return { ms: performance.now() - t0, mode: document.getElementById("graph-before").dataset.mode };
  });
  console.log(`${what} (${nodes[0]} → ${nodes[1]} nodes): layout ${t.layout_before_ms.toFixed(0)} ms before + ` +
    `${t.layout_after_ms.toFixed(0)} ms after; optimize ${t.optimize_ms.toFixed(0)} ms; drop to graphs drawn ` +
    `${t.drop_to_graphs_ms.toFixed(0)} ms; fit + redraw (${redraw.mode}) ${redraw.ms.toFixed(0)} ms`);
}
if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
await close();
