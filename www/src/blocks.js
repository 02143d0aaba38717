// Repeated blocks (transformer layers) found by node name, and a graph view with some of them
// collapsed to one box each. Exporters name a layer's nodes under a path segment that ends in
// its index: "/transformer/h.3/attn/MatMul", "/model/layers.3/mlp/Mul", "/encoder/layer.3/…",
// "/blocks_3/…"; fused nodes keep the name they were made from. A block is the name up to that
// segment; blocks repeat when two or more share the path with only the index changed.

/** The block of a node name ("/transformer/h.3"), or null: the first path segment before the
 *  last that ends in `.N` or `_N`. */
export function blockKey(name) {
  const parts = (name ?? "").split("/");
  for (let i = 0; i < parts.length - 1; i++) {
    if (/^[A-Za-z][\w-]*?[._]\d+$/.test(parts[i])) return parts.slice(0, i + 1).join("/");
  }
  return null;
}

const family = (key) => key.replace(/\d+$/, "#");

/**
 * The repeated blocks of a graph view: block key → node ids, for keys whose family (the key with
 * its index replaced) has two or more blocks. Only op nodes belong to blocks.
 */
export function repeatedBlocks(view) {
  const members = new Map();
  for (const n of view.nodes) {
    const key = n.kind === "op" ? blockKey(n.name) : null;
    if (key) members.set(key, [...(members.get(key) ?? []), n.id]);
  }
  const perFamily = new Map();
  for (const key of members.keys()) perFamily.set(family(key), (perFamily.get(family(key)) ?? 0) + 1);
  for (const key of [...members.keys()]) if (perFamily.get(family(key)) < 2) members.delete(key);
  return members;
}

/**
 * `view` with each block of `keys` (from `repeatedBlocks`) replaced by one node of kind "block"
 * (name: the key, `members`: its node count, `holds_fused`: whether a fused node is in it). Edges
 * between two blocks or a block and a node are kept once; edges inside a block go.
 */
export function collapseBlocks(view, blocks, keys) {
  const into = new Map();
  const groups = [];
  for (const key of keys) {
    const ids = blocks.get(key);
    if (!ids) continue;
    const id = `block:${key}`;
    for (const m of ids) into.set(m, id);
    const inner = new Set(ids);
    groups.push({
      id,
      kind: "block",
      name: key,
      op_type: "",
      domain: "",
      members: ids.length,
      holds_fused: view.nodes.some((n) => inner.has(n.id) && n.fused),
      fused: null,
      fused_into: null,
      inputs: [],
      outputs: [],
      attributes: {},
    });
  }
  if (groups.length === 0) return view;
  const nodes = [...view.nodes.filter((n) => !into.has(n.id)), ...groups];
  const seen = new Set();
  const edges = [];
  for (const e of view.edges) {
    const from = into.get(e.from) ?? e.from;
    const to = into.get(e.to) ?? e.to;
    const pair = `${from}\u0000${to}`;
    if (from === to || seen.has(pair)) continue;
    seen.add(pair);
    edges.push({ ...e, from, to });
  }
  return { ...view, nodes, edges };
}
