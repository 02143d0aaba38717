// Lays out a GraphView (src/view.rs) with the layered layout of layered.js: top to bottom, one
// box per operator but Constant, a pill per graph input and output. Runs in the worker; the page
// only draws it.
import { layered } from "./layered.js";
import { collapseBlocks, repeatedBlocks } from "./blocks.js";

const CHAR_W = 7.2; // px per character of the 12px monospace label
const PAD = 18;

export function label(n) {
  if (n.kind === "op") return n.op_type;
  if (n.kind === "block") return `${n.name.split("/").pop()} · ${n.members} nodes${n.holds_fused ? " ★" : ""}`;
  const p = n.kind === "input" ? n.outputs[0] : n.inputs[0];
  const shape = p?.shape ? `[${p.shape.join(",")}]` : "";
  return `${n.name}${shape ? " " + shape : ""}`;
}

/**
 * Constant nodes (a third of a typical torch export) are not drawn as boxes: their values show
 * as constant inputs of the nodes that read them (the inspector says so). That keeps the graph
 * readable and the layout smaller. `progress(text)` hears each step.
 */
export function layoutGraph(view, progress = () => {}, collapsed = []) {
  // Repeated blocks: `collapsed` lists the keys drawn as one box each ("all": every one).
  const blocks = repeatedBlocks(view);
  const keys = collapsed === "all" ? [...blocks.keys()] : collapsed.filter((k) => blocks.has(k));
  const full = collapseBlocks(view, blocks, keys);
  const hidden = new Set(full.nodes.filter((n) => n.kind === "op" && n.op_type === "Constant").map((n) => n.id));
  const constantValues = new Set();
  for (const n of full.nodes) if (hidden.has(n.id)) for (const o of n.outputs) constantValues.add(o.name);
  const nodes = full.nodes
    .filter((n) => !hidden.has(n.id))
    .map((n) => {
      const text = label(n);
      return {
        ...n,
        inputs: n.inputs.map((p) => (constantValues.has(p.name) ? { ...p, constant: true, from_constant_node: true } : p)),
        label: text,
        w: Math.max(56, Math.ceil(text.length * CHAR_W) + PAD),
        h: n.kind === "op" ? 30 : n.kind === "block" ? 40 : 24,
      };
    });
  const index = new Map(nodes.map((n, i) => [n.id, i]));
  const edges = full.edges.filter((e) => index.has(e.from) && index.has(e.to));
  const l = layered(nodes, edges.map((e) => [index.get(e.from), index.get(e.to)]), {}, progress);
  nodes.forEach((n, i) => Object.assign(n, { x: l.x[i], y: l.y[i] }));
  return {
    width: l.width,
    height: l.height,
    nodes,
    edges: edges.map((e, i) => ({ ...e, points: l.routes[i] })),
    constants_hidden: hidden.size,
    blocks: [...blocks.keys()],
    collapsed: keys,
  };
}
