// Draws a laid-out graph (layout.js) in a figure: SVG boxes and edges, a canvas for the far view
// of big graphs, a minimap. Zoom (wheel, +/-, a click on the far view), pan (drag, arrows),
// fit (f), reset (0).
//
// A graph of up to SMALL boxes keeps every box in the DOM. A bigger one draws only what is in
// view: as SVG while at most DETAIL boxes are visible, else as plain rectangles on a canvas, so
// that 10,000 nodes zoomed out stay smooth.
const NS = "http://www.w3.org/2000/svg";
const SMALL = 1500;
const DETAIL = 700;

// Fill colours of the most common op types (the legend lists them); others are white.
const PALETTE = ["#dbe8ff", "#dff5e1", "#fff3bf", "#f3e1ff", "#ffe3e3", "#d3f9f3", "#ffe8cc",
  "#e9ecef", "#e5dbff", "#c5f6fa", "#fcc2d7", "#d8f5a2"];

/** Op type → fill colour for the most frequent op types over `graphs`, with their counts. */
export function opColours(graphs) {
  const count = new Map();
  for (const g of graphs) for (const n of g.nodes) if (n.kind === "op") count.set(n.op_type, (count.get(n.op_type) ?? 0) + 1);
  const top = [...count].sort((a, b) => b[1] - a[1]).slice(0, PALETTE.length);
  return new Map(top.map(([op, n], i) => [op, { colour: PALETTE[i], count: n }]));
}

function el(name, attrs = {}, parent) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  parent?.append(e);
  return e;
}

/**
 * `figure` holds svg.graph, canvas.far and canvas.minimap. `hooks`: { select(i), hover(i|-1),
 * moved() } — moved is called after the user pans or zooms (not after calls from code).
 */
export function createView(figure, g, colours, hooks) {
  const svg = figure.querySelector("svg.graph");
  const far = figure.querySelector("canvas.far");
  const mini = figure.querySelector("canvas.minimap");
  svg.replaceChildren();
  const marker = el("marker", { id: `${svg.id}-arrow`, viewBox: "0 0 8 8", refX: 8, refY: 4,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, el("defs", {}, svg));
  el("path", { d: "M0,0 L8,4 L0,8 z", class: "arrowhead" }, marker);
  const root = el("g", {}, svg);
  const edgeLayer = el("g", { class: "edges" }, root);
  const nodeLayer = el("g", { class: "nodes" }, root);
  const nodes = g.nodes;
  const small = nodes.length <= SMALL;
  const byName = new Map();
  nodes.forEach((n, i) => byName.set(n.name, [...(byName.get(n.name) ?? []), i]));
  const byId = new Map(nodes.map((n, i) => [n.id, i]));
  const edgeBox = g.edges.map((e) => {
    const xs = e.points.map((p) => p[0]);
    const ys = e.points.map((p) => p[1]);
    return [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)];
  });
  const state = { lit: new Set(), selected: -1, matches: new Set(), current: -1, picked: new Set() };
  const boxes = new Map();
  const paths = new Map();

  const fill = (n) => (n.kind === "op" ? colours.get(n.op_type)?.colour ?? "#fff" : "#e7f0ff");
  const classes = (i) => {
    const n = nodes[i];
    const c = ["node", n.kind];
    if (n.fused) c.push("fused");
    if (n.fused_into) c.push("replaced");
    if (state.lit.has(i)) c.push("lit");
    if (state.matches.has(i)) c.push("match");
    if (state.picked.has(i)) c.push("picked");
    if (i === state.selected) c.push("selected");
    return c.join(" ");
  };
  const box = (i) => {
    const n = nodes[i];
    const group = el("g", { class: classes(i), transform: `translate(${n.x - n.w / 2},${n.y - n.h / 2})` });
    group.dataset.name = n.name;
    group.dataset.id = n.id;
    el("rect", { width: n.w, height: n.h, rx: n.kind === "op" ? 4 : n.h / 2, style: `fill:${fill(n)}` }, group);
    el("text", { x: n.w / 2, y: n.h / 2 + 4, "text-anchor": "middle" }, group).textContent = n.label;
    el("title", {}, group).textContent = n.kind === "op" ? `${n.op_type} ${n.name}` :
      n.kind === "block" ? `${n.name}: ${n.members} nodes (click to expand)` : n.label;
    group.addEventListener("click", () => hooks.select(i));
    group.addEventListener("mouseenter", () => hooks.hover(i));
    group.addEventListener("mouseleave", () => hooks.hover(-1));
    return group;
  };
  const edgePath = (k) => {
    const e = g.edges[k];
    const d = e.points.map(([x, y], j) => `${j ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`).join("");
    const p = el("path", { d, class: "edge", "marker-end": `url(#${svg.id}-arrow)` });
    el("title", {}, p).textContent = e.value;
    return p;
  };
  // Keeps exactly the wanted indices in the DOM.
  const sync = (map, wanted, make, layer) => {
    for (const [k, e] of map) if (!wanted.has(k)) (e.remove(), map.delete(k));
    for (const k of wanted) if (!map.has(k)) map.set(k, layer.appendChild(make(k)));
  };

  const size = () => [svg.clientWidth || 600, svg.clientHeight || 700];
  // The middle of the drawing: the median node x (a wide row of inputs does not pull it aside).
  const xs = nodes.map((n) => n.x).sort((a, b) => a - b);
  const midX = xs.length ? xs[xs.length >> 1] : g.width / 2;
  const initial = () => {
    // Readable from the start: the whole width if it fits at 0.6 scale or more, else centred on
    // the middle; from the top.
    const [pw, ph] = size();
    const scale = Math.max(Math.min(pw / Math.max(g.width, 1), 1), 0.6);
    const w = pw / scale;
    const h = ph / scale;
    return { x: w >= g.width ? (g.width - w) / 2 : midX - w / 2, y: h > g.height ? (g.height - h) / 2 : 0, w, h };
  };
  let vb = initial();
  let frame = 0;
  const schedule = () => (frame ||= requestAnimationFrame(render));

  function render() {
    frame = 0;
    svg.setAttribute("viewBox", `${vb.x} ${vb.y} ${vb.w} ${vb.h}`);
    const m = vb.w * 0.1;
    const [x0, y0, x1, y1] = [vb.x - m, vb.y - m, vb.x + vb.w + m, vb.y + vb.h + m];
    const visible = new Set();
    nodes.forEach((n, i) => {
      if (small || (n.x + n.w / 2 > x0 && n.x - n.w / 2 < x1 && n.y + n.h / 2 > y0 && n.y - n.h / 2 < y1)) visible.add(i);
    });
    const canvasMode = !small && visible.size > DETAIL;
    const edgesIn = new Set();
    edgeBox.forEach(([a, b, c, d], k) => {
      if (small || (c > x0 && a < x1 && d > y0 && b < y1)) edgesIn.add(k);
    });
    sync(boxes, canvasMode ? new Set() : visible, box, nodeLayer);
    sync(paths, canvasMode ? new Set() : edgesIn, edgePath, edgeLayer);
    for (const [i, group] of boxes) group.setAttribute("class", classes(i));
    drawFar(canvasMode ? visible : null, edgesIn);
    drawMinimap();
    svg.dataset.mode = small ? "all" : canvasMode ? "canvas" : "visible";
    svg.dataset.drawn = String(visible.size);
  }

  function drawFar(visible, edgesIn) {
    const ctx = far.getContext("2d");
    const [pw, ph] = size();
    const dpr = window.devicePixelRatio || 1;
    if (far.width !== Math.round(pw * dpr) || far.height !== Math.round(ph * dpr))
      Object.assign(far, { width: Math.round(pw * dpr), height: Math.round(ph * dpr) });
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, far.width, far.height);
    far.hidden = !visible;
    if (!visible) return;
    const s = (pw / vb.w) * dpr;
    ctx.setTransform(s, 0, 0, s, -vb.x * s, -vb.y * s);
    ctx.lineWidth = 1 / s;
    ctx.strokeStyle = "#b0b7c3";
    ctx.beginPath();
    for (const k of edgesIn) {
      const pts = g.edges[k].points;
      ctx.moveTo(pts[0][0], pts[0][1]);
      for (let j = 1; j < pts.length; j++) ctx.lineTo(pts[j][0], pts[j][1]);
    }
    ctx.stroke();
    for (const i of visible) {
      const n = nodes[i];
      ctx.fillStyle = state.lit.has(i) || state.matches.has(i) || state.picked.has(i) ? "#ffd43b" : n.fused ? "#ffc9a3" : fill(n);
      ctx.fillRect(n.x - n.w / 2, n.y - n.h / 2, n.w, n.h);
      if (n.fused || n.fused_into || i === state.selected) {
        ctx.strokeStyle = i === state.selected ? "#000" : "#e8590c";
        ctx.lineWidth = (i === state.selected ? 3 : 1.5) / s;
        ctx.strokeRect(n.x - n.w / 2, n.y - n.h / 2, n.w, n.h);
      }
    }
  }

  // The minimap: every node as a dot (drawn once), the view as a rectangle.
  let miniImage = null;
  // Each axis scaled on its own: a tall, narrow transformer still fills the box.
  const sx = mini.width / Math.max(g.width, 1);
  const sy = mini.height / Math.max(g.height, 1);
  function drawMinimap() {
    const ctx = mini.getContext("2d");
    if (!miniImage) {
      ctx.clearRect(0, 0, mini.width, mini.height);
      for (const n of nodes) {
        ctx.fillStyle = n.fused ? "#e8590c" : n.fused_into ? "#f4a06b" : "#8a94a6";
        ctx.fillRect((n.x - n.w / 2) * sx, (n.y - n.h / 2) * sy, Math.max(n.w * sx, 1), Math.max(n.h * sy, 1));
      }
      miniImage = ctx.getImageData(0, 0, mini.width, mini.height);
    }
    ctx.putImageData(miniImage, 0, 0);
    ctx.strokeStyle = "#c92a2a";
    ctx.lineWidth = 1.5;
    ctx.strokeRect(vb.x * sx, vb.y * sy, Math.max(vb.w * sx, 3), Math.max(vb.h * sy, 3));
  }
  const miniMove = (e) => {
    const r = mini.getBoundingClientRect();
    centre(((e.clientX - r.left) * mini.width) / r.width / sx, ((e.clientY - r.top) * mini.height) / r.height / sy);
    hooks.moved();
  };
  mini.onpointerdown = (e) => {
    e.stopPropagation();
    mini.setPointerCapture(e.pointerId);
    miniMove(e);
    mini.onpointermove = miniMove;
  };
  mini.onpointerup = () => (mini.onpointermove = null);

  const centre = (cx, cy) => {
    vb = { ...vb, x: cx - vb.w / 2, y: cy - vb.h / 2 };
    schedule();
  };
  const zoomBy = (k, fx = 0.5, fy = 0.5) => {
    const w = Math.min(Math.max(vb.w * k, 20), Math.max(g.width, g.height) * 4);
    const h = (w * vb.h) / vb.w;
    vb = { x: vb.x + (vb.w - w) * fx, y: vb.y + (vb.h - h) * fy, w, h };
    schedule();
  };
  const userMoved = () => hooks.moved();

  svg.onwheel = (e) => {
    e.preventDefault();
    const r = svg.getBoundingClientRect();
    zoomBy(Math.exp(Math.sign(e.deltaY) * 0.15), (e.clientX - r.left) / r.width, (e.clientY - r.top) / r.height);
    userMoved();
  };
  let drag = null;
  svg.onpointerdown = (e) => {
    drag = { x: e.clientX, y: e.clientY, vb: { ...vb }, moved: false };
    svg.setPointerCapture(e.pointerId);
  };
  svg.onpointermove = (e) => {
    if (!drag) return;
    const r = svg.getBoundingClientRect();
    vb = { ...vb, x: drag.vb.x - ((e.clientX - drag.x) * vb.w) / r.width, y: drag.vb.y - ((e.clientY - drag.y) * vb.h) / r.height };
    drag.moved = true;
    schedule();
  };
  svg.onpointerup = svg.onpointercancel = (e) => {
    if (drag?.moved) userMoved();
    else if (drag && svg.dataset.mode === "canvas") {
      // Far out, boxes are pixels on the canvas: a click zooms in there instead of selecting.
      const r = svg.getBoundingClientRect();
      zoomBy(1 / 3, (e.clientX - r.left) / r.width, (e.clientY - r.top) / r.height);
      userMoved();
    }
    drag = null;
  };
  svg.onkeydown = (e) => {
    const step = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] }[e.key];
    if (step) (vb = { ...vb, x: vb.x + step[0] * vb.w * 0.15, y: vb.y + step[1] * vb.h * 0.15 }), schedule();
    else if (e.key === "+" || e.key === "=") zoomBy(1 / 1.25);
    else if (e.key === "-") zoomBy(1.25);
    else if (e.key === "f") view.fit();
    else if (e.key === "0") view.reset();
    else return;
    e.preventDefault();
    userMoved();
  };

  const view = {
    graph: g,
    byName,
    byId,
    fit() {
      const [pw, ph] = size();
      const s = Math.min(pw / Math.max(g.width, 1), ph / Math.max(g.height, 1));
      vb = { w: pw / s, h: ph / s, x: 0, y: 0 };
      vb.x = (g.width - vb.w) / 2;
      vb.y = (g.height - vb.h) / 2;
      schedule();
    },
    reset() {
      vb = initial();
      schedule();
    },
    /** Brings nodes into view: centred on them, zoomed out only as far as needed (or to 1:1). */
    show(indices, { zoom = false } = {}) {
      if (indices.length === 0) return;
      const ns = indices.map((i) => nodes[i]);
      const xa = Math.min(...ns.map((n) => n.x - n.w / 2));
      const xb = Math.max(...ns.map((n) => n.x + n.w / 2));
      const ya = Math.min(...ns.map((n) => n.y - n.h / 2));
      const yb = Math.max(...ns.map((n) => n.y + n.h / 2));
      const [pw, ph] = size();
      let s = pw / vb.w;
      if (zoom) s = 1;
      s = Math.min(s, (pw * 0.9) / (xb - xa + 40), (ph * 0.9) / (yb - ya + 40));
      vb = { w: pw / s, h: ph / s, x: 0, y: 0 };
      centre((xa + xb) / 2, (ya + yb) / 2);
    },
    /** The node nearest the middle of the view, among those `keep` accepts. */
    nearCentre(keep) {
      const cx = vb.x + vb.w / 2;
      const cy = vb.y + vb.h / 2;
      let best = -1;
      let bd = Infinity;
      nodes.forEach((n, i) => {
        const d = (n.x - cx) ** 2 + (n.y - cy) ** 2;
        if (d < bd && keep(i)) (bd = d), (best = i);
      });
      return best;
    },
    setState(patch) {
      Object.assign(state, patch);
      // Boxes already drawn change at once (hover feedback, and tests, need no frame); what
      // comes into view and the canvas follow on the next frame.
      for (const [i, group] of boxes) group.setAttribute("class", classes(i));
      schedule();
    },
    get state() {
      return state;
    },
    get viewBox() {
      return { ...vb };
    },
  };
  render();
  return view;
}
