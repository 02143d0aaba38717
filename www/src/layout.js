// Lays out a GraphView (src/view.rs) with dagre: top to bottom, one box per operator but
// Constant, a pill per graph input and output. Runs in the worker; the page only draws it.
import { Graph, layout } from "@dagrejs/dagre";

const CHAR_W = 7.2; // px per character of the 12px monospace label
const PAD = 18;

export function label(n) {
  if (n.kind === "op") return n.op_type;
  const p = n.kind === "input" ? n.outputs[0] : n.inputs[0];
  const shape = p?.shape ? `[${p.shape.join(",")}]` : "";
  return `${n.name}${shape ? " " + shape : ""}`;
}

/**
 * Constant nodes (a third of a typical torch export) are not drawn as boxes: their values show
 * as constant inputs of the nodes that read them (the inspector says so). That keeps the graph
 * readable and halves the layout time of gpt2_tiny.
 */
export function layoutGraph(full) {
  const hidden = new Set(full.nodes.filter((n) => n.kind === "op" && n.op_type === "Constant").map((n) => n.id));
  const constantValues = new Set();
  for (const n of full.nodes) if (hidden.has(n.id)) for (const o of n.outputs) constantValues.add(o.name);
  const view = {
    nodes: full.nodes
      .filter((n) => !hidden.has(n.id))
      .map((n) => ({
        ...n,
        inputs: n.inputs.map((p) => (constantValues.has(p.name) ? { ...p, constant: true, from_constant_node: true } : p)),
      })),
    edges: full.edges.filter((e) => !hidden.has(e.from) && !hidden.has(e.to)),
  };
  const g = new Graph({ multigraph: true });
  g.setGraph({ rankdir: "TB", nodesep: 14, ranksep: 26, edgesep: 6, marginx: 10, marginy: 10 });
  g.setDefaultEdgeLabel(() => ({}));
  const sized = view.nodes.map((n) => {
    const text = label(n);
    const w = Math.max(56, Math.ceil(text.length * CHAR_W) + PAD);
    const h = n.kind === "op" ? 30 : 24;
    g.setNode(n.id, { width: w, height: h });
    return { ...n, label: text, w, h };
  });
  view.edges.forEach((e, i) => g.setEdge(e.from, e.to, {}, String(i)));
  layout(g);
  const nodes = sized.map((n) => {
    const p = g.node(n.id);
    return { ...n, x: p.x, y: p.y };
  });
  const edges = view.edges.map((e, i) => ({
    ...e,
    points: g.edge({ v: e.from, w: e.to, name: String(i) }).points.map((p) => [p.x, p.y]),
  }));
  const { width, height } = g.graph();
  return { width, height, nodes, edges, constants_hidden: hidden.size };
}
