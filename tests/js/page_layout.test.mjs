// The page's layered layout (www/src/layered.js) and text formatting (www/src/format.js), in
// node: no overlaps within a rank, every edge drawn downwards, 10,000 nodes without a stack
// overflow, short float text.
import { test } from "node:test";
import assert from "node:assert/strict";
import { layered, isotonicPlace } from "../../www/src/layered.js";
import { layoutGraph } from "../../www/src/layout.js";
import { parityFailure, partialParity, shortNumbers } from "../../www/src/format.js";
import { syntheticGraph } from "../../benches/page_graphs.mjs";

function checkLayout(g, l) {
  const byY = new Map();
  for (const n of l.nodes) byY.set(n.y, [...(byY.get(n.y) ?? []), n]);
  for (const row of byY.values()) {
    row.sort((a, b) => a.x - b.x);
    for (let i = 1; i < row.length; i++)
      assert.ok(row[i].x - row[i].w / 2 >= row[i - 1].x + row[i - 1].w / 2 + 1, `overlap: ${row[i - 1].name} / ${row[i].name}`);
  }
  for (const n of l.nodes) assert.ok(n.x - n.w / 2 >= 0 && n.x + n.w / 2 <= l.width + 1e-6 && n.y + n.h / 2 <= l.height + 1e-6, n.name);
  const at = new Map(l.nodes.map((n) => [n.id, n]));
  for (const e of l.edges) {
    assert.ok(at.get(e.from).y < at.get(e.to).y, `edge ${e.from} → ${e.to} goes up`);
    for (let i = 1; i < e.points.length; i++) assert.ok(e.points[i][1] > e.points[i - 1][1], "route not downwards");
  }
  assert.equal(l.edges.length, g.edges.length);
}

test("a transformer-like graph: no overlaps, edges point down, the stack stays narrow", () => {
  const g = syntheticGraph(600);
  const l = layoutGraph(g);
  checkLayout(g, l);
  // 22 layers one under the other: no sideways drift (the width of a few blocks, not 22).
  assert.ok(l.width < 1500, `width ${l.width}`);
});

test("10,000 nodes lay out without recursion limits", () => {
  const g = syntheticGraph(10000);
  const l = layoutGraph(g);
  assert.equal(l.nodes.length, g.nodes.length);
  assert.ok(l.nodes.every((n) => Number.isFinite(n.x) && Number.isFinite(n.y)));
});

test("a cycle, a self loop and duplicate edges still lay out", () => {
  const sizes = [0, 1, 2, 3].map(() => ({ w: 40, h: 20 }));
  const l = layered(sizes, [[0, 1], [1, 2], [2, 1], [2, 3], [3, 3], [0, 1]]);
  assert.equal(l.routes.length, 6);
  assert.ok(l.y[0] < l.y[1] && l.y[1] < l.y[2]);
});

test("isotonic placement keeps order and spacing, as close to the wish as it can", () => {
  const x = [];
  isotonicPlace([0, 1, 2], [10, 10, 100], [20, 20, 20], 5, x);
  assert.deepEqual(x, [-2.5, 22.5, 100]);
});

test("float attributes in short form; int64 values as they are", () => {
  assert.equal(shortNumbers("-340282350000000000000000000000000000000"), "-3.4028235e38");
  assert.equal(shortNumbers("[0.000000000001, 9223372036854775807, 0.25]"), "[1e-12, 9223372036854775807, 0.25]");
  assert.equal(shortNumbers("0.12345678901"), "0.12345679");
});

test("parity failures in the page's words, naming the ops", () => {
  const w = parityFailure("parity check: original model: unsupported op Foo (domain 'com.x') at node 'n1'; also missing: Bar (ai.onnx) (use --no-parity to skip the check)");
  assert.deepEqual(w.ops, ["Foo (com.x)", "Bar"]);
  assert.doesNotMatch(w.summary + w.detail, /no-parity/);
});

test("partial parity in the page's words: the ops without kernels, what was compared and what not", () => {
  const parity = {
    outputs: [{ name: "logits" }],
    nodes: [{ node: "a" }, { node: "b" }],
    partial: { missing_ops: ["Foo (com.x)", "IsNaN (ai.onnx)"], unchecked_outputs: ["m", "t"], unchecked_nodes: ["c"] },
  };
  const w = partialParity(parity);
  assert.equal(w.summary, "the reference backend has no kernel for Foo (com.x), IsNaN");
  assert.equal(w.detail, "Compared 1 output and 2 fused nodes that do not need them; not compared: 2 outputs (m, t) and 1 fused node.");
});

test("repeated blocks by node name: the layer's path, and only where two or more repeat", async () => {
  const { blockKey, repeatedBlocks, collapseBlocks } = await import("../../www/src/blocks.js");
  assert.equal(blockKey("/transformer/h.3/attn/MatMul"), "/transformer/h.3");
  assert.equal(blockKey("/model/layers.10/mlp/act_fn/Mul_1"), "/model/layers.10");
  assert.equal(blockKey("/encoder/layer.0/attention/self/MatMul"), "/encoder/layer.0");
  assert.equal(blockKey("/m/transformer/h.1/ln_1/Add_1_output_0_LayerNormalization_SkipLayerNormalization"), "/m/transformer/h.1");
  assert.equal(blockKey("Add_3"), null);
  assert.equal(blockKey("/final/Identity"), null);
  const op = (id, name, fused = null) => ({ id, kind: "op", name, fused });
  const view = {
    nodes: [{ id: "in:x", kind: "input", name: "x" }, op("n1", "/h.0/a"), op("n2", "/h.0/b"), op("n3", "/h.1/a", {}),
      op("n4", "/ln_f/c"), op("n5", "/stem_1/d")],
    edges: [["in:x", "n1"], ["n1", "n2"], ["n2", "n3"], ["in:x", "n2"], ["n3", "n4"], ["n4", "n5"]].map(([from, to]) => ({ from, to, value: "v" })),
  };
  const blocks = repeatedBlocks(view);
  assert.deepEqual([...blocks], [["/h.0", ["n1", "n2"]], ["/h.1", ["n3"]]]); // "/stem_1" does not repeat
  const c = collapseBlocks(view, blocks, ["/h.0", "/h.1"]);
  assert.deepEqual(c.nodes.map((n) => [n.id, n.kind, n.members ?? null, n.holds_fused ?? null]),
    [["in:x", "input", null, null], ["n4", "op", null, null], ["n5", "op", null, null],
      ["block:/h.0", "block", 2, false], ["block:/h.1", "block", 1, true]]);
  assert.deepEqual(c.edges.map((e) => `${e.from}>${e.to}`), ["in:x>block:/h.0", "block:/h.0>block:/h.1", "block:/h.1>n4", "n4>n5"]);
});
