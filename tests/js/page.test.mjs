// End to end: the built demo (www/dist) served from a sub-path, in headless Chromium. Drops
// gpt2_tiny on the page, checks the fused counts it shows against the CLI's report, runs a
// 20-run benchmark, checks the chart, checks that no request left the local server, and saves a
// screenshot. Needs `npm run build` and target/release/fuselab (scripts/test.sh builds both).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "../../www/serve.mjs";
import { launch, within } from "./browser.mjs";
import { cliReport, dropFiles as dropFilesOn } from "./page_helpers.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const dist = join(root, "www", "dist");
const cli = process.env.FUSELAB_BIN ?? join(root, "target", "release", "fuselab");
const outDir = join(root, "target", "e2e");
const tmp = mkdtempSync(join(tmpdir(), "fuselab-e2e-"));

let server, url, browser, page;
const requests = [];
const errors = [];

before(async () => {
  assert.ok(existsSync(join(dist, "index.html")), "www/dist is missing: run `npm run build`");
  assert.ok(existsSync(cli), `${cli} is missing: cargo build --release --bin fuselab`);
  mkdirSync(outDir, { recursive: true });
  ({ server, url } = await serve({ dir: dist, port: 0, base: "/demo/fuselab/" }));
  browser = await launch();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, acceptDownloads: true });
  page.on("request", (r) => requests.push(r.url()));
  page.on("pageerror", (e) => errors.push(e.message));
  await within(30000, "page load", page.goto(url));
  await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("Ready"), null, { timeout: 30000 });
});

after(async () => {
  await browser?.close();
  server?.close();
});

// The CLI's report at the page's dims, and a drop of files on the page: tests/js/page_helpers.mjs.
const dropFiles = (files) => dropFilesOn(page, files);

const statusText = () => page.textContent("#status");

test("dropping gpt2_tiny shows the CLI's fused counts and linked before/after graphs", async () => {
  await dropFiles([{ name: "gpt2_tiny.onnx", path: join(root, "tests/models/gpt2_tiny.onnx") }]);
  await page.waitForFunction(() => /graphs shown|Could not/.test(document.getElementById("status").textContent), null, { timeout: 60000 });
  const text = await statusText();
  assert.match(text, /graphs shown/, text);
  const timing = await page.evaluate(() => window.fuselabTiming);
  console.log(`# gpt2_tiny drop to graphs shown: ${timing.drop_to_graphs_ms.toFixed(0)} ms ` +
    `(optimize ${timing.optimize_ms.toFixed(0)} ms, layout ${timing.layout_ms.toFixed(0)} ms)`);

  const dims = await page.evaluate(() =>
    Object.fromEntries([...document.querySelectorAll("#dim-fields input")].map((i) => [i.dataset.dim, Number(i.value)])));
  assert.deepEqual(dims, { batch: 1, seq: 8 });
  const cliR = cliReport(join(root, "tests/models/gpt2_tiny.onnx"), dims);
  const shown = await page.evaluate(() =>
    Object.fromEntries([...document.querySelectorAll("#fusions tbody tr[data-op]")].map((r) => [r.dataset.op, Number(r.dataset.count)])));
  assert.deepEqual(shown, cliR.fusions);
  assert.ok((shown.SkipLayerNormalization ?? 0) > 0, JSON.stringify(shown));
  assert.equal(Number(await page.textContent("#nodes-before")), cliR.nodes_before);
  assert.equal(Number(await page.textContent("#nodes-after")), cliR.nodes_after);
  assert.equal(await page.textContent("#parity"), "outputs match");
  // Per-node parity: the CLI report's fused nodes (the order, worst first, may differ where
  // wasm and native round differently), each within the tolerance.
  const nodeRows = await page.evaluate(() => [...document.querySelectorAll("#node-parity li")].map((li) => li.dataset.node));
  assert.deepEqual(nodeRows.sort(), cliR.parity.nodes.map((d) => d.node).sort());
  assert.ok(cliR.parity.nodes.length > 0 && cliR.parity.nodes.every((d) => d.max_abs_diff <= cliR.parity.tolerance), JSON.stringify(cliR.parity.nodes));
  assert.match(await page.textContent("#parity-detail"), /largest fused-node diff: .+ \(\w+\) \d/);

  // One drawn box per operator on each side, Constant nodes aside (they show as inputs).
  const constants = (ops) => ops.Constant ?? 0;
  assert.ok(constants(cliR.ops_before) > 0);
  assert.equal(await page.locator("#graph-before .node.op").count(), cliR.nodes_before - constants(cliR.ops_before));
  assert.equal(await page.locator("#graph-after .node.op").count(), cliR.nodes_after - constants(cliR.ops_after));
  assert.match(await page.textContent("#caption-before"), new RegExp(`${cliR.nodes_before} nodes \\(${constants(cliR.ops_before)} Constant`));
  const fused = page.locator("#graph-after .node.fused");
  assert.ok((await fused.count()) > 0);
  // Hovering a fused node lights up the original nodes it replaced, on the other side.
  const skip = page.locator('#graph-after .node.fused:has(text:text-is("SkipLayerNormalization"))').first();
  await skip.dispatchEvent("mouseenter");
  const lit = await page.locator("#graph-before .node.lit").count();
  assert.ok(lit >= 2, `lit before-nodes: ${lit}`);
  await skip.dispatchEvent("mouseleave");
  assert.equal(await page.locator(".node.lit").count(), 0);
  // The inspector shows the fused node's provenance.
  await skip.dispatchEvent("click");
  assert.match(await page.textContent("#inspector"), /fused by skip_layer_norm/);
  assert.match(await page.textContent("#inspector"), /parity of the fused node's outputsmax \|diff\| = \d\.\d\de[-+]\d+/);
});

test("optimizing for onnxruntime-web's WebGPU EP shows the CLI's --target ort-webgpu counts", async () => {
  const fusedShown = () => page.evaluate(() =>
    Object.fromEntries([...document.querySelectorAll("#fusions tbody tr[data-op]")].map((r) => [r.dataset.op, Number(r.dataset.count)])));
  const reoptimized = (target) => page.waitForFunction((t) => {
    const s = document.getElementById("status").textContent;
    return s.includes(`for ${t}.`) && /graphs shown/.test(s) || /failed/.test(s);
  }, target, { timeout: 60000 });
  await page.selectOption("#target", "ort-webgpu");
  await reoptimized("ort-webgpu");
  const cliR = cliReport(join(root, "tests/models/gpt2_tiny.onnx"), { batch: 1, seq: 8 }, ["--target", "ort-webgpu"]);
  const shown = await fusedShown();
  assert.deepEqual(shown, cliR.fusions);
  // That EP runs an Attention with a mask on the CPU: the masked attention is a MultiHeadAttention.
  assert.equal(shown.MultiHeadAttention, 2, JSON.stringify(shown));
  assert.equal(shown.Attention, undefined, JSON.stringify(shown));
  assert.equal(Number(await page.textContent("#nodes-after")), cliR.nodes_after);
  // Back to the default rules (nothing refused): the Attention again.
  await page.selectOption("#target", "");
  await page.waitForFunction(() => {
    const s = document.getElementById("status").textContent;
    return !s.includes(" for ort-") && /graphs shown/.test(s) || /failed/.test(s);
  }, null, { timeout: 60000 });
  assert.equal((await fusedShown()).Attention, 2);
});

test("20-run benchmarks on the reference and the WebGPU backend draw their charts", async () => {
  await page.fill("#runs", "20");
  await page.click("#bench-run");
  await page.waitForFunction(() => /speedup|failed/.test(document.getElementById("bench-result").textContent), null, { timeout: 120000 });
  const result = await page.textContent("#bench-result");
  assert.match(result, /speedup [\d.]+x/, result);
  console.log(`# ${result}`);
  // Served cross-origin isolated, the page runs the threads build with a pool of
  // min(cores, 4) and benchmarks on all of it by default (this machine kind has 2 cores).
  const pool = await page.locator("#threads option").count();
  assert.ok(pool >= 2, `the threads select offers ${pool} option(s)`);
  assert.equal(await page.inputValue("#threads"), String(pool));
  assert.match(await page.textContent("#threads-note"), new RegExp(`up to ${pool} threads`));
  assert.match(result, new RegExp(`^reference backend, ${pool} threads, 20 interleaved runs`), result);
  assert.equal(await page.locator("#bench-chart .series.original circle").count(), 20);
  assert.equal(await page.locator("#bench-chart .series.fused circle").count(), 20);
  assert.equal(await page.locator("#bench-chart .median").count(), 2);
  assert.equal(await page.getAttribute("#bench-progress", "value"), "20");
  // Chromium runs with --enable-unsafe-webgpu: its SwiftShader adapter shows, and the page
  // offers the WebGPU backend, saying what the adapter is.
  const note = await page.textContent("#webgpu-note");
  assert.match(note, /WebGPU is available .*software fallback/);
  console.log(`# ${note}`);
  assert.ok(!(await page.locator('#backend option[value="webgpu"]').isDisabled()));
  await page.selectOption("#backend", "webgpu");
  await page.evaluate(() => { document.getElementById("bench-result").textContent = ""; });
  await page.click("#bench-run");
  await page.waitForFunction(() => /speedup|failed/.test(document.getElementById("bench-result").textContent), null, { timeout: 120000 });
  const gpu = await page.textContent("#bench-result");
  // The graphs `fuselab bench --backend webgpu` times (the fused one with the backend's lowering,
  // from pipeline::for_backend in both): the same dispatches and nodes.
  const args = ["bench", join(root, "tests/models/gpt2_tiny.onnx"), "--backend", "webgpu", "--json", "--runs", "1", "--warmup", "0"];
  const cliB = JSON.parse(execFileSync(cli, [...args, "--dim", "batch=1", "--dim", "seq=8"], { encoding: "utf8" }));
  // 21: GPT-2's first Add + LayerNormalization is one SkipLayerNormalization (its position
  // embeddings the skip), one dispatch where it was two.
  assert.deepEqual(cliB.dispatches, { original: 105, optimized: 21 });
  const same = `${cliB.dispatches.original} → ${cliB.dispatches.optimized} dispatches per run; ${cliB.nodes_before} → ${cliB.nodes_after} nodes`;
  assert.match(gpu, /^webgpu backend, 20 .*speedup [\d.]+x\. /, gpu);
  assert.ok(gpu.includes(same), `${gpu}\nCLI: ${same}`);
  console.log(`# ${gpu}`);
  assert.equal(await page.locator("#bench-chart .series.fused circle").count(), 20);
  await page.selectOption("#backend", "reference");
  await page.screenshot({ path: join(outDir, "page.png"), fullPage: true });
});

test("the downloaded optimized model is what the report says", async () => {
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#dl-model")]);
  const saved = join(tmp, "downloaded.onnx");
  await download.saveAs(saved);
  assert.equal(download.suggestedFilename(), "gpt2_tiny.fused.onnx");
  const info = JSON.parse(execFileSync(cli, ["inspect", saved, "--json"], { encoding: "utf8" }));
  assert.equal(info.nodes, Number(await page.textContent("#nodes-after")));
});

test("the report JSON download is the report the page shows", async () => {
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#dl-report")]);
  const saved = join(tmp, "report.json");
  await download.saveAs(saved);
  assert.equal(download.suggestedFilename(), "gpt2_tiny.report.json");
  const report = JSON.parse(readFileSync(saved, "utf8"));
  assert.equal(report.nodes_before, Number(await page.textContent("#nodes-before")));
  assert.equal(report.nodes_after, Number(await page.textContent("#nodes-after")));
  assert.equal(report.parity.ok, true);
  assert.equal(report.rejected.length, Number(await page.textContent("#rejected-count")));
});

test("the wheel zooms and a drag pans the graph", async () => {
  const svg = page.locator("#graph-before");
  const viewBox = async () => (await svg.getAttribute("viewBox")).split(" ").map(Number);
  await svg.scrollIntoViewIfNeeded();
  const box = await svg.boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  const [, , w0] = await viewBox();
  await page.mouse.wheel(0, -300);
  await page.waitForFunction((w) => Number(document.getElementById("graph-before").getAttribute("viewBox").split(" ")[2]) < w, w0);
  const [x1, y1, w1] = await viewBox();
  assert.ok(w1 < w0, `zoomed in: ${w1} < ${w0}`);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width / 2 + 80, box.y + box.height / 2 + 60, { steps: 4 });
  await page.mouse.up();
  const [x2, y2] = await viewBox();
  assert.ok(x2 < x1 && y2 < y1, `panned: ${[x1, y1]} -> ${[x2, y2]}`);
});

test("a truncated model is an error on the page, and the page stays usable", async () => {
  const bytes = readFileSync(join(root, "examples/eyelike_add.onnx"));
  const cut = join(tmp, "cut.onnx");
  writeFileSync(cut, bytes.subarray(0, bytes.length >> 1));
  await dropFiles([{ name: "cut.onnx", path: cut }]);
  await page.waitForFunction(() => document.getElementById("status").classList.contains("error"), null, { timeout: 30000 });
  assert.match(await statusText(), /^Could not load cut\.onnx: cannot decode ONNX model: .+/);
  // Nothing of the model shown before stays: no report, graphs, benchmark, dims or download.
  for (const id of ["#report", "#graphs", "#bench", "#dims", "#profile"]) assert.equal(await page.isVisible(id), false, id);
  assert.equal(await page.isDisabled("#dl-model"), true);
  assert.equal(await page.isDisabled("#dl-report"), true);
  await page.screenshot({ path: join(outDir, "failed-load.png"), fullPage: true });
  await page.click('[data-sample="eyelike_add.onnx"]');
  await page.waitForFunction(() => /graphs shown/.test(document.getElementById("status").textContent), null, { timeout: 30000 });
  assert.equal(await page.textContent("#nodes-after"), "1");
  assert.equal(await page.locator("#fusions tbody tr[data-op=AddEyeLike]").getAttribute("data-count"), "1");
});

test("the profile panel shows the CLI's profile of both graphs, and a candidate lights its nodes", async () => {
  // eyelike_add is loaded (the test before), at N = 64: one EyeLike -> Add sequence whose
  // intermediate is the 64 x 64 float32 identity, covered by add_eyelike; nothing left after.
  const N = Number(await page.inputValue('#dim-fields input[data-dim="N"]'));
  assert.equal(N, 64);
  await page.fill("#profile-runs", "3");
  await page.click("#profile-run");
  await page.waitForFunction(() => /per run|failed/.test(document.getElementById("profile-status").textContent), null, { timeout: 60000 });
  const status = await page.textContent("#profile-status");
  assert.match(status, /^Original .* 0 uncovered candidate sequence\(s\) left/, status);
  const rows = (side) => page.evaluate((side) =>
    [...document.querySelectorAll(`#profile-${side} table.profile-candidates tbody tr`)].map((tr) => [...tr.cells].map((c) => c.textContent)), side);
  assert.deepEqual(await rows("before"), [["EyeLike → Add", "add_eyelike", "1", (await rows("before"))[0][3], "16.0 KiB"]]);
  assert.deepEqual(await rows("after"), [["none: no chain of 2 to 4 nodes passes an intermediate only inside itself"]]);
  // The same figures as `fuselab profile --json` (timings aside).
  const cliP = JSON.parse(execFileSync(cli, ["profile", join(root, "examples/eyelike_add.onnx"), "--dim", `N=${N}`, "--runs", "1", "--json"], { encoding: "utf8" }));
  assert.deepEqual(cliP.candidates.map((c) => [c.ops.join(" → "), c.rule, c.count, c.intermediate_bytes]), [["EyeLike → Add", "add_eyelike", 1, N * N * 4]]);
  const ops = await page.evaluate(() => [...document.querySelectorAll("#profile-before table.profile-ops tbody tr")].map((tr) => tr.cells[0].textContent).sort());
  assert.deepEqual(ops, cliP.ops.map((o) => o.op).sort());
  assert.equal(await page.locator("#profile-before svg.profile-bars rect.bar").count(), cliP.ops.length);
  // Sorting by a header, with the keyboard too.
  const th = page.locator("#profile-before table.profile-ops th", { hasText: "nodes" });
  await th.focus();
  await page.keyboard.press("Enter");
  assert.equal(await th.getAttribute("aria-sort"), "descending");
  await th.click();
  assert.equal(await th.getAttribute("aria-sort"), "ascending");
  // Choosing the candidate lights its two nodes in the original graph, and only those.
  await page.locator("#profile-before table.profile-candidates tbody tr").first().click();
  assert.equal(await page.locator("#graph-before .node.picked").count(), 2);
  assert.match(await page.textContent("#profile-status"), /1 occurrence\(s\), 2 node\(s\) lit in the original graph/);
  await page.screenshot({ path: join(outDir, "profile.png"), fullPage: true });
});

test("the file picker loads a model too (bert_tiny), and a dims change re-optimizes", async () => {
  await page.setInputFiles("#file", join(root, "tests/models/bert_tiny.onnx"));
  await page.waitForFunction(() => /^bert_tiny\.onnx: .*graphs shown/.test(document.getElementById("status").textContent), null, { timeout: 60000 });
  // Choosing the same file again loads it again (the input is reset after each choice).
  await page.evaluate(() => { document.getElementById("status").textContent = ""; });
  await page.setInputFiles("#file", join(root, "tests/models/bert_tiny.onnx"));
  await page.waitForFunction(() => /^bert_tiny\.onnx: .*graphs shown/.test(document.getElementById("status").textContent), null, { timeout: 60000 });
  const cliR = cliReport(join(root, "tests/models/bert_tiny.onnx"), { batch: 2, seq: 5 });
  await page.fill('#dim-fields input[data-dim="batch"]', "2");
  await page.fill('#dim-fields input[data-dim="seq"]', "5");
  await page.evaluate(() => { document.getElementById("status").textContent = ""; });
  await page.click('#dims button[type="submit"]');
  await page.waitForFunction(() => /graphs shown/.test(document.getElementById("status").textContent), null, { timeout: 60000 });
  const shown = await page.evaluate(() =>
    Object.fromEntries([...document.querySelectorAll("#fusions tbody tr[data-op]")].map((r) => [r.dataset.op, Number(r.dataset.count)])));
  assert.deepEqual(shown, cliR.fusions);
  assert.ok(shown.Attention > 0 && shown.EmbedLayerNormalization > 0, JSON.stringify(shown));
  assert.equal(await page.textContent("#parity"), "outputs match");
});

test("a ViT runs on the page's WebGPU backend: its Conv and fused kernels compile in Chromium", async () => {
  const vit = join(root, "tests/models/zoo/vit_tiny.onnx");
  await dropFiles([{ name: "vit_tiny.onnx", path: vit }]);
  await page.waitForFunction(() => /vit_tiny.*graphs shown|Could not/.test(document.getElementById("status").textContent), null, { timeout: 60000 });
  assert.equal(await page.textContent("#parity"), "outputs match");
  await page.fill("#runs", "3");
  await page.selectOption("#backend", "webgpu");
  await page.evaluate(() => { document.getElementById("bench-result").textContent = ""; });
  await page.click("#bench-run");
  await page.waitForFunction(() => /speedup|failed/.test(document.getElementById("bench-result").textContent), null, { timeout: 120000 });
  const gpu = await page.textContent("#bench-result");
  // The CLI's webgpu graphs at the page's dims: the same dispatches (ViT's patch Conv is one).
  const dims = await page.evaluate(() =>
    Object.fromEntries([...document.querySelectorAll("#dim-fields input")].map((i) => [i.dataset.dim, Number(i.value)])));
  const args = ["bench", vit, "--backend", "webgpu", "--json", "--runs", "1", "--warmup", "0"];
  for (const [k, v] of Object.entries(dims)) args.push("--dim", `${k}=${v}`);
  const cliB = JSON.parse(execFileSync(cli, args, { encoding: "utf8" }));
  assert.match(gpu, /^webgpu backend, 3 .*speedup [\d.]+x\. /, gpu);
  assert.ok(gpu.includes(`${cliB.dispatches.original} → ${cliB.dispatches.optimized} dispatches per run`), `${gpu}\nCLI: ${JSON.stringify(cliB.dispatches)}`);
  console.log(`# vit_tiny: ${gpu}`);
  await page.selectOption("#backend", "reference");
});

test("nothing left the machine: every request went to the page's own server", () => {
  const origin = new URL(url).origin;
  const foreign = requests.filter((r) => !r.startsWith(origin + "/") && !r.startsWith("blob:") && !r.startsWith("data:"));
  assert.deepEqual(foreign, []);
  // Cross-origin isolated, Chromium runs the threads build (pkg/wasm_url.js), and only it.
  assert.ok(requests.some((r) => r.endsWith("/demo/fuselab/threads/fuselab_bg.wasm")), requests.join("\n"));
  assert.ok(!requests.some((r) => /fuselab_bg(\.relaxed)?\.wasm$/.test(r) && !r.includes("/threads/")), requests.join("\n"));
  assert.deepEqual(errors, []);
});

test("served without COOP/COEP, the page runs the relaxed-SIMD build on one thread", async () => {
  const plain = await serve({ dir: dist, port: 0, base: "/", isolated: false });
  const p = await browser.newPage();
  const seen = [];
  p.on("request", (r) => seen.push(r.url()));
  try {
    await within(30000, "page load", p.goto(plain.url));
    await p.waitForFunction(() => document.getElementById("status").textContent.startsWith("Ready"), null, { timeout: 30000 });
    assert.equal(await p.evaluate(() => self.crossOriginIsolated), false);
    await p.waitForFunction(() => document.getElementById("threads-note").textContent !== "", null, { timeout: 10000 });
    assert.match(await p.textContent("#threads-note"), /runs on one thread here: wasm threads need a cross-origin isolated page/);
    assert.equal(await p.locator("#threads option").count(), 1);
    assert.ok(seen.some((r) => r.endsWith("/fuselab_bg.relaxed.wasm")), seen.join("\n"));
    assert.ok(!seen.some((r) => r.includes("/threads/")), seen.join("\n"));
    await dropFilesOn(p, [{ name: "gpt2_tiny.onnx", path: join(root, "tests/models/gpt2_tiny.onnx") }]);
    await p.waitForFunction(() => /graphs shown|Could not/.test(document.getElementById("status").textContent), null, { timeout: 60000 });
    await p.fill("#runs", "3");
    await p.click("#bench-run");
    await p.waitForFunction(() => /speedup|failed/.test(document.getElementById("bench-result").textContent), null, { timeout: 60000 });
    assert.match(await p.textContent("#bench-result"), /^reference backend, 1 thread, 3 interleaved runs/);
  } finally {
    await p.close();
    plain.server.close();
  }
});
