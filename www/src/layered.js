// A layered (Sugiyama-style) layout written for big graphs: every step is a loop over arrays,
// nothing recurses, so 10,000+ nodes lay out without a stack limit. Steps: topological order
// (Kahn; edges that close a cycle are drawn but do not rank), longest-path ranks with sources
// and chains pulled down next to their first reader, dummy vertices on edges spanning a few ranks, a few
// barycenter sweeps to reduce crossings, then x by isotonic regression towards the neighbours'
// mean (closest placement that keeps order and spacing), y by rank.
//
// layered(sizes, edges, options, progress): sizes [{ w, h }], edges [[from, to]] as indices.
// Returns { x, y (centres), width, height, routes: one [[x, y], ...] per edge }.

const DEFAULTS = { nodesep: 14, ranksep: 26, margin: 10, dummyWidth: 6, maxSpan: 30, sweeps: 4, passes: 4 };

export function layered(sizes, edgeList, options = {}, progress = () => {}) {
  const o = { ...DEFAULTS, ...options };
  const n = sizes.length;
  const out = Array.from({ length: n }, () => []);
  const indeg = new Int32Array(n);
  for (const [a, b] of edgeList) {
    if (a === b) continue;
    out[a].push(b);
    indeg[b]++;
  }
  // Topological order; what a cycle leaves behind goes last, in index order.
  const order = [];
  const queue = [];
  for (let v = 0; v < n; v++) if (indeg[v] === 0) queue.push(v);
  for (let qi = 0; qi < queue.length; qi++) {
    const v = queue[qi];
    order.push(v);
    for (const w of out[v]) if (--indeg[w] === 0) queue.push(w);
  }
  const topo = new Int32Array(n).fill(-1);
  order.forEach((v, i) => (topo[v] = i));
  for (let v = 0; v < n; v++) if (topo[v] < 0) topo[v] = order.push(v) - 1;
  const forward = (a, b) => topo[a] < topo[b];

  // Longest-path ranks, then sources (graph inputs, lone Shape chains) moved down to sit just
  // above their first reader instead of at the top of the drawing.
  const rank = new Int32Array(n);
  const preds = new Int32Array(n);
  for (const v of order)
    for (const w of out[v])
      if (forward(v, w)) {
        rank[w] = Math.max(rank[w], rank[v] + 1);
        preds[w]++;
      }
  // Then, from the bottom up, a node with at least as many edges out as in moves down to just
  // above its first reader (its edges get no longer in total): graph inputs, weights' Identity
  // nodes and Shape chains sit next to where they are read instead of in one wide top row.
  for (let i = order.length - 1; i >= 0; i--) {
    const v = order[i];
    let lo = Infinity;
    let outs = 0;
    for (const w of out[v]) if (forward(v, w)) (lo = Math.min(lo, rank[w])), outs++;
    if (outs >= preds[v] && lo !== Infinity && lo - 1 > rank[v]) rank[v] = lo - 1;
  }
  progress("ranked");

  // Vertices: the nodes, then dummies. An edge spanning up to maxSpan ranks gets a dummy per
  // rank it crosses (it then takes part in ordering and is drawn around nodes); a longer one
  // (a mask every layer reads) and a cycle's back edge are drawn straight.
  const vr = Array.from(rank);
  const vw = sizes.map((s) => s.w);
  const chains = new Map(); // "a>b" → vertex chain from a to b
  const adjUp = []; // per vertex: neighbours one rank above
  const adjDown = [];
  const link = (a, b) => {
    (adjDown[a] ??= []).push(b);
    (adjUp[b] ??= []).push(a);
  };
  for (const [a, b] of edgeList) {
    const key = `${a}>${b}`;
    if (a === b || chains.has(key) || !forward(a, b)) continue;
    const span = vr[b] - vr[a];
    if (span > o.maxSpan) continue;
    const chain = [a];
    for (let r = vr[a] + 1; r < vr[b]; r++) {
      const d = vr.push(r) - 1;
      vw.push(o.dummyWidth);
      chain.push(d);
    }
    chain.push(b);
    for (let i = 1; i < chain.length; i++) link(chain[i - 1], chain[i]);
    chains.set(key, chain);
  }
  const V = vr.length;
  let ranks = 0;
  for (let v = 0; v < V; v++) ranks = Math.max(ranks, vr[v] + 1);
  const layers = Array.from({ length: ranks }, () => []);
  // Initial order within a rank: the topological order (dummies after their source).
  const key0 = new Float64Array(V);
  for (let v = 0; v < n; v++) key0[v] = topo[v];
  for (const chain of chains.values()) for (let i = 1; i < chain.length - 1; i++) key0[chain[i]] = topo[chain[0]] + i / chain.length;
  const all = Array.from({ length: V }, (_, v) => v).sort((a, b) => key0[a] - key0[b]);
  for (const v of all) layers[vr[v]].push(v);
  const pos = new Float64Array(V);
  const setPos = (layer) => layer.forEach((v, i) => (pos[v] = i));
  layers.forEach(setPos);

  // Crossing reduction: barycenter sweeps, down then up.
  const bary = new Float64Array(V);
  const sweep = (r, adj) => {
    const layer = layers[r];
    for (const v of layer) {
      const nb = adj[v];
      if (!nb || nb.length === 0) {
        bary[v] = pos[v];
        continue;
      }
      let s = 0;
      for (const u of nb) s += pos[u];
      bary[v] = s / nb.length;
    }
    layer.sort((a, b) => bary[a] - bary[b] || pos[a] - pos[b]);
    setPos(layer);
  };
  for (let s = 0; s < o.sweeps; s++) {
    if (s % 2 === 0) for (let r = 1; r < ranks; r++) sweep(r, adjUp);
    else for (let r = ranks - 2; r >= 0; r--) sweep(r, adjDown);
    progress(`ordered (${s + 1}/${o.sweeps})`);
  }

  // x: pack, then move each rank towards its neighbours' mean, alternating down and up.
  const x = new Float64Array(V);
  for (const layer of layers) {
    let cx = 0;
    for (const v of layer) {
      x[v] = cx + vw[v] / 2;
      cx += vw[v] + o.nodesep;
    }
  }
  // A vertex wants the x of a dummy neighbour (long edges, residual streams, stay straight),
  // else the median of its neighbours' x (the mean would drift a rank sideways per layer).
  const xs = [];
  const wanted = (v, nb, nb2) => {
    xs.length = 0;
    for (const list of [nb, nb2])
      for (const u of list ?? []) {
        if (u >= n && v < n) return x[u];
        xs.push(x[u]);
      }
    if (xs.length === 0) return x[v];
    xs.sort((a, b) => a - b);
    const m = xs.length >> 1;
    return xs.length % 2 ? xs[m] : (xs[m - 1] + xs[m]) / 2;
  };
  const place = (layer, adj, adj2) => {
    const want = layer.map((v) => wanted(v, adj[v], adj2?.[v]));
    isotonicPlace(layer, want, vw, o.nodesep, x, (v) => (v >= n ? 16 : 1));
  };
  for (let p = 0; p < o.passes; p++) {
    if (p % 2 === 0) for (let r = 1; r < ranks; r++) place(layers[r], adjUp);
    else for (let r = ranks - 2; r >= 0; r--) place(layers[r], adjDown);
  }
  if (o.finalBoth) for (let r = 0; r < ranks; r++) place(layers[r], adjUp, adjDown);
  deskew(layers, x, n, o.deskewWindow ?? 15);
  progress("placed");

  // y by rank; shift everything to start at the margin.
  const rankY = new Float64Array(ranks);
  let cy = o.margin;
  for (let r = 0; r < ranks; r++) {
    let h = 0;
    for (const v of layers[r]) if (v < n) h = Math.max(h, sizes[v].h);
    rankY[r] = cy + h / 2;
    cy += h + o.ranksep;
  }
  let minX = Infinity;
  let maxX = -Infinity;
  for (let v = 0; v < V; v++) {
    minX = Math.min(minX, x[v] - vw[v] / 2);
    maxX = Math.max(maxX, x[v] + vw[v] / 2);
  }
  if (V === 0) minX = maxX = 0;
  // Edges without a dummy chain run down a lane left of the drawing (a bus, not lines through
  // the nodes): out of the source, along the lane, into the target from above.
  const long = edgeList.some(([a, b]) => a !== b && !chains.has(`${a}>${b}`));
  const lane = o.margin;
  const dx = o.margin - minX + (long ? 3 * o.nodesep : 0);
  const X = (v) => x[v] + dx;
  const bottom = (v) => [X(v), rankY[vr[v]] + sizes[v].h / 2];
  const top = (v) => [X(v), rankY[vr[v]] - sizes[v].h / 2];
  const gap = o.ranksep / 2;
  const routes = edgeList.map(([a, b]) => {
    const chain = chains.get(`${a}>${b}`);
    if (chain) return [bottom(a), ...chain.slice(1, -1).map((d) => [X(d), rankY[vr[d]]]), top(b)];
    if (a === b) return [bottom(a), [X(a) + sizes[a].w / 2 + 12, rankY[vr[a]]], top(a)];
    const [s, t] = [bottom(a), top(b)];
    if (t[1] < s[1]) return [s, [s[0], s[1] + gap], [lane, s[1] + gap], [lane, t[1] - gap], [t[0], t[1] - gap], t];
    return [s, [lane, s[1] + gap], [lane, t[1] - gap], t];
  });
  return {
    x: Array.from({ length: n }, (_, v) => X(v)),
    y: Array.from({ length: n }, (_, v) => rankY[vr[v]]),
    width: maxX - minX + 2 * o.margin + (long ? 3 * o.nodesep : 0),
    height: cy - o.ranksep + o.margin,
    routes,
  };
}

/**
 * Placement towards neighbours lets a deep graph lean (each block ends a little to one side of
 * where it began: 100 layers make a diagonal many screens wide). Shifting each rank by the
 * moving average (over ±window ranks) of the ranks' median node x takes that slow lean out and
 * leaves order, spacing and the bends within a block as they were.
 */
function deskew(layers, x, n, window) {
  const R = layers.length;
  const centre = new Float64Array(R);
  let last = 0;
  for (let r = 0; r < R; r++) {
    const xs = layers[r].filter((v) => v < n).map((v) => x[v]).sort((a, b) => a - b);
    centre[r] = last = xs.length ? xs[xs.length >> 1] : last;
  }
  const prefix = new Float64Array(R + 1);
  for (let r = 0; r < R; r++) prefix[r + 1] = prefix[r] + centre[r];
  for (let r = 0; r < R; r++) {
    const lo = Math.max(0, r - window);
    const hi = Math.min(R, r + window + 1);
    const shift = (prefix[hi] - prefix[lo]) / (hi - lo);
    for (const v of layers[r]) x[v] -= shift;
  }
}

/**
 * Sets x of `layer` (in order) as close as possible (least squares) to `want` while keeping
 * neighbours at least their half-widths plus `sep` apart: with offsets o_i of a tight packing,
 * y_i = x_i - o_i must not decrease, which is isotonic regression of want_i - o_i (pool
 * adjacent violators, linear time). `weight(v)`: how much v's wish counts (dummies count more,
 * so long edges stay straight and the nodes make room around them).
 */
export function isotonicPlace(layer, want, widths, sep, x, weight = () => 1) {
  const m = layer.length;
  const off = new Float64Array(m);
  for (let i = 1; i < m; i++) off[i] = off[i - 1] + (widths[layer[i - 1]] + widths[layer[i]]) / 2 + sep;
  const blockSum = [];
  const blockWt = [];
  const blockLen = [];
  for (let i = 0; i < m; i++) {
    const wt = weight(layer[i]);
    blockSum.push((want[i] - off[i]) * wt);
    blockWt.push(wt);
    blockLen.push(1);
    while (blockSum.length > 1) {
      const k = blockSum.length - 1;
      if (blockSum[k - 1] / blockWt[k - 1] <= blockSum[k] / blockWt[k]) break;
      blockSum[k - 1] += blockSum[k];
      blockWt[k - 1] += blockWt[k];
      blockLen[k - 1] += blockLen[k];
      blockSum.pop();
      blockWt.pop();
      blockLen.pop();
    }
  }
  let i = 0;
  for (let b = 0; b < blockSum.length; b++) {
    const mean = blockSum[b] / blockWt[b];
    for (let j = 0; j < blockLen[b]; j++, i++) x[layer[i]] = mean + off[i];
  }
}
