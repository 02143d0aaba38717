// The benchmark section. A result is bound to the model and graph it measured: it names them,
// and a run that ends after another model (or another optimization) was loaded does not draw
// its chart over the new one.
import { drawChart } from "./chart.js";

const $ = (id) => document.getElementById(id);

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

export function clearBench() {
  $("bench").hidden = true;
  $("bench-result").textContent = "";
  $("bench-chart").toggleAttribute("hidden", true); // an SVG element: no .hidden property
  $("bench-progress").hidden = true;
}

/**
 * `call(cmd, args, onProgress)` talks to the worker; `measured()` is what is loaded now:
 * { gen, label, dims } or null (`gen` changes with every load and optimization).
 */
export function setupBench(call, measured) {
  webgpuState().then((text) => {
    $("webgpu-note").textContent = text;
  });
  // The worker's build: the threads build offers 1..pool threads (default all of them).
  call("ping").then(({ build, pool }) => {
    const select = $("threads");
    select.replaceChildren(
      ...Array.from({ length: pool }, (_, i) => new Option(String(i + 1), String(i + 1), false, i + 1 === pool)),
    );
    $("threads-note").textContent =
      build === "threads"
        ? `The reference backend may use up to ${pool} threads here (wasm threads: Web Workers sharing one memory); the results are the same at any count.`
        : "The reference backend runs on one thread here: wasm threads need a cross-origin isolated page (COOP/COEP headers, as `npm run serve` sends) and a browser with wasm threads and relaxed SIMD.";
  }, () => {});
  $("bench-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const what = measured();
    if (!what) return;
    const runs = Math.max(1, Math.min(100000, Number($("runs").value) || 1));
    const backend = $("backend").value;
    const threads = backend === "webgpu" ? 1 : Number($("threads").value) || 1;
    const bar = $("bench-progress");
    Object.assign(bar, { hidden: false, value: 0, max: runs });
    $("bench-run").disabled = true;
    $("bench-chart").toggleAttribute("hidden", true); // an SVG element: no .hidden property
    $("bench-result").textContent = `Running ${runs} interleaved runs of each graph of ${what.label}…`;
    const stale = () => measured()?.gen !== what.gen;
    try {
      const r = await call("bench", { runs, dims: what.dims, backend, threads }, (p) => {
        if (!stale()) bar.value = p.done;
      });
      const s = r.summary; // the statistics come from the wasm (src/bench.rs), as in the CLI
      const [mo, mf] = [s.original.median_ms, s.optimized.median_ms];
      const per = r.repeat > 1
        ? ` Each point is the mean of ${r.repeat} back-to-back runs, so that a point spans enough of the browser's coarse clock to measure.`
        : "";
      const disp = r.dispatches
        ? ` ${r.dispatches.original} → ${r.dispatches.optimized} dispatches per run; ${r.nodes.original} → ` +
          `${r.nodes.optimized} nodes (on WebGPU the fused graph also gets the backend's elementwise lowering).`
        : "";
      const text =
        `${backend} backend${backend === "webgpu" ? "" : `, ${threads} thread${threads > 1 ? "s" : ""}`}, ${s.samples} interleaved runs each after warm-up: original median ${mo.toFixed(4)} ms, fused median ` +
        `${mf.toFixed(4)} ms — speedup ${s.speedup.toFixed(2)}x.${disp}${per} Measured: ${what.label}.`;
      const res = $("bench-result");
      if (stale()) {
        res.textContent = `A benchmark of ${what.label} finished after it was replaced; its result: ${text}`;
        res.dataset.stale = "true";
        return;
      }
      delete res.dataset.stale;
      res.dataset.speedup = String(s.speedup);
      res.textContent = text;
      const chart = $("bench-chart");
      chart.toggleAttribute("hidden", false);
      drawChart(chart, r.original_ms, r.optimized_ms, [mo, mf]);
    } catch (err) {
      $("bench-result").textContent = `Benchmark of ${what.label} failed: ${err.message}`;
    } finally {
      $("bench-run").disabled = false;
      if (stale()) bar.hidden = true;
    }
  });
}
