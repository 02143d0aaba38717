// fuselab's side of benches/browser_vs_ortweb.mjs, in a module Worker: the threads build's
// calls block while its pool works, which the page's main thread may only do by spinning (the
// page runs fuselab in a Worker too). Messages, each answered { ok, result } or { ok: false,
// error }: { init: { threads } } once; { load: { bytes, dataName, data, dims, threads } } per
// model (the optimized graph's session); { run: inputs } per timed run (its ms, measured here);
// { outputs: true } the last run's outputs; { drop: true } frees the model.
let fl, build, state, last;

async function init({ threads }) {
  const { relaxedSimd, wasmThreads, wasmUrl, threadsUrl } = await import("/pkg/wasm_url.js");
  if (threads > 1) {
    if (!wasmThreads) throw new Error("this context cannot run fuselab's threads build (cross-origin isolation?)");
    fl = await import(threadsUrl().href);
    await fl.default();
    await fl.startThreads(threads);
    build = `threads build (pool of ${fl.threadPool()})`;
  } else {
    fl = await import("/pkg/fuselab.js");
    await fl.default({ module_or_path: wasmUrl() });
    build = relaxedSimd ? "relaxed-SIMD build" : "SIMD128 build";
  }
  return build;
}

function load({ bytes, dataName, data, dims, threads }) {
  const t = performance.now();
  const model = fl.Model.load(bytes, data ? { [dataName]: data } : undefined);
  const optimized = model.optimize({ dims, parity: false });
  const m = optimized.model();
  const session = m.session({ dims, threads });
  const loadMs = performance.now() - t;
  const report = optimized.report();
  state = { model, optimized, m, session, splits: fl.parallelCalls() };
  return { loadMs, nodes: `${report.nodes_before} → ${report.nodes_after}` };
}

function run(inputs) {
  const t = performance.now();
  last = state.session.run(inputs);
  return performance.now() - t;
}

function drop() {
  const splits = fl.parallelCalls() - state.splits;
  for (const k of ["session", "m", "optimized", "model"]) state[k].free();
  state = last = null;
  return splits;
}

self.onmessage = ({ data }) => {
  Promise.resolve()
    .then(() => (data.init ? init(data.init) : data.load ? load(data.load) : data.run ? run(data.run) : data.outputs ? last : drop()))
    .then(
      (result) => self.postMessage({ ok: true, result }),
      (e) => self.postMessage({ ok: false, error: e instanceof Error ? `${e.message}\n${e.stack}` : String(e) }),
    );
};
