// The page: file drop / picker / samples → worker (wasm) → report, before/after graphs, bench.
// A model goes through stages, each with its own message on failure, none hiding what an
// earlier one produced: load, optimize (report, fusions, download), layout and drawing (each
// side), parity (its own card).
import { createView, opColours } from "./graph.js";
import { linkViews, setupSearch, showLegend } from "./nav.js";
import { clearReport, inspect, showParity, showReport } from "./report.js";
import { clearBench, setupBench } from "./bench.js";
import { parityFailure, partialParity } from "./format.js";
import { drawProfile } from "./profile.js";

const $ = (id) => document.getElementById(id);
const worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });

let nextId = 1;
const pending = new Map();
worker.onmessage = ({ data }) => {
  const p = pending.get(data.id);
  if (!p) return;
  if (data.progress) return p.onProgress?.(data.progress);
  pending.delete(data.id);
  data.ok ? p.resolve(data.result) : p.reject(new Error(data.error));
};
worker.onerror = (e) => status(`The optimizer failed to start: ${e.message ?? "worker error"}`, true);
/** Posts `cmd` to the worker; `transfer`: buffers handed over instead of copied. */
function call(cmd, args = {}, onProgress, transfer = []) {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject, onProgress });
    worker.postMessage({ id, cmd, ...args }, transfer);
  });
}

function status(text, error = false) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("error", error);
}

// Timings of the last load, read by people and by the end-to-end tests (which also read the
// views' state through fuselabViews).
const timing = (window.fuselabTiming = {});
window.fuselabViews = () => views;
let current = null; // { name, summary, report, dims, gen }
let gen = 0; // bumped by every load and optimization: late answers for an older one are dropped
let views = {}; // { before, after }: graph.js views
let link = null;

// ---- stages ----------------------------------------------------------------------------------

/** Forgets the shown model: report, graphs, benchmark, downloads, dims. */
function clearModel() {
  current = null;
  views = {};
  onScreen = {};
  link = null;
  $("collapse-label").hidden = true;
  clearReport();
  clearBench();
  $("graphs").hidden = true;
  for (const id of ["graph-before", "graph-after"]) $(id).replaceChildren();
  $("inspector").replaceChildren(Object.assign(document.createElement("em"), { textContent: "Click a node to inspect it." }));
  $("dl-model").disabled = $("dl-report").disabled = true;
  $("dims").hidden = true;
  $("profile").hidden = true;
}

async function loadFiles(files, t0) {
  const my = ++gen;
  const names = files.map((f) => f.name).join(", ");
  clearModel();
  let loaded;
  try {
    status(`Reading ${names}…`);
    const payload = await Promise.all(
      files.map(async (f) => ({ name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) })),
    );
    // The files' bytes move to the worker (a 651 MB GPT-2 small is not copied on the way).
    loaded = await call("load", { files: payload }, undefined, payload.map((f) => f.bytes.buffer));
  } catch (e) {
    if (my === gen) status(`Could not load ${names}: ${e.message}`, true);
    return;
  }
  if (my !== gen) return;
  current = { name: loaded.name, summary: loaded.summary };
  showDims(loaded.summary);
  await optimize(t0);
}

/** The inputs' symbolic dims, less those the model computes as sums of others (a decode
 * step's total = past + seq): the inputs get those from the sum. */
function symbolicDims(summary) {
  const names = new Set();
  for (const p of summary.inputs)
    for (const d of p.shape ?? []) if (!/^\d+$/.test(d) && d !== "?") names.add(d);
  for (const d of summary.summed_dims ?? []) names.delete(d);
  return [...names];
}

const DEFAULT_DIMS = { batch: 1, seq: 8, sequence: 8, N: 64 };
const MAX_DIM = 1 << 20;

function showDims(summary) {
  const box = $("dim-fields");
  box.replaceChildren();
  const names = symbolicDims(summary);
  for (const name of names) {
    const l = document.createElement("label");
    l.textContent = `${name} `;
    const i = document.createElement("input");
    Object.assign(i, { type: "number", min: 1, max: MAX_DIM, value: DEFAULT_DIMS[name] ?? 8 });
    i.dataset.dim = name;
    l.append(i);
    box.append(l);
  }
  const summed = summary.summed_dims ?? [];
  if (summed.length) {
    const note = document.createElement("span");
    note.className = "summed";
    note.textContent = `(${summed.join(", ")}: the sum the model computes)`;
    box.append(note);
  }
  $("dims-label").hidden = names.length === 0;
  $("dims").hidden = false;
}

/** The dims form's values, or { error } naming the first bad one. */
function readDims() {
  const out = {};
  for (const i of document.querySelectorAll("#dim-fields input")) {
    const text = i.value.trim();
    const ok = /^\d+$/.test(text) && Number(text) >= 1 && Number(text) <= MAX_DIM;
    i.setAttribute("aria-invalid", String(!ok));
    if (!ok) {
      const got = text === "" ? "it is empty" : `got ${text}`;
      return { error: `Input size ${i.dataset.dim} must be a whole number from 1 to ${MAX_DIM} (${got}); nothing was re-optimized.` };
    }
    out[i.dataset.dim] = Number(text);
  }
  return { dims: out };
}

const label = () => {
  const d = Object.entries(current.dims).map(([k, v]) => `${k}=${v}`).join(", ");
  return `${current.name} (${current.report.target ? `for ${current.report.target}` : "default rules"}${d ? `, ${d}` : ""})`;
};

async function optimize(t0 = performance.now()) {
  if (!current) return status("Load a model first.", true);
  const read = readDims();
  if (read.error) return status(read.error, true);
  const my = ++gen;
  const name = current.name;
  const target = $("target").value || undefined;
  $("dl-model").disabled = $("dl-report").disabled = true;
  clearBench();
  status(`Optimizing ${name}…`);
  let r;
  try {
    r = await call("optimize", { dims: read.dims, target });
  } catch (e) {
    if (my === gen) (clearReport(), status(`${name} loaded, but the optimization failed: ${e.message}`, true));
    return;
  }
  if (my !== gen) return;
  Object.assign(current, { report: r.report, dims: read.dims, gen: my, parityNote: null });
  showReport(r.report, showFused);
  showParity($("parity-on").checked ? "checking" : "skipped");
  $("dl-model").disabled = $("dl-report").disabled = false;
  $("bench").hidden = false;
  $("profile").hidden = false;
  $("profile-pair").hidden = true; // a profile of the previous graphs is not this one's
  $("profile-status").textContent = "";

  // Layout and drawing, one side at a time.
  $("graphs").hidden = false;
  const failed = [];
  let layoutMs = 0;
  const laid = {};
  const sideMs = {};
  for (const side of ["before", "after"]) {
    try {
      const l = await call("layout", { side, collapsed: collapsedFor() }, (p) => status(`Optimized ${name}; laying out the ${side} graph: ${p.step}…`));
      if (my !== gen) return;
      laid[side] = l.graph;
      layoutMs += l.layout_ms;
      sideMs[`layout_${side}_ms`] = l.layout_ms;
    } catch (e) {
      if (my !== gen) return;
      failed.push(`the layout of the ${side} graph failed: ${e.message}`);
    }
  }
  colours = opColours(Object.values(laid));
  views = {};
  onScreen = laid;
  for (const side of ["before", "after"]) {
    if (!laid[side]) {
      $(`graph-${side}`).replaceChildren();
      $(`caption-${side}`).textContent = `${side}: not drawn (layout failed)`;
      continue;
    }
    try {
      drawSide(side);
    } catch (e) {
      failed.push(`drawing the ${side} graph failed: ${e.message}`);
    }
  }
  linkSides();
  await new Promise((res) => requestAnimationFrame(() => setTimeout(res, 0)));
  const shown = performance.now() - t0;
  Object.assign(timing, { optimize_ms: r.optimize_ms, layout_ms: layoutMs, ...sideMs, drop_to_graphs_ms: shown });
  const head = `${name}: ${r.report.nodes_before} → ${r.report.nodes_after} nodes${r.report.target ? ` for ${r.report.target}` : ""}. ` +
    `Optimized in ${r.optimize_ms.toFixed(0)} ms`;
  if (failed.length) return status(`${head}, but ${failed.join("; ")}.`, true);
  const drawn = `laid out in ${layoutMs.toFixed(0)} ms; graphs drawn ${shown.toFixed(0)} ms after the drop`;

  // Parity last: the slowest stage, and the one a model the reference backend cannot run fails.
  let parityText = "parity skipped";
  if ($("parity-on").checked) {
    status(`${head}, ${drawn}; checking parity…`);
    try {
      const p = await call("parity", { dims: read.dims, target });
      if (my !== gen) return;
      if (current.parityNote === "skipped by choice") {
        parityText = "parity skipped";
      } else {
        current.report.parity = p.parity;
        showParity("checked", { parity: p.parity });
        const partial = p.parity.partial ? partialParity(p.parity) : null;
        parityText = `parity ${p.parity.ok ? (partial ? "partially checked" : "checked") : "FAILED"} in ` +
          `${p.parity_ms.toFixed(0)} ms${partial ? ` (${partial.summary})` : ""}`;
      }
    } catch (e) {
      if (my !== gen) return;
      const why = parityFailure(e.message);
      current.parityNote = `not checked: ${why.summary}`;
      if ($("parity-on").checked) showParity("failed", { why });
      parityText = `parity not checked: ${why.summary}`;
    }
  }
  status(`${head}, ${drawn.replace("graphs drawn", "graphs shown")}; ${parityText}.`);
}

// ---- the graphs: drawing, repeated blocks -----------------------------------------------------

let onScreen = {}; // side → the laid-out graph on screen
let colours = new Map();

/** Draws `onScreen[side]`. A click on a collapsed block expands it; on a node, selects it. */
function drawSide(side) {
  const g = onScreen[side];
  views[side] = createView($(`graph-${side}`).closest("figure"), g, colours, {
    select: (i) => (g.nodes[i].kind === "block" ? expandBlock(side, g.nodes[i].name) : link?.select(side, i)),
    hover: (i) => link?.hover(side, i),
    moved: () => link?.moved(side),
  });
  const n = side === "before" ? current.report.nodes_before : current.report.nodes_after;
  $(`caption-${side}`).textContent = `${side}: ${n} nodes` +
    (g.collapsed.length ? `, ${g.collapsed.length} repeated blocks collapsed (click one to expand it)` : "") +
    (g.constants_hidden ? ` (${g.constants_hidden} Constant nodes drawn as constant inputs)` : "");
  $("collapse-label").hidden = !Object.values(onScreen).some((d) => d?.blocks.length);
}

function linkSides() {
  link = views.before && views.after ? linkViews(views.before, views.after, inspect) : null;
  showLegend(colours, search);
  search.run();
}

const collapsedFor = () => ($("collapse-blocks").checked ? "all" : []);

/** Lays `side` out again with `collapsed` blocks and redraws it. */
async function relayout(side, collapsed) {
  const my = gen;
  const l = await call("layout", { side, collapsed });
  if (my !== gen) return;
  onScreen[side] = l.graph;
  drawSide(side);
  linkSides();
}

function expandBlock(side, key) {
  relayout(side, onScreen[side].collapsed.filter((k) => k !== key)).catch((e) =>
    status(`Expanding ${key} failed: ${e.message}`, true));
}

$("collapse-blocks").addEventListener("change", () => {
  if (!current) return;
  for (const side of Object.keys(onScreen)) {
    if (onScreen[side]) relayout(side, collapsedFor()).catch((e) => status(`The ${side} layout failed: ${e.message}`, true));
  }
});

function showFused(op) {
  const v = views.after;
  if (!v || !link) return;
  const idx = v.graph.nodes.map((n, i) => (n.fused && n.op_type === op ? i : -1)).filter((i) => i >= 0);
  if (idx.length === 0) return;
  const at = (idx.indexOf(v.state.selected) + 1) % idx.length;
  link.select("after", idx[at], { zoom: true });
}

const search = setupSearch(() => views, () => link);

// ---- inputs ----------------------------------------------------------------------------------

const drop = $("drop");
for (const ev of ["dragenter", "dragover"])
  drop.addEventListener(ev, (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  const t0 = performance.now();
  const files = [...(e.dataTransfer?.files ?? [])];
  if (files.length) loadFiles(files, t0);
});
$("file").addEventListener("change", (e) => {
  const files = [...e.target.files];
  e.target.value = ""; // choosing the same file again is a change too: it reloads
  if (files.length) loadFiles(files, performance.now());
});
for (const b of document.querySelectorAll("[data-sample]"))
  b.addEventListener("click", async () => {
    const t0 = performance.now();
    const name = b.dataset.sample;
    try {
      const res = await fetch(new URL(`./samples/${name}`, document.baseURI));
      if (!res.ok) throw new Error(`${res.status} ${res.statusText}`);
      await loadFiles([new File([await res.arrayBuffer()], name)], t0);
    } catch (e) {
      status(`Could not fetch the sample ${name}: ${e.message}`, true);
    }
  });
const reoptimize = () => optimize().catch((err) => status(`Optimization failed: ${err.message}`, true));
$("dims").addEventListener("submit", (e) => {
  e.preventDefault();
  reoptimize();
});
$("target").addEventListener("change", () => current && reoptimize());
$("skip-parity").addEventListener("click", () => {
  $("parity-on").checked = false;
  if (current) current.parityNote = "skipped by choice";
  showParity("skipped");
});
$("fit").addEventListener("click", () => Object.values(views).forEach((v) => v.fit()));
$("reset").addEventListener("click", () => Object.values(views).forEach((v) => v.reset()));

// ---- downloads -------------------------------------------------------------------------------

function save(blob, name) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}
const stem = () => current.name.replace(/\.onnx$/i, "");
$("dl-model").addEventListener("click", async () => {
  try {
    const bytes = await call("optimizedBytes");
    save(new Blob([bytes], { type: "application/octet-stream" }), `${stem()}.fused.onnx`);
  } catch (e) {
    status(`Could not save the optimized model: ${e.message}`, true);
  }
});
$("dl-report").addEventListener("click", () => {
  const report = { ...current.report };
  if (!report.parity && current.parityNote) report.parity_note = current.parityNote;
  save(new Blob([JSON.stringify(report, null, 2)], { type: "application/json" }), `${stem()}.report.json`);
});

setupBench(call, () => (current?.report ? { gen: current.gen, label: label(), dims: current.dims } : null));

// ---- profile -------------------------------------------------------------------------------

$("profile-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  if (!current?.report) return;
  const runs = Math.max(1, Math.min(1000, Number($("profile-runs").value) || 1));
  const my = current.gen;
  $("profile-run").disabled = true;
  $("profile-status").textContent = `Profiling both graphs, ${runs} runs each…`;
  try {
    const p = await call("profile", { runs, dims: current.dims });
    if (my !== gen) return; // another model or re-optimization since: not these graphs
    // A candidate's occurrences (node names) lit in that side's graph, the first brought into view.
    const pick = (side, occurrences) => {
      const view = views[side];
      const picked = occurrences.flatMap((names) => names.flatMap((n) => view?.byName.get(n) ?? []));
      view?.setState({ picked: new Set(picked) });
      const first = (occurrences[0] ?? []).flatMap((n) => view?.byName.get(n) ?? []);
      if (first.length) view.show(first);
      $("profile-status").textContent =
        `${occurrences.length} occurrence(s), ${picked.length} node(s) lit in the ${side === "before" ? "original" : "optimized"} graph.`;
    };
    drawProfile($("profile-before"), "before", p.before, pick);
    drawProfile($("profile-after"), "after", p.after, pick);
    $("profile-pair").hidden = false;
    const left = p.after.candidates.filter((c) => !c.rule).length;
    $("profile-status").textContent =
      `Original ${p.before.total_ms.toPrecision(3)} ms, optimized ${p.after.total_ms.toPrecision(3)} ms per run ` +
      `(sum over nodes); ${left} uncovered candidate sequence(s) left in the optimized graph.`;
  } catch (err) {
    if (my === gen) $("profile-status").textContent = `Profile failed: ${err.message}`;
  } finally {
    $("profile-run").disabled = false;
  }
});

call("ping").then(
  () => status("Ready. Drop a model or pick a sample."),
  (e) => status(`The optimizer failed to start: ${e.message}`, true),
);
