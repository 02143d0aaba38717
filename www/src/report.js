// The report section (node counts, parity card, fused ops, rejected candidates) and the node
// inspector.
import { partialParity, shortNumbers } from "./format.js";

const $ = (id) => document.getElementById(id);

/** `onFused(op)`: a fused op's row was clicked (show its nodes). */
export function showReport(report, onFused) {
  $("report").hidden = false;
  $("nodes-before").textContent = report.nodes_before;
  $("nodes-after").textContent = report.nodes_after;
  const body = $("fusions").querySelector("tbody");
  body.replaceChildren();
  const fusions = Object.entries(report.fusions);
  if (fusions.length === 0) {
    const tr = body.insertRow();
    tr.insertCell().textContent = "no fusion applied";
    tr.insertCell();
  }
  for (const [op, n] of fusions) {
    const tr = body.insertRow();
    tr.dataset.op = op;
    tr.dataset.count = n;
    const b = document.createElement("button");
    b.type = "button";
    b.className = "link";
    b.textContent = op;
    b.title = `show the ${op} nodes, one per click, and what each replaced`;
    b.addEventListener("click", () => onFused(op));
    tr.insertCell().append(b);
    tr.insertCell().textContent = n;
  }
  $("rejected-count").textContent = report.rejected.length;
  $("rejected").querySelector("ul").replaceChildren(
    ...report.rejected.map((r) => {
      const li = document.createElement("li");
      li.textContent = `${r.rule}: ${r.op_type} ${r.candidate} — ${r.reason}`;
      return li;
    }),
  );
}

/**
 * The parity card. `state`: "checking", "checked" (with `parity`), "skipped" (by choice) or
 * "failed" (with `why`: parityFailure's summary and detail).
 */
// Fused node name → the max |diff| of its own outputs against the original values of the same
// names (the parity check's `nodes`; null: a shape or type differs).
const nodeDiffs = new Map();
const fmtDiff = (d) => (d === null || d === undefined ? "shape or type differs" : d.toExponential(2));

function showNodeParity(nodes) {
  nodeDiffs.clear();
  for (const d of nodes ?? []) nodeDiffs.set(d.node, d.max_abs_diff);
  const box = $("node-parity");
  box.hidden = nodeDiffs.size === 0;
  $("node-parity-count").textContent = nodeDiffs.size;
  box.querySelector("ol").replaceChildren(
    ...(nodes ?? []).map((d) => {
      const li = document.createElement("li");
      li.textContent = `${d.node} (${d.op}): ${fmtDiff(d.max_abs_diff)}`;
      li.dataset.node = d.node;
      return li;
    }),
  );
}

export function showParity(state, { parity, why } = {}) {
  const big = $("parity");
  const detail = $("parity-detail");
  showNodeParity(state === "checked" ? parity.nodes : []);
  $("skip-parity").hidden = !(state === "checking" || state === "failed");
  $("parity-card").dataset.state = state;
  if (state === "checked") {
    const partial = parity.partial ? partialParity(parity) : null;
    big.textContent = (parity.ok ? "outputs match" : "OUTPUTS DIFFER") + (partial ? " (partial)" : "");
    big.className = `big ${parity.ok ? "ok" : "bad"}`;
    const worst = parity.nodes?.[0];
    detail.textContent = (partial ? `Partial: ${partial.summary}. ${partial.detail} ` : "") +
      (parity.resized ? `${parity.resized[0].toUpperCase()}${parity.resized.slice(1)}. ` : "") +
      `max |original − optimized| = ${parity.max_abs_diff.toExponential(2)} (tolerance ${parity.tolerance})` +
      (worst ? `; largest fused-node diff: ${worst.node} (${worst.op}) ${fmtDiff(worst.max_abs_diff)}` : "");
    return;
  }
  big.className = "big";
  if (state === "checking") {
    big.textContent = "checking parity…";
    detail.textContent = "running both graphs on the reference backend";
  } else if (state === "skipped") {
    big.textContent = "parity not checked";
    detail.textContent = "skipped by choice (tick “check parity” above and re-optimize to check it)";
  } else {
    big.textContent = "parity not checked";
    big.className = "big warn";
    detail.textContent = `because ${why.summary}. ${why.detail}`;
  }
}

export function clearReport() {
  $("report").hidden = true;
  $("fusions").querySelector("tbody").replaceChildren();
  $("rejected").querySelector("ul").replaceChildren();
  for (const id of ["nodes-before", "nodes-after", "parity"]) $(id).textContent = "–";
  showNodeParity([]);
  $("parity-detail").textContent = "";
}

export function inspect(node) {
  const box = $("inspector");
  box.replaceChildren();
  const h = document.createElement("h3");
  h.textContent = `${node.domain ? node.domain + "." : ""}${node.op_type || node.kind} ${node.name}`;
  box.append(h);
  const dl = document.createElement("dl");
  const row = (k, v) => {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    dl.append(dt, dd);
  };
  const port = (p) =>
    `${p.name}: ${p.dtype ?? "?"}${p.shape ? `[${p.shape.join(", ")}]` : "[?]"}` +
    (p.from_constant_node ? " (Constant node)" : p.constant ? " (initializer)" : "");
  for (const p of node.inputs) row("input", port(p));
  for (const p of node.outputs) row("output", port(p));
  for (const [k, v] of Object.entries(node.attributes)) row(`attribute ${k}`, shortNumbers(v));
  if (node.fused) row(`fused by ${node.fused.rule}, replacing`, node.fused.replaced.join(", "));
  if (node.fused_into) row("replaced by", node.fused_into);
  const diffOf = node.fused ? node.name : node.fused_into;
  if (nodeDiffs.has(diffOf)) row("parity of the fused node's outputs", `max |diff| = ${fmtDiff(nodeDiffs.get(diffOf))}`);
  box.append(dl);
}
