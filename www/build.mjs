// Writes the whole static site to www/dist/: index.html, style.css, the bundled page and worker
// (esbuild), the three wasm builds from pkg/ (run `npm run build:wasm` first) and the sample models.
// Every URL in it is relative, so it works from any static host and any sub-path.
import { build } from "esbuild";
import { copyFileSync, cpSync, existsSync, mkdirSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "www", "dist");
const wasm = join(root, "pkg", "fuselab_bg.wasm");
if (!existsSync(wasm)) {
  console.error("www/build.mjs: pkg/fuselab_bg.wasm is missing; run `npm run build:wasm` first");
  process.exit(1);
}

rmSync(dist, { recursive: true, force: true });
mkdirSync(join(dist, "samples"), { recursive: true });
await build({
  entryPoints: [join(root, "www/src/main.js"), join(root, "www/src/worker.js")],
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  sourcemap: true,
  outdir: dist,
  logLevel: "warning",
});
const copies = [
  ["www/index.html", "index.html"],
  ["www/style.css", "style.css"],
  ["www/favicon.svg", "favicon.svg"],
  ["pkg/fuselab_bg.wasm", "fuselab_bg.wasm"],
  ["pkg/fuselab_bg.relaxed.wasm", "fuselab_bg.relaxed.wasm"],
  ["examples/eyelike_add.onnx", "samples/eyelike_add.onnx"],
  ["tests/models/gpt2_tiny.onnx", "samples/gpt2_tiny.onnx"],
  ["tests/models/bert_tiny.onnx", "samples/bert_tiny.onnx"],
];
for (const [from, to] of copies) copyFileSync(join(root, from), join(dist, to));
// The threads build as wasm-bindgen wrote it (glue, .wasm, its worker script under snippets/):
// the worker imports it by URL, unbundled, where the page is cross-origin isolated.
cpSync(join(root, "pkg/threads"), join(dist, "threads"), {
  recursive: true,
  filter: (src) => !src.endsWith(".d.ts"),
});
const kb = (p) => (statSync(join(dist, p)).size / 1024).toFixed(0);
console.log(
  `www/dist: main.js ${kb("main.js")} KB, worker.js ${kb("worker.js")} KB, ` +
    `fuselab_bg.wasm ${kb("fuselab_bg.wasm")} KB, fuselab_bg.relaxed.wasm ${kb("fuselab_bg.relaxed.wasm")} KB, ` +
    `threads/fuselab_bg.wasm ${kb("threads/fuselab_bg.wasm")} KB, 3 samples`,
);
