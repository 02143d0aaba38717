// Navigation over the two drawings (graph.js views): what corresponds to what across the sides,
// selection and hover linked both ways, views kept in step, search with next/previous, fit and
// reset, the op-type legend, the fused-op list as links.
const $ = (id) => document.getElementById(id);

/**
 * Links `before` and `after` (views). A node of one side corresponds to: the fused node that
 * replaced it and the other nodes it replaced (before → after), the nodes a fused node replaced
 * (after → before), else the node of the same name and op type (inputs and outputs by name).
 * `inspect(node)` shows a node.
 */
export function linkViews(before, after, inspect) {
  const sides = { before, after };
  const other = (side) => (side === "before" ? "after" : "before");
  const replacedBy = new Map(); // fused node name → before indices
  before.graph.nodes.forEach((n, i) => {
    if (n.fused_into) replacedBy.set(n.fused_into, [...(replacedBy.get(n.fused_into) ?? []), i]);
  });
  const same = (from, to, i) => {
    const n = sides[from].graph.nodes[i];
    const j = sides[to].byId.get(n.id);
    if (n.kind !== "op") return j === undefined ? [] : [j];
    return (sides[to].byName.get(n.name) ?? []).filter((k) => sides[to].graph.nodes[k].op_type === n.op_type);
  };
  /** { before: [indices], after: [indices] } that go with node i of `side`. */
  const group = (side, i) => {
    const n = sides[side].graph.nodes[i];
    const fusedName = side === "after" ? (n.fused ? n.name : null) : n.fused_into;
    if (fusedName)
      return { before: replacedBy.get(fusedName) ?? [], after: after.byName.get(fusedName) ?? [] };
    return { [side]: [i], [other(side)]: same(side, other(side), i) };
  };

  const select = (side, i, { zoom = false } = {}) => {
    const grp = group(side, i);
    const o = other(side);
    sides[side].setState({ selected: i, lit: new Set(grp[side]) });
    sides[o].setState({ selected: grp[o][0] ?? -1, lit: new Set(grp[o]) });
    if (zoom) sides[side].show([i], { zoom: true });
    if (grp[o].length) sides[o].show(grp[o], { zoom });
    inspect(sides[side].graph.nodes[i]);
  };
  const hover = (side, i) => {
    for (const s of ["before", "after"]) sides[s].setState({ lit: new Set() });
    if (i < 0) return;
    const grp = group(side, i);
    if (grp.before.length + grp.after.length < 2) return;
    before.setState({ lit: new Set(grp.before) });
    after.setState({ lit: new Set(grp.after) });
  };
  // After the user pans or zooms one side, the other shows what corresponds to the node
  // nearest the middle of the view (when "link views" is on).
  let timer = 0;
  const moved = (side) => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (!$("sync").checked) return;
      const o = other(side);
      const i = sides[side].nearCentre((k) => group(side, k)[o].length > 0);
      if (i >= 0) sides[o].show(group(side, i)[o]);
    }, 120);
  };
  return { select, hover, moved, group };
}

/** The search box: matches by name or op type on both sides, next/previous, match count. */
export function setupSearch(views, link) {
  let matches = [];
  let at = -1;
  const show = () => {
    const n = matches.length;
    const q = $("search").value.trim();
    const per = (s) => matches.filter((m) => m.side === s).length;
    const where = `(${per("before")} before, ${per("after")} after)`;
    $("search-count").textContent = q === "" ? "" : n === 0 ? "no match"
      : at < 0 ? `${n} match${n > 1 ? "es" : ""} ${where}` : `${at + 1} of ${n} ${where}`;
    $("search-prev").disabled = $("search-next").disabled = n === 0;
  };
  const run = () => {
    const q = $("search").value.trim().toLowerCase();
    matches = [];
    for (const side of ["before", "after"]) {
      const v = views()[side];
      if (!v) continue;
      const hit = new Set();
      v.graph.nodes.forEach((n, i) => {
        if (q && (n.name.toLowerCase().includes(q) || n.op_type.toLowerCase() === q)) {
          hit.add(i);
          matches.push({ side, i, y: n.y });
        }
      });
      v.setState({ matches: hit });
    }
    at = -1;
    show();
  };
  const go = (step) => {
    if (matches.length === 0) return;
    at = (at + step + matches.length) % matches.length;
    const m = matches[at];
    link().select(m.side, m.i, { zoom: true });
    show();
  };
  $("search").addEventListener("input", run);
  $("search").addEventListener("keydown", (e) => {
    if (e.key === "Enter") (e.preventDefault(), go(e.shiftKey ? -1 : 1));
  });
  $("search-next").addEventListener("click", () => go(1));
  $("search-prev").addEventListener("click", () => go(-1));
  return {
    run,
    find(text) {
      $("search").value = text;
      run();
      go(1);
    },
  };
}

/** The legend: a swatch, op type and count per coloured op type; a click searches for it. */
export function showLegend(colours, search) {
  const box = $("legend");
  box.replaceChildren(
    ...[...colours].map(([op, { colour, count }]) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "swatch";
      b.title = `find ${op} nodes`;
      const s = document.createElement("span");
      s.style.background = colour;
      b.append(s, `${op} ${count}`);
      b.addEventListener("click", () => search.find(op));
      return b;
    }),
  );
}
