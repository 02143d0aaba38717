// Per-run times of the original and the fused graph as an SVG scatter with their medians (as
// the wasm bench computed them) drawn as lines.
const NS = "http://www.w3.org/2000/svg";

function el(name, attrs, parent) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  parent.append(e);
  return e;
}

export function drawChart(svg, original, fused, medians) {
  const W = 780, H = 260, L = 84, R = 190, T = 14, B = 34;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const n = Math.max(original.length, fused.length);
  // Clip the y range at the 98th percentile so one stall does not flatten the chart.
  const all = [...original, ...fused].sort((a, b) => a - b);
  const top = all[Math.min(all.length - 1, Math.floor(all.length * 0.98))] * 1.1 || 1;
  const x = (i) => L + ((W - L - R) * (n > 1 ? i / (n - 1) : 0.5));
  const y = (v) => T + (H - T - B) * (1 - Math.min(v, top) / top);
  el("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "axis" }, svg);
  el("line", { x1: L, y1: T, x2: L, y2: y(0), class: "axis" }, svg);
  for (const f of [0, 0.5, 1]) {
    const t = el("text", { x: L - 6, y: y(top * f) + 4, "text-anchor": "end", class: "tick" }, svg);
    t.textContent = `${(top * f).toPrecision(2)} ms`;
  }
  const xl = el("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle", class: "tick" }, svg);
  xl.textContent = `run (1–${n})`;
  // The two median labels sit at their lines, moved apart when the medians are close (one
  // line of text, 14 px, between them) and kept inside the chart.
  const ly = medians.map((m) => y(m) + 4);
  const [hi, lo] = ly[0] <= ly[1] ? [0, 1] : [1, 0];
  if (ly[lo] - ly[hi] < 14) {
    const mid = (ly[0] + ly[1]) / 2;
    ly[hi] = mid - 7;
    ly[lo] = mid + 7;
  }
  const shift = Math.max(0, T + 8 - ly[hi]) - Math.max(0, ly[lo] - (H - B));
  for (const [series, m, cls, label, i] of [[original, medians[0], "original", "original", 0], [fused, medians[1], "fused", "fused", 1]]) {
    const g = el("g", { class: `series ${cls}` }, svg);
    series.forEach((v, k) => el("circle", { cx: x(k), cy: y(v), r: 2.2 }, g));
    el("line", { x1: L, y1: y(m), x2: W - R, y2: y(m), class: "median" }, g);
    const t = el("text", { x: W - R + 6, y: ly[i] + shift, class: "legend" }, g);
    t.textContent = `${label} median ${m.toPrecision(3)} ms`;
  }
}
