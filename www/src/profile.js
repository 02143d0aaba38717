// The profile panel: what `fuselab profile --json` reports, for the original and the optimized
// graph side by side — time by op type (a bar chart and a table), and the fusion candidates (op
// sequences, the rule that covers each, the estimated saving and the intermediate bytes). Every
// figure comes from the wasm's Model.profile (src/profile/, docs/profile.md); this file only
// draws. Tables sort by any column (click or Enter on its header); choosing a candidate row
// calls onPick(side, occurrences) so the page can light its nodes in that side's graph.
const NS = "http://www.w3.org/2000/svg";

const fmtMs = (ms) => (ms >= 100 ? ms.toFixed(0) : ms >= 1 ? ms.toFixed(2) : ms.toPrecision(2));
const fmtPct = (share) => `${(100 * share).toFixed(1)}%`;
function fmtBytes(b) {
  if (b >= 1 << 20) return `${(b / (1 << 20)).toFixed(1)} MiB`;
  if (b >= 1 << 10) return `${(b / (1 << 10)).toFixed(1)} KiB`;
  return `${b} B`;
}

// A table whose columns sort on a click (or Enter/Space) on their header, numbers descending
// first, text ascending first. cols: [{ label, key(row) -> sort key, text(row) -> cell text }].
function sortableTable(cols, rows, { caption, onRow, empty } = {}) {
  const table = document.createElement("table");
  table.className = "sortable";
  if (caption) table.createCaption().textContent = caption;
  const head = table.createTHead().insertRow();
  const body = table.createTBody();
  let order = { col: -1, dir: 1 };
  const fill = () => {
    body.replaceChildren();
    if (rows.length === 0 && empty) {
      const td = body.insertRow().insertCell();
      td.colSpan = cols.length;
      td.className = "empty";
      td.textContent = empty;
    }
    const sorted = order.col < 0 ? rows : [...rows].sort((a, b) => {
      const [x, y] = [cols[order.col].key(a), cols[order.col].key(b)];
      return order.dir * (typeof x === "number" ? x - y : String(x).localeCompare(String(y)));
    });
    for (const r of sorted) {
      const tr = body.insertRow();
      for (const c of cols) tr.insertCell().textContent = c.text(r);
      if (onRow) {
        tr.tabIndex = 0;
        tr.className = "pickable";
        const pick = () => {
          for (const o of body.querySelectorAll("tr.picked")) o.classList.remove("picked");
          tr.classList.add("picked");
          onRow(r);
        };
        tr.addEventListener("click", pick);
        tr.addEventListener("keydown", (e) => (e.key === "Enter" || e.key === " ") && (e.preventDefault(), pick()));
      }
    }
  };
  cols.forEach((c, i) => {
    const th = document.createElement("th");
    th.textContent = c.label;
    th.tabIndex = 0;
    th.setAttribute("aria-sort", "none");
    const sort = () => {
      const first = typeof c.key(rows[0] ?? {}) === "number" ? -1 : 1;
      order = { col: i, dir: order.col === i ? -order.dir : first };
      for (const h of head.cells) h.setAttribute("aria-sort", "none");
      th.setAttribute("aria-sort", order.dir > 0 ? "ascending" : "descending");
      fill();
    };
    th.addEventListener("click", sort);
    th.addEventListener("keydown", (e) => (e.key === "Enter" || e.key === " ") && (e.preventDefault(), sort()));
    head.append(th);
  });
  fill();
  return table;
}

// Horizontal bars of time per op type (the `top` slowest), labels left of the bars, values right.
function barChart(ops, top = 12) {
  const shown = ops.slice().sort((a, b) => b.ms - a.ms).slice(0, top);
  const rowH = 18, L = 190, W = 520, R = 90;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "profile-bars");
  svg.setAttribute("viewBox", `0 0 ${W} ${rowH * shown.length + 6}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "time by op type");
  const max = Math.max(...shown.map((o) => o.ms), 1e-9);
  shown.forEach((o, i) => {
    const y = 3 + i * rowH;
    const add = (name, attrs, text) => {
      const e = document.createElementNS(NS, name);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (text !== undefined) e.textContent = text;
      svg.append(e);
      return e;
    };
    // Long op names (com.microsoft:SkipSimplifiedLayerNormalization) are cut, whole in the title.
    const label = o.op.length > 28 ? `${o.op.slice(0, 27)}…` : o.op;
    add("text", { x: L - 6, y: y + 12, "text-anchor": "end", class: "tick" }, label);
    const bar = add("rect", { x: L, y: y + 2, height: rowH - 5, width: Math.max(1, ((W - L - R) * o.ms) / max), class: "bar" });
    const t = document.createElementNS(NS, "title");
    t.textContent = `${o.op}: ${o.count} nodes, ${fmtMs(o.ms)} ms (${fmtPct(o.share)})`;
    bar.append(t);
    add("text", { x: L + ((W - L - R) * o.ms) / max + 4, y: y + 12, class: "tick" }, `${fmtMs(o.ms)} ms`);
  });
  return svg;
}

// Fills `box` with one side's profile: a summary line, the bar chart, the op table and the
// candidate table. side: "before" | "after".
export function drawProfile(box, side, p, onPick) {
  box.replaceChildren();
  const head = document.createElement("p");
  head.className = "profile-summary";
  head.textContent =
    `${side === "before" ? "original" : "optimized"}: ${p.nodes} nodes, ${fmtMs(p.total_ms)} ms per run ` +
    `(mean of ${p.runs} runs, ${p.timing})` + (p.caveat ? ` — ${p.caveat}` : "");
  const ops = sortableTable(
    [
      { label: "op type", key: (o) => o.op, text: (o) => o.op },
      { label: "nodes", key: (o) => o.count, text: (o) => String(o.count) },
      { label: "ms", key: (o) => o.ms, text: (o) => fmtMs(o.ms) },
      { label: "share", key: (o) => o.share, text: (o) => fmtPct(o.share) },
    ],
    p.ops,
    { caption: "time by op type" },
  );
  ops.classList.add("profile-ops");
  const cands = sortableTable(
    [
      { label: "sequence", key: (c) => c.ops.join(" → "), text: (c) => c.ops.join(" → ") },
      { label: "rule", key: (c) => c.rule ?? c.opt_in_rule ?? "", text: (c) => c.rule ?? (c.opt_in_rule ? `${c.opt_in_rule} (opt-in)` : "none") },
      { label: "count", key: (c) => c.count, text: (c) => String(c.count) },
      { label: "saving ms", key: (c) => c.estimated_saving_ms, text: (c) => fmtMs(c.estimated_saving_ms) },
      { label: "intermediates", key: (c) => c.intermediate_bytes, text: (c) => fmtBytes(c.intermediate_bytes) },
    ],
    p.candidates,
    {
      caption: `fusion candidates (${p.candidates.length}; choose one to light its nodes)`,
      onRow: (c) => onPick(side, c.nodes),
      empty: "none: no chain of 2 to 4 nodes passes an intermediate only inside itself",
    },
  );
  cands.classList.add("profile-candidates");
  box.append(head, barChart(p.ops), ops, cands);
}
