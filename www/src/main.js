// The page: file drop / picker / samples → worker (wasm) → report, before/after graphs, bench.
import { drawGraph, linkGraphs, pickNodes } from "./graph.js";
import { drawProfile } from "./profile.js";
import { drawChart } from "./chart.js";

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
function call(cmd, args = {}, onProgress) {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject, onProgress });
    worker.postMessage({ id, cmd, ...args });
  });
}

function status(text, error = false) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("error", error);
}

// Timings of the last load, read by people and by the end-to-end test.
const timing = (window.fuselabTiming = {});
let current = null; // { name, summary, report }
let drawings = null; // { before, after }: graph.js drawings of the current graphs

// ---- loading -------------------------------------------------------------------------------

async function loadFiles(files, t0) {
  try {
    status(`Reading ${files.map((f) => f.name).join(", ")}…`);
    const payload = await Promise.all(
      files.map(async (f) => ({ name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) })),
    );
    const loaded = await call("load", { files: payload });
    current = { ...loaded };
    showDims(loaded.summary);
    await optimize(t0);
  } catch (e) {
    status(`Could not load the model: ${e.message}`, true);
  }
}

function symbolicDims(summary) {
  const names = new Set();
  for (const p of summary.inputs)
    for (const d of p.shape ?? []) if (!/^\d+$/.test(d) && d !== "?") names.add(d);
  return [...names];
}

const DEFAULT_DIMS = { batch: 1, seq: 8, sequence: 8, N: 64 };

function showDims(summary) {
  const box = $("dim-fields");
  box.replaceChildren();
  const names = symbolicDims(summary);
  for (const name of names) {
    const l = document.createElement("label");
    l.textContent = `${name} `;
    const i = document.createElement("input");
    Object.assign(i, { type: "number", min: 1, max: 1 << 20, value: DEFAULT_DIMS[name] ?? 8 });
    i.dataset.dim = name;
    l.append(i);
    box.append(l);
  }
  $("dims-label").hidden = names.length === 0;
  $("dims").hidden = false;
}

function dims() {
  const out = {};
  for (const i of document.querySelectorAll("#dim-fields input")) out[i.dataset.dim] = Number(i.value);
  return out;
}

async function optimize(t0 = performance.now()) {
  status(`Optimizing ${current.name}…`);
  $("dl-model").disabled = $("dl-report").disabled = true;
  const r = await call("optimize", { dims: dims(), target: $("target").value || undefined });
  current.report = r.report;
  showReport(r.report);
  $("graphs").hidden = false;
  const svgBefore = drawGraph($("graph-before"), r.before, inspect);
  const svgAfter = drawGraph($("graph-after"), r.after, inspect);
  const caption = (n, g) =>
    `${n} nodes` + (g.constants_hidden ? ` (${g.constants_hidden} Constant nodes drawn as constant inputs)` : "");
  $("caption-before").textContent = `before: ${caption(r.report.nodes_before, r.before)}`;
  $("caption-after").textContent = `after: ${caption(r.report.nodes_after, r.after)}`;
  linkGraphs(svgBefore, svgAfter);
  drawings = { before: svgBefore, after: svgAfter };
  $("bench").hidden = false;
  $("profile").hidden = false;
  $("profile-pair").hidden = true; // a profile of the previous graphs is not this one's
  $("profile-status").textContent = "";
  await new Promise((res) => requestAnimationFrame(() => setTimeout(res, 0)));
  const shown = performance.now() - t0;
  Object.assign(timing, { optimize_ms: r.optimize_ms, layout_ms: r.layout_ms, drop_to_graphs_ms: shown });
  status(
    `${current.name}: ${r.report.nodes_before} → ${r.report.nodes_after} nodes${r.report.target ? ` for ${r.report.target}` : ""}. Optimized in ` +
      `${r.optimize_ms.toFixed(0)} ms (with parity), laid out in ${r.layout_ms.toFixed(0)} ms; ` +
      `graphs shown ${shown.toFixed(0)} ms after the drop.`,
  );
  $("dl-model").disabled = $("dl-report").disabled = false;
}

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
$("dims").addEventListener("submit", (e) => {
  e.preventDefault();
  optimize().catch((err) => status(`Optimization failed: ${err.message}`, true));
});
$("target").addEventListener("change", () => {
  if (current) optimize().catch((err) => status(`Optimization failed: ${err.message}`, true));
});

// ---- report --------------------------------------------------------------------------------

function showReport(report) {
  $("report").hidden = false;
  $("nodes-before").textContent = report.nodes_before;
  $("nodes-after").textContent = report.nodes_after;
  const p = report.parity;
  $("parity").textContent = p ? (p.ok ? "outputs match" : "OUTPUTS DIFFER") : "parity not checked";
  $("parity").className = "big " + (p ? (p.ok ? "ok" : "bad") : "");
  $("parity-detail").textContent = p
    ? `max |original − optimized| = ${p.max_abs_diff.toExponential(2)} (tolerance ${p.tolerance})`
    : "";
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
    tr.insertCell().textContent = op;
    tr.insertCell().textContent = n;
  }
  $("rejected-count").textContent = report.rejected.length;
  const ul = $("rejected").querySelector("ul");
  ul.replaceChildren(
    ...report.rejected.map((r) => {
      const li = document.createElement("li");
      li.textContent = `${r.rule}: ${r.op_type} ${r.candidate} — ${r.reason}`;
      return li;
    }),
  );
}

function inspect(node) {
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
  for (const [k, v] of Object.entries(node.attributes)) row(`attribute ${k}`, v);
  if (node.fused) row(`fused by ${node.fused.rule}, replacing`, node.fused.replaced.join(", "));
  if (node.fused_into) row("replaced by", node.fused_into);
  box.append(dl);
}

// ---- downloads -----------------------------------------------------------------------------

function save(blob, name) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}
const stem = () => current.name.replace(/\.onnx$/i, "");
$("dl-model").addEventListener("click", async () => {
  const bytes = await call("optimizedBytes");
  save(new Blob([bytes], { type: "application/octet-stream" }), `${stem()}.fused.onnx`);
});
$("dl-report").addEventListener("click", () => {
  save(new Blob([JSON.stringify(current.report, null, 2)], { type: "application/json" }), `${stem()}.report.json`);
});

// ---- benchmark -----------------------------------------------------------------------------

async function webgpuState() {
  if (!("gpu" in navigator)) return "WebGPU is not available in this browser: benchmarks run on the reference backend only.";
  try {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return "This browser has WebGPU but found no GPU adapter: benchmarks run on the reference backend only.";
    const info = adapter.info ?? {};
    const what = [info.vendor, info.architecture, info.description].filter(Boolean).join(" ") || "an adapter";
    $("backend").querySelector('option[value="webgpu"]').disabled = false;
    return `WebGPU is available (${what}${info.isFallbackAdapter ? ", a software fallback: its times say nothing about a GPU" : ""}): ` +
      "the WebGPU backend runs fuselab's WGSL kernels, each fused op one dispatch.";
  } catch (e) {
    return `WebGPU adapter request failed: ${e.message}`;
  }
}
webgpuState().then((text) => {
  $("webgpu-note").textContent = text;
});

$("bench-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const runs = Math.max(1, Math.min(100000, Number($("runs").value) || 1));
  const backend = $("backend").value;
  const bar = $("bench-progress");
  Object.assign(bar, { hidden: false, value: 0, max: runs });
  $("bench-run").disabled = true;
  $("bench-result").textContent = `Running ${runs} interleaved runs of each graph…`;
  try {
    const r = await call("bench", { runs, dims: dims(), backend }, (p) => {
      bar.value = p.done;
    });
    const s = r.summary; // the statistics come from the wasm (src/bench.rs), as in the CLI
    const [mo, mf] = [s.original.median_ms, s.optimized.median_ms];
    const chart = $("bench-chart");
    chart.hidden = false;
    drawChart(chart, r.original_ms, r.optimized_ms, [mo, mf]);
    const per = r.repeat > 1
      ? ` Each point is the mean of ${r.repeat} back-to-back runs, so that a point spans enough of the browser's coarse clock to measure.`
      : "";
    const res = $("bench-result");
    res.dataset.speedup = String(s.speedup);
    const disp = r.dispatches
      ? ` ${r.dispatches.original} → ${r.dispatches.optimized} dispatches per run; ${r.nodes.original} → ` +
        `${r.nodes.optimized} nodes (on WebGPU the fused graph also gets the backend's elementwise lowering).`
      : "";
    res.textContent =
      `${backend} backend, ${s.samples} interleaved runs each after warm-up: original median ${mo.toFixed(4)} ms, fused median ` +
      `${mf.toFixed(4)} ms — speedup ${s.speedup.toFixed(2)}x.${disp}${per}`;
  } catch (err) {
    $("bench-result").textContent = `Benchmark failed: ${err.message}`;
  } finally {
    $("bench-run").disabled = false;
  }
});

// ---- profile -------------------------------------------------------------------------------

$("profile-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const runs = Math.max(1, Math.min(1000, Number($("profile-runs").value) || 1));
  const shown = drawings;
  $("profile-run").disabled = true;
  $("profile-status").textContent = `Profiling both graphs, ${runs} runs each…`;
  try {
    const p = await call("profile", { runs, dims: dims() });
    if (drawings !== shown) return; // another model or re-optimization since: not these graphs
    const pick = (side, occurrences) => {
      const n = pickNodes(drawings[side], occurrences);
      $("profile-status").textContent =
        `${occurrences.length} occurrence(s), ${n} node(s) lit in the ${side === "before" ? "original" : "optimized"} graph.`;
    };
    drawProfile($("profile-before"), "before", p.before, pick);
    drawProfile($("profile-after"), "after", p.after, pick);
    $("profile-pair").hidden = false;
    const left = p.after.candidates.filter((c) => !c.rule).length;
    $("profile-status").textContent =
      `Original ${p.before.total_ms.toPrecision(3)} ms, optimized ${p.after.total_ms.toPrecision(3)} ms per run ` +
      `(sum over nodes); ${left} uncovered candidate sequence(s) left in the optimized graph.`;
  } catch (err) {
    $("profile-status").textContent = `Profile failed: ${err.message}`;
  } finally {
    $("profile-run").disabled = false;
  }
});

call("ping").then(
  () => status("Ready. Drop a model or pick a sample."),
  (e) => status(`The optimizer failed to start: ${e.message}`, true),
);
