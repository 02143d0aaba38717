// The npm package as a user gets it: `npm pack` ships exactly the package files; the tarball,
// installed into a fresh app, type-checks a small TypeScript consumer (tsc --strict) and runs
// the README's usage example both bundled by Vite and from a plain <script type="module">
// (an import map, no bundler), in headless Chromium. Needs `npm run build:wasm` (pkg/).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "../../www/serve.mjs";
import { launch, within } from "./browser.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const tmp = mkdtempSync(join(tmpdir(), "fuselab-pack-"));
const app = join(tmp, "app");
const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
let tarball, browser;

/** The README's usage example: the first ```js block after its `usage-example` marker. */
function readmeExample() {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const at = readme.indexOf("<!-- usage-example");
  assert.ok(at >= 0, "README.md has no usage-example marker");
  const m = /```js\n([\s\S]*?)```/.exec(readme.slice(at));
  assert.ok(m, "no ```js block after the usage-example marker");
  return m[1];
}

before(async () => {
  const [packed] = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", tmp], root));
  tarball = { path: join(tmp, packed.filename), files: packed.files.map((f) => f.path).sort() };
  mkdirSync(join(app, "public"), { recursive: true });
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  run("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", tarball.path], app);
  browser = await launch();
});

after(async () => {
  await browser?.close();
});

test("npm pack ships exactly the package files", () => {
  // wasm-bindgen names the worker script's folder by a hash of the crate that brings it.
  const files = tarball.files.map((f) => f.replace(/wasm-bindgen-rayon-[0-9a-f]+/, "wasm-bindgen-rayon-HASH"));
  assert.deepEqual(files, [
    "README.md",
    "package.json",
    "pkg/fuselab.d.ts",
    "pkg/fuselab.js",
    "pkg/fuselab_bg.relaxed.wasm",
    "pkg/fuselab_bg.wasm",
    "pkg/fuselab_bg.wasm.d.ts",
    "pkg/threads/fuselab.d.ts",
    "pkg/threads/fuselab.js",
    "pkg/threads/fuselab_bg.wasm",
    "pkg/threads/snippets/wasm-bindgen-rayon-HASH/src/workerHelpers.no-bundler.js",
    "pkg/wasm_url.d.ts",
    "pkg/wasm_url.js",
  ]);
});

test("a TypeScript consumer type-checks against the generated types (misuse does not)", () => {
  for (const f of ["check.ts", "tsconfig.json"]) copyFileSync(join(root, "tests/js/consumer", f), join(app, f));
  const tsc = join(root, "node_modules/typescript/bin/tsc");
  try {
    run("node", [tsc, "-p", "tsconfig.json"], app);
  } catch (e) {
    assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`);
  }
});

async function logsOf(url, until) {
  const page = await browser.newPage();
  const logs = [];
  page.on("console", (m) => logs.push(m.text()));
  page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
  await within(30000, `load ${url}`, page.goto(url));
  await page.waitForFunction(() => window.__done === true, null, { timeout: 30000 }).catch(() => {});
  await page.close();
  return logs.filter(until);
}

const example = () => `${readmeExample()}\nwindow.__done = true;\n`;
const expectRun = (logs) => {
  assert.equal(logs.filter((l) => l.startsWith("pageerror")).length, 0, logs.join("\n"));
  assert.ok(logs.some((l) => /^2 -> 1 nodes \{"AddEyeLike":1\} parity ok: true$/.test(l)), logs.join("\n"));
};

test("the README example runs bundled by Vite from the tarball", async () => {
  writeFileSync(join(app, "index.html"), '<!doctype html><script type="module" src="./main.js"></script>\n');
  writeFileSync(join(app, "main.js"), example());
  copyFileSync(join(root, "examples/eyelike_add.onnx"), join(app, "public/model.onnx"));
  run("node", [join(root, "node_modules/vite/bin/vite.js"), "build", "--logLevel", "warn", "--base", "./"], app);
  // Both wasm builds are emitted as assets (wasm_url.js names each in a literal `new URL`).
  const assets = readdirSync(join(app, "dist", "assets"));
  for (const re of [/^fuselab_bg-.*\.wasm$/, /^fuselab_bg\.relaxed-.*\.wasm$/]) {
    assert.ok(assets.some((f) => re.test(f)), `${re} not among ${assets.join(", ")}`);
  }
  const { server, url } = await serve({ dir: join(app, "dist"), port: 0, base: "/" });
  try {
    expectRun(await logsOf(url, () => true));
  } finally {
    server.close();
  }
});

test("the README example runs from a plain <script type=module> (import map, no bundler)", async () => {
  const html = `<!doctype html>
<script type="importmap">{ "imports": { "fuselab": "./node_modules/fuselab/pkg/fuselab.js",
  "fuselab/wasm-url": "./node_modules/fuselab/pkg/wasm_url.js" } }</script>
<script type="module">
${example()}</script>
`;
  writeFileSync(join(app, "plain.html"), html);
  copyFileSync(join(root, "examples/eyelike_add.onnx"), join(app, "model.onnx"));
  const { server, url } = await serve({ dir: app, port: 0, base: "/" });
  try {
    expectRun(await logsOf(`${url}plain.html`, () => true));
  } finally {
    server.close();
  }
});

// The threads build from the tarball, unbundled, in a module Worker of a cross-origin isolated
// page (www/serve.mjs sends COOP/COEP): a pool of 2, and gpt2_tiny at 1×128 (its 1000-word
// lm_head is enough work to split) gives the same outputs bit for bit on 2 threads as on 1.
test("the threads build runs from the tarball in a Worker: 2 threads split work, outputs equal 1 thread's", async () => {
  writeFileSync(
    join(app, "threads_worker.js"),
    `import { wasmThreads, threadsUrl } from "./node_modules/fuselab/pkg/wasm_url.js";
try {
  const fl = await import(threadsUrl().href);
  await fl.default();
  const pool = await fl.startThreads(2);
  const m = fl.Model.load(new Uint8Array(await (await fetch("./gpt2_tiny.onnx")).arrayBuffer()));
  const dims = { batch: 1, seq: 128 };
  const one = m.session({ dims }).run();
  const before = fl.parallelCalls();
  const two = m.session({ dims, threads: 2 }).run();
  const splits = fl.parallelCalls() - before;
  let same = Object.keys(one).length > 0;
  for (const [k, v] of Object.entries(one)) same &&= v.data.length === two[k].data.length && v.data.every((x, i) => Object.is(x, two[k].data[i]));
  let refused = "";
  try { m.session({ dims, threads: 3 }); } catch (e) { refused = e.message; }
  postMessage({ wasmThreads, pool, splits, same, refused });
} catch (e) {
  postMessage({ error: String(e) });
}
`,
  );
  writeFileSync(join(app, "threads.html"), "<!doctype html><title>threads</title>\n");
  copyFileSync(join(root, "tests/models/gpt2_tiny.onnx"), join(app, "gpt2_tiny.onnx"));
  const { server, url } = await serve({ dir: app, port: 0, base: "/" });
  const page = await browser.newPage();
  try {
    await within(30000, "threads.html", page.goto(`${url}threads.html`));
    const r = await within(120000, "threads worker", page.evaluate(() => new Promise((resolve) => {
      const w = new Worker("./threads_worker.js", { type: "module" });
      w.onmessage = ({ data }) => resolve(data);
      w.onerror = (e) => resolve({ error: e.message });
    })));
    assert.equal(r.error, undefined, r.error);
    assert.equal(r.wasmThreads, true);
    assert.equal(r.pool, 2);
    assert.ok(r.splits > 0, "no kernel call split between the two threads");
    assert.equal(r.same, true, "2-thread outputs differ from 1-thread outputs");
    assert.match(r.refused, /threads 3: the pool has 2/);
  } finally {
    await page.close();
    server.close();
  }
});
