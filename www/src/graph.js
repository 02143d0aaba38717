// Draws a laid-out graph (layout.js) as SVG with zoom (wheel) and pan (drag), and links the
// before/after drawings: hovering a fused node lights up the nodes it replaced, and back.
const NS = "http://www.w3.org/2000/svg";

function el(name, attrs = {}, parent) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  parent?.append(e);
  return e;
}

export function drawGraph(svg, g, onClick) {
  svg.replaceChildren();
  const defs = el("defs", {}, svg);
  const marker = el("marker", { id: `${svg.id}-arrow`, viewBox: "0 0 8 8", refX: 8, refY: 4,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, defs);
  el("path", { d: "M0,0 L8,4 L0,8 z", class: "arrowhead" }, marker);
  const root = el("g", {}, svg);
  const edges = el("g", { class: "edges" }, root);
  for (const e of g.edges) {
    const d = e.points.map(([x, y], i) => `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`).join("");
    const path = el("path", { d, class: "edge", "marker-end": `url(#${svg.id}-arrow)` }, edges);
    el("title", {}, path).textContent = e.value;
  }
  const byName = new Map();
  const nodes = el("g", { class: "nodes" }, root);
  for (const n of g.nodes) {
    const cls = ["node", n.kind];
    if (n.fused) cls.push("fused");
    if (n.fused_into) cls.push("replaced");
    const group = el("g", { class: cls.join(" "), transform: `translate(${n.x - n.w / 2},${n.y - n.h / 2})` }, nodes);
    group.dataset.name = n.name;
    group.dataset.id = n.id;
    el("rect", { width: n.w, height: n.h, rx: n.kind === "op" ? 4 : n.h / 2 }, group);
    const t = el("text", { x: n.w / 2, y: n.h / 2 + 4, "text-anchor": "middle" }, group);
    t.textContent = n.label;
    el("title", {}, group).textContent = n.kind === "op" ? `${n.op_type} ${n.name}` : n.label;
    group.addEventListener("click", () => onClick(n));
    if (n.kind === "op") {
      if (!byName.has(n.name)) byName.set(n.name, []);
      byName.get(n.name).push({ node: n, group });
    }
  }
  const view = zoomPan(svg, g.width, g.height);
  return { svg, byName, view };
}

function zoomPan(svg, width, height) {
  const w0 = Math.max(width, 1);
  const h0 = Math.max(height, 1);
  // Start with the whole width in view, never magnified past 1:1, from the top of tall graphs.
  const pw = svg.clientWidth || 600;
  const ph = svg.clientHeight || 700;
  const scale = Math.min(pw / w0, 1);
  const w = pw / scale;
  const h = ph / scale;
  let vb = { x: (w0 - w) / 2, y: h > h0 ? (h0 - h) / 2 : 0, w, h };
  const apply = () => svg.setAttribute("viewBox", `${vb.x} ${vb.y} ${vb.w} ${vb.h}`);
  apply();
  svg.onwheel = (e) => {
    e.preventDefault();
    const r = svg.getBoundingClientRect();
    const fx = (e.clientX - r.left) / r.width;
    const fy = (e.clientY - r.top) / r.height;
    const k = Math.exp(Math.sign(e.deltaY) * 0.15);
    const w = Math.min(Math.max(vb.w * k, 20), Math.max(w0, h0) * 4);
    const h = (w * vb.h) / vb.w;
    vb = { x: vb.x + (vb.w - w) * fx, y: vb.y + (vb.h - h) * fy, w, h };
    apply();
  };
  let drag = null;
  svg.onpointerdown = (e) => {
    drag = { x: e.clientX, y: e.clientY, vb: { ...vb } };
    svg.setPointerCapture(e.pointerId);
  };
  svg.onpointermove = (e) => {
    if (!drag) return;
    const r = svg.getBoundingClientRect();
    vb.x = drag.vb.x - ((e.clientX - drag.x) * vb.w) / r.width;
    vb.y = drag.vb.y - ((e.clientY - drag.y) * vb.h) / r.height;
    apply();
  };
  svg.onpointerup = svg.onpointercancel = () => {
    drag = null;
  };
  return {
    // Moves the view, at its current zoom, so that (x, y) is in the middle.
    center(x, y) {
      vb = { ...vb, x: x - vb.w / 2, y: y - vb.h / 2 };
      apply();
    },
  };
}

// Marks the nodes of `occurrences` (lists of node names) as picked on one drawing, clearing the
// previous pick, and brings the first occurrence into view. Returns how many boxes were marked.
export function pickNodes(drawing, occurrences) {
  for (const g of drawing.svg.querySelectorAll(".node.picked")) g.classList.remove("picked");
  let marked = 0;
  for (const names of occurrences)
    for (const name of names)
      for (const { group } of drawing.byName.get(name) ?? []) {
        group.classList.add("picked");
        marked++;
      }
  const first = (occurrences[0] ?? []).flatMap((n) => drawing.byName.get(n) ?? []);
  if (first.length) {
    const x = first.reduce((s, e) => s + e.node.x, 0) / first.length;
    const y = first.reduce((s, e) => s + e.node.y, 0) / first.length;
    drawing.view.center(x, y);
  }
  return marked;
}

export function linkGraphs(before, after) {
  const lit = [];
  const light = (entries) => {
    for (const { group } of entries ?? []) {
      group.classList.add("lit");
      lit.push(group);
    }
  };
  const clear = () => {
    for (const g of lit.splice(0)) g.classList.remove("lit");
  };
  // Original nodes grouped by the fused node that replaced them.
  const replacedBy = new Map();
  for (const entries of before.byName.values())
    for (const e of entries)
      if (e.node.fused_into) {
        if (!replacedBy.has(e.node.fused_into)) replacedBy.set(e.node.fused_into, []);
        replacedBy.get(e.node.fused_into).push(e);
      }
  const hover = (fusedName) => {
    clear();
    light(after.byName.get(fusedName));
    light(replacedBy.get(fusedName));
  };
  for (const entries of after.byName.values())
    for (const { node, group } of entries)
      if (node.fused) {
        group.addEventListener("mouseenter", () => hover(node.name));
        group.addEventListener("mouseleave", clear);
      }
  for (const entries of replacedBy.values())
    for (const { node, group } of entries) {
      group.addEventListener("mouseenter", () => hover(node.fused_into));
      group.addEventListener("mouseleave", clear);
    }
}
