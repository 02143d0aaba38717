// End to end, issue 18: the page with models it has never seen, built here by
// tests/js/make_models.py (a transformer with ops no backend runs, a 3,000-node stack), the
// navigation (search, linked sides, keyboard), and the fixes (dims, bench binding, chart labels,
// favicon, attribute text). Screenshots go to target/e2e/. Needs `npm run build`,
// target/release/fuselab and the Python venv with onnx (.venv; PYTHON= overrides).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { cliReport, dropFiles, makeModel, openPage, outDir, root, statusAfter } from "./page_helpers.mjs";

let page, errors, close;
const shot = (name) => page.screenshot({ path: join(outDir, name), fullPage: true });
const fusions = () => page.evaluate(() =>
  Object.fromEntries([...document.querySelectorAll("#fusions tbody tr[data-op]")].map((r) => [r.dataset.op, Number(r.dataset.count)])));

before(async () => {
  ({ page, errors, close } = await openPage());
});
after(async () => close?.());

test("before a model: no dims form, and the page has a favicon", async () => {
  assert.equal(await page.isVisible("#dims"), false);
  assert.equal(await page.isVisible("#report"), false);
  const href = await page.getAttribute('link[rel="icon"]', "href");
  const icon = await page.evaluate(async (h) => {
    const r = await fetch(new URL(h, document.baseURI));
    return { status: r.status, type: r.headers.get("content-type"), text: await r.text() };
  }, href);
  assert.equal(icon.status, 200);
  assert.match(icon.type, /image\/svg\+xml/);
  assert.match(icon.text, /^<svg/);
});

test("keyboard only: Tab reaches the file picker, Space opens it, the model loads", async () => {
  await page.evaluate(() => document.activeElement?.blur());
  let tabs = 0;
  while ((await page.evaluate(() => document.activeElement?.id)) !== "file") {
    assert.ok(++tabs <= 12, "the file picker is not reachable with Tab");
    await page.keyboard.press("Tab");
  }
  const [chooser] = await Promise.all([page.waitForEvent("filechooser"), page.keyboard.press("Space")]);
  await chooser.setFiles(join(root, "examples/eyelike_add.onnx"));
  assert.match(await statusAfter(page, "graphs shown"), /^eyelike_add\.onnx: .*graphs shown/);
  assert.equal(await page.isVisible("#dims"), true);
  // The graph itself takes keys: + zooms in.
  const width = () => page.evaluate(() => Number(document.getElementById("graph-before").getAttribute("viewBox").split(" ")[2]));
  const w0 = await width();
  await page.focus("#graph-before");
  await page.keyboard.press("+");
  await page.waitForFunction((w) => Number(document.getElementById("graph-before").getAttribute("viewBox").split(" ")[2]) < w, w0);
  await shot("keyboard-load.png");
});

test("a model whose every output needs an op the reference backend lacks still shows both graphs, the fusions and a 'parity not checked' card", async () => {
  const model = makeModel(["unsupported_input", join(root, "tests/models/gpt2_tiny.onnx")], "gpt2_custom_input.onnx");
  await dropFiles(page, [{ name: "gpt2_custom_input.onnx", path: model }]);
  const text = await statusAfter(page, "graphs shown");
  assert.match(text, /graphs shown.*parity not checked: the reference backend has no kernel for Scramble \(com\.example\), Unscramble \(com\.example\)/, text);
  assert.equal(await page.evaluate(() => document.getElementById("status").classList.contains("error")), false);
  const cliR = cliReport(model, { batch: 1, seq: 8 }, ["--no-parity"]);
  assert.deepEqual(await fusions(), cliR.fusions);
  assert.ok(Object.keys(cliR.fusions).length > 0, "the passes fuse after the custom ops");
  assert.equal(Number(await page.textContent("#nodes-after")), cliR.nodes_after);
  assert.ok((await page.locator("#graph-before .node.op").count()) > 300);
  assert.ok(await page.locator('#graph-after .node[data-name="scramble"]').count(), "the custom op is drawn");
  assert.equal(await page.textContent("#parity"), "parity not checked");
  assert.match(await page.textContent("#parity-detail"), /no kernel for Scramble \(com\.example\), Unscramble \(com\.example\)\. It cannot run the original model/);
  assert.equal(await page.isDisabled("#dl-model"), false);
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#dl-model")]);
  assert.equal(download.suggestedFilename(), "gpt2_custom_input.fused.onnx");
  await shot("parity-not-checked.png");
  // "skip parity": the card says so, and the next optimization does not try.
  await page.click("#skip-parity");
  assert.match(await page.textContent("#parity-detail"), /skipped by choice/);
  assert.equal(await page.isChecked("#parity-on"), false);
  await page.evaluate(() => { document.getElementById("status").textContent = ""; });
  await page.click('#dims button[type="submit"]');
  assert.match(await statusAfter(page, "graphs shown"), /graphs shown .*; parity skipped\.$/);
  await page.check("#parity-on");
});

test("partial parity: with the custom ops after the logits, the logits and fused nodes are compared and the rest named", async () => {
  const model = makeModel(["unsupported", join(root, "tests/models/gpt2_tiny.onnx")], "gpt2_custom_ops.onnx");
  await dropFiles(page, [{ name: "gpt2_custom_ops.onnx", path: model }]);
  const text = await statusAfter(page, "graphs shown");
  assert.match(text, /graphs shown.*parity partially checked in \d+ ms \(the reference backend has no kernel for Scramble \(com\.example\), Unscramble \(com\.example\)\)/, text);
  const cliR = cliReport(model, { batch: 1, seq: 8 });
  assert.deepEqual(await fusions(), cliR.fusions);
  const p = cliR.parity;
  assert.equal(p.ok, true);
  assert.deepEqual(p.partial.missing_ops, ["Scramble (com.example)", "Unscramble (com.example)"]);
  assert.deepEqual(p.partial.unchecked_outputs, ["unscrambled"]);
  assert.deepEqual(p.partial.unchecked_nodes, []);
  assert.equal(p.outputs.length, 1);
  assert.ok(p.nodes.length > 0);
  assert.equal(await page.textContent("#parity"), "outputs match (partial)");
  const detail = await page.textContent("#parity-detail");
  assert.match(detail, new RegExp(`Compared 1 output and ${p.nodes.length} fused nodes that do not need them; not compared: 1 output \\(unscrambled\\)\\.`), detail);
  assert.equal(Number(await page.textContent("#node-parity-count")), p.nodes.length);
  await shot("parity-partial.png");
});

test("dims: a cleared or zero size is a message; a sequence past GPT-2's 128 positions names the table's size", async () => {
  await page.click('[data-sample="gpt2_tiny.onnx"]');
  await statusAfter(page, "^gpt2_tiny.*graphs shown");
  const seq = '#dim-fields input[data-dim="seq"]';
  for (const [value, said] of [["", "it is empty"], ["0", "got 0"]]) {
    await page.fill(seq, value);
    await page.click('#dims button[type="submit"]');
    const text = await page.textContent("#status");
    assert.match(text, new RegExp(`^Input size seq must be a whole number from 1 to 1048576 \\(${said}\\)`), text);
    assert.doesNotMatch(text, /Reshape/);
  }
  await page.fill(seq, "512");
  await page.evaluate(() => { document.getElementById("status").textContent = ""; });
  await page.click('#dims button[type="submit"]');
  const text = await statusAfter(page, "graphs shown");
  assert.match(text, /parity not checked: an input size is past a table of the model \(index 128, but the table has 128 entries\)/, text);
  assert.match(await page.textContent("#parity-detail"), /a position table of 128 entries takes a sequence of at most 128/);
  assert.ok((await page.locator("#graph-after .node.fused").count()) > 0);
  await shot("seq-past-table.png");
  await page.fill(seq, "8");
  await page.evaluate(() => { document.getElementById("status").textContent = ""; });
  await page.click('#dims button[type="submit"]');
  assert.match(await statusAfter(page, "graphs shown"), /parity checked/);
  assert.equal(await page.textContent("#parity"), "outputs match");
});

test("float attributes print short: the fused Attention's mask_filter_value", async () => {
  await page.locator('#graph-after .node.fused:has(text:text-is("Attention"))').first().dispatchEvent("click");
  const rows = await page.evaluate(() => {
    const dts = [...document.querySelectorAll("#inspector dt")];
    return Object.fromEntries(dts.map((dt) => [dt.textContent, dt.nextElementSibling.textContent]));
  });
  assert.equal(rows["attribute mask_filter_value"], "-3.4028235e38");
  assert.equal(rows["attribute scale"], "0.25");
});

test("the fused-op list and the legend lead to the nodes", async () => {
  // A fused op's row selects its first node after fusion and what it replaced before.
  await page.click('#fusions tr[data-op="SkipLayerNormalization"] button');
  // (Classes change on the next animation frame.)
  await page.waitForFunction(() =>
    document.querySelector("#graph-after .node.selected text")?.textContent === "SkipLayerNormalization", null, { timeout: 5000 });
  const replaced = await page.locator("#graph-before .node.lit.replaced").count();
  assert.ok(replaced >= 2, `lit replaced nodes before: ${replaced}`);
  assert.match(await page.textContent("#inspector"), /fused by skip_layer_norm/);
  // A legend entry finds that op type on both sides.
  await page.click('#legend button:has-text("Gather")');
  assert.equal(await page.inputValue("#search"), "Gather");
  assert.match(await page.textContent("#search-count"), /^1 of \d+ \(\d+ before, \d+ after\)$/);
  await page.waitForFunction(() => document.querySelectorAll("#graph-before .node.match").length > 1, null, { timeout: 5000 });
  await page.fill("#search", "");
  await page.dispatchEvent("#search", "input");
});

test("the benchmark result stays with the model it measured; chart labels do not clip or overlap", async () => {
  await page.fill("#runs", "400");
  await page.click("#bench-run");
  await page.waitForFunction(() => Number(document.getElementById("bench-progress").value) > 0, null, { timeout: 60000 });
  await page.click('[data-sample="eyelike_add.onnx"]');
  await statusAfter(page, "^eyelike_add.*graphs shown");
  await page.waitForFunction(() => document.getElementById("bench-result").dataset.stale === "true", null, { timeout: 180000 });
  const stale = await page.textContent("#bench-result");
  assert.match(stale, /^A benchmark of gpt2_tiny\.onnx \(default rules, batch=1, seq=8\) finished after it was replaced/, stale);
  assert.equal(await page.isVisible("#bench-chart"), false);
  await page.fill("#runs", "20");
  await page.click("#bench-run");
  await page.waitForFunction(() => /speedup|failed/.test(document.getElementById("bench-result").textContent), null, { timeout: 120000 });
  assert.match(await page.textContent("#bench-result"), /speedup [\d.]+x\. .*Measured: eyelike_add\.onnx \(default rules, N=64\)\.$/);
  const boxes = await page.evaluate(() => {
    const svg = document.getElementById("bench-chart");
    const [, , w, h] = svg.getAttribute("viewBox").split(" ").map(Number);
    const b = [...svg.querySelectorAll("text")].map((t) => {
      const r = t.getBBox();
      return { text: t.textContent, x0: r.x, y0: r.y, x1: r.x + r.width, y1: r.y + r.height };
    });
    return { w, h, b };
  });
  for (const t of boxes.b) assert.ok(t.x0 >= 0 && t.y0 >= 0 && t.x1 <= boxes.w && t.y1 <= boxes.h, `clipped: ${JSON.stringify(t)}`);
  const [a, b] = boxes.b.filter((t) => /median/.test(t.text));
  assert.ok(a.y1 <= b.y0 || b.y1 <= a.y0, `median labels overlap: ${JSON.stringify([a, b])}`);
  await page.locator("#bench-chart").screenshot({ path: join(outDir, "bench-chart.png") });
});

test("a 3,000-node graph lays out and draws; search finds a node by name; the two sides stay linked", async () => {
  const model = makeModel(["layers", "3000"], "layers3k.onnx");
  await dropFiles(page, [{ name: "layers3k.onnx", path: model }]);
  const text = await statusAfter(page, "^layers3k.*graphs shown", 180000);
  assert.doesNotMatch(text, /failed/);
  const t = await page.evaluate(() => window.fuselabTiming);
  const nodes = Number(await page.textContent("#nodes-before"));
  assert.ok(nodes >= 3000, `${nodes} nodes`);
  console.log(`# ${nodes}-node stack: optimize ${t.optimize_ms.toFixed(0)} ms, layout ${t.layout_before_ms.toFixed(0)} ms before ` +
    `+ ${t.layout_after_ms.toFixed(0)} ms after, drop to graphs ${t.drop_to_graphs_ms.toFixed(0)} ms`);
  const mode = (side) => page.getAttribute(`#graph-${side}`, "data-mode");
  assert.equal(await mode("before"), "visible");
  assert.ok((await page.locator("#graph-before .node").count()) < 700, "only what is in view is in the DOM");
  await page.click("#fit");
  await page.waitForFunction(() => document.getElementById("graph-before").dataset.mode === "canvas");
  await shot("big-fit.png");
  // Far out a click zooms in where it lands.
  const w0 = (await page.evaluate(() => window.fuselabViews().before.viewBox)).w;
  await page.locator("#graph-before").click({ position: { x: 150, y: 200 } });
  assert.ok((await page.evaluate(() => window.fuselabViews().before.viewBox)).w < w0 / 2);
  await page.click("#reset");
  await page.waitForFunction(() => document.getElementById("graph-before").dataset.mode === "visible");

  // Search by name: the node is selected and in view on its side, its counterpart on the other.
  const name = await page.evaluate(() => window.fuselabViews().before.graph.nodes.find((n) => n.name.startsWith("/layers.60/Softmax")).name);
  await page.fill("#search", name);
  assert.match(await page.textContent("#search-count"), /^2 matches \(1 before, 1 after\)$/);
  await page.press("#search", "Enter");
  assert.match(await page.textContent("#search-count"), /^1 of 2/);
  for (const side of ["before", "after"]) {
    const sel = page.locator(`#graph-${side} .node.selected`);
    await sel.waitFor();
    assert.equal(await sel.getAttribute("data-name"), name);
    assert.ok(await inView(side, name), `${side}: ${name} is not in view`);
  }
  await shot("big-search.png");

  // Panning one side brings the corresponding nodes into view on the other.
  await page.focus("#graph-before");
  for (let i = 0; i < 25; i++) await page.keyboard.press("ArrowDown");
  await page.waitForTimeout(400);
  const centre = await page.evaluate(() => {
    const { before, after } = window.fuselabViews();
    const vb = before.viewBox;
    const [cx, cy] = [vb.x + vb.w / 2, vb.y + vb.h / 2];
    const near = before.graph.nodes.filter((n) => n.kind === "op" && !n.fused_into && after.byName.has(n.name))
      .sort((a, b) => Math.hypot(a.x - cx, a.y - cy) - Math.hypot(b.x - cx, b.y - cy))[0];
    return { name: near.name, y: near.y, y0: vb.y };
  });
  assert.ok(centre.y0 > 3000, "the before side moved");
  assert.ok(await inView("after", centre.name), `after side does not show ${centre.name}`);
  await shot("big-linked.png");
  assert.deepEqual(errors, []);
});

test("repeated blocks collapse to one box each, and a click expands one", async () => {
  // The 3,000-node stack of the test before: 125 blocks of 24 nodes ("/layers.N/…"), then an
  // Identity outside them.
  assert.equal(await page.isVisible("#collapse-label"), true);
  const counts = (side) => page.evaluate((side) => {
    const ns = window.fuselabViews()[side].graph.nodes;
    const blocks = ns.filter((n) => n.kind === "block");
    return { blocks: blocks.length, ops: ns.filter((n) => n.kind === "op").length, members: blocks.reduce((a, n) => a + n.members, 0) };
  }, side);
  const blockCount = (side) => page.evaluate((side) => window.fuselabViews()[side].graph.nodes.filter((n) => n.kind === "block").length, side);
  await page.check("#collapse-blocks");
  await page.waitForFunction(() => ["before", "after"].every((s) => window.fuselabViews()[s].graph.nodes.some((n) => n.kind === "block")));
  assert.deepEqual(await counts("before"), { blocks: 125, ops: 1, members: 3000 });
  const after = await counts("after");
  assert.equal(after.blocks, 125);
  assert.equal(after.ops + after.members, Number(await page.textContent("#nodes-after")));
  assert.match(await page.textContent("#caption-before"), /125 repeated blocks collapsed/);
  const box = page.locator('#graph-before .node.block[data-name="/layers.3"]');
  assert.equal(await box.locator("text").textContent(), "layers.3 · 24 nodes");
  await shot("blocks-collapsed.png");
  // A click expands that block only; the other side keeps its blocks.
  await box.dispatchEvent("click");
  await page.waitForFunction(() => window.fuselabViews().before.graph.nodes.filter((n) => n.kind === "block").length === 124);
  assert.deepEqual(await counts("before"), { blocks: 124, ops: 25, members: 2976 });
  assert.equal(await blockCount("after"), 125);
  assert.ok(await page.locator('#graph-before .node.op[data-name^="/layers.3/"]').count() > 0);
  await shot("blocks-one-expanded.png");
  await page.uncheck("#collapse-blocks");
  await page.waitForFunction(() => ["before", "after"].every((s) => !window.fuselabViews()[s].graph.nodes.some((n) => n.kind === "block")));
  assert.deepEqual(errors, []);
});

/** Whether the node named `name` lies within the view of `side`. */
function inView(side, name) {
  return page.evaluate(([side, name]) => {
    const v = window.fuselabViews()[side];
    const vb = v.viewBox;
    const n = v.graph.nodes[v.byName.get(name)[0]];
    return n.x >= vb.x && n.x <= vb.x + vb.w && n.y >= vb.y && n.y <= vb.y + vb.h;
  }, [side, name]);
}

test("a decode step: the form leaves out the total the model computes (past + seq), so parity runs at consistent sizes", async () => {
  const model = join(root, "tests/models/zoo/gpt2_tiny_decode.onnx");
  await dropFiles(page, [{ name: "gpt2_tiny_decode.onnx", path: model }]);
  const text = await statusAfter(page, "^gpt2_tiny_decode.*graphs shown");
  const fields = await page.evaluate(() => [...document.querySelectorAll("#dim-fields input")].map((i) => i.dataset.dim));
  assert.deepEqual(fields.sort(), ["batch", "past", "seq"]);
  assert.match(await page.textContent("#dim-fields"), /total: the sum the model computes/);
  assert.match(text, /parity checked/, text);
  assert.equal(await page.textContent("#parity"), "outputs match");
  assert.deepEqual(await fusions(), cliReport(model, { batch: 1, seq: 8, past: 8 }).fusions);
  assert.ok((await fusions()).MultiHeadAttention > 0, "the cached attention fuses in the page");
});
