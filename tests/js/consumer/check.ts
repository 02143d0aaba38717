// Type-checked (tsc --strict --noEmit) against the packed package's generated fuselab.d.ts:
// the API's option and result types are real types, and misuse does not compile.
import init, { Bench, GpuBench, Model, rules, type BenchSummary, type GraphView, type OptimizeReport, type Pair } from "fuselab";
import { relaxedSimd, wasmUrl } from "fuselab/wasm-url";

export async function check(bytes: Uint8Array): Promise<number> {
  const url: URL = wasmUrl();
  const relaxed: boolean = relaxedSimd;
  await init({ module_or_path: relaxed ? url : undefined });
  // @ts-expect-error: wasmUrl() is a URL, not a string
  const name: string = wasmUrl();
  const names: string[] = rules();
  const model: Model = Model.load(bytes, undefined);
  const optimized = model.optimize({ rules: names, dims: { N: 8 }, tolerance: 1e-4 });
  const report: OptimizeReport = optimized.report();
  const after: GraphView = optimized.graphAfter();
  const replaced: string[] = after.nodes.flatMap((n) => n.fused?.replaced ?? []);
  const speedups: number[] = [];
  const bench = new Bench(model, optimized.model(), { dims: { N: 8 }, backend: "reference" });
  const repeat: number = bench.calibrate(1, () => performance.now());
  const t: Float64Array = bench.step(4, () => performance.now());
  speedups.push(t[0] / t[1]);
  const summary: BenchSummary = bench.summary();
  speedups.push(summary.speedup, summary.original.median_ms);
  // @ts-expect-error: a node's kind is "op", "input" or "output"
  const kind: "edge" = after.nodes[0].kind;
  // @ts-expect-error: the backend is "reference" or "webgpu"
  new Bench(model, optimized.model(), { backend: "gpu" });
  // @ts-expect-error: nodes_after is a number
  report.nodes_after.toUpperCase();
  // @ts-expect-error: unknown option
  model.optimize({ rulez: [] });
  // @ts-expect-error: dims are numbers
  model.optimize({ dims: { N: "8" } });
  return name.length + report.nodes_after + replaced.length + repeat + speedups.length + kind.length;
}

export async function checkGpu(model: Model, optimized: Model): Promise<number> {
  const gpu: GpuBench = await GpuBench.prepare(model, optimized, { dims: { N: 8 } });
  const repeat: number = await gpu.calibrate(undefined, () => performance.now());
  const t: Float64Array = await gpu.step(2, () => performance.now());
  const dispatches: Pair<number> = gpu.dispatches();
  // @ts-expect-error: step resolves later (a Promise)
  const now: Float64Array = gpu.step(2, () => performance.now());
  return repeat + t.length + now.length + dispatches.optimized + gpu.nodes().original + gpu.summary().speedup;
}
