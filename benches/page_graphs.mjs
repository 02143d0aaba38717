// Synthetic GraphViews (the shape src/view.rs gives the page) of transformer-like models of any
// size, for timing the page's layout: per layer the torch-export pattern of a pre-norm block
// (LayerNorm, Q/K/V MatMuls, a Shape→Gather→Unsqueeze→Concat side chain feeding three
// Reshapes, masked softmax attention, a GELU MLP, two residual Adds), with the attention mask, a
// graph input, read by every layer (the long edges real exports have).
const port = (name) => ({ name, dtype: "float32", shape: ["batch", "seq", "64"], constant: false });

export function syntheticGraph(target) {
  const nodes = [];
  const edges = [];
  let next = 0;
  const input = (name) => {
    nodes.push({ id: `in:${name}`, kind: "input", name, op_type: "", domain: "", attributes: {},
      inputs: [], outputs: [port(name)], fused: null, fused_into: null });
    return { id: `in:${name}`, out: name };
  };
  const op = (op_type, ins) => {
    const id = `n${next++}`;
    const out = `${op_type.toLowerCase()}_${id}`;
    nodes.push({ id, kind: "op", name: `/layers.${Math.floor(next / 27)}/${op_type}_${id}`, op_type,
      domain: "", attributes: {}, inputs: ins.map((i) => port(i.out)), outputs: [port(out)],
      fused: null, fused_into: null });
    for (const i of ins) edges.push({ from: i.id, to: id, value: i.out });
    return { id, out };
  };
  let h = input("hidden");
  const mask = input("attention_mask");
  while (nodes.length < target) {
    const ln = op("LayerNormalization", [h]);
    const [q, k, v] = [op("MatMul", [ln]), op("MatMul", [ln]), op("MatMul", [ln])];
    const shape = op("Concat", [op("Unsqueeze", [op("Gather", [op("Shape", [ln])])])]);
    const [qt, kt, vt] = [q, k, v].map((x) => op("Transpose", [op("Reshape", [x, shape])]));
    const scores = op("Add", [op("Div", [op("MatMul", [qt, kt])]), mask]);
    const ctx = op("MatMul", [op("Softmax", [scores]), vt]);
    const attn = op("Add", [op("MatMul", [op("Reshape", [op("Transpose", [ctx]), shape])])]);
    const r1 = op("Add", [attn, h]);
    const mlp = op("Add", [op("MatMul", [op("Gelu", [op("Add", [op("MatMul", [op("LayerNormalization", [r1])])])])])]);
    h = op("Add", [mlp, r1]);
  }
  nodes.push({ id: "out:logits", kind: "output", name: "logits", op_type: "", domain: "", attributes: {},
    inputs: [port(h.out)], outputs: [], fused: null, fused_into: null });
  edges.push({ from: h.id, to: "out:logits", value: h.out });
  return { nodes, edges };
}
