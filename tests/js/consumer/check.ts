// Type-checked (tsc --strict --noEmit) against the packed package's generated fuselab.d.ts:
// the API's option and result types are real types, and misuse does not compile.
import init, { Bench, Model, rules, type GraphView, type OptimizeReport } from "fuselab";

export async function check(bytes: Uint8Array): Promise<number> {
  await init();
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
  // @ts-expect-error: nodes_after is a number
  report.nodes_after.toUpperCase();
  // @ts-expect-error: unknown option
  model.optimize({ rulez: [] });
  // @ts-expect-error: dims are numbers
  model.optimize({ dims: { N: "8" } });
  return report.nodes_after + replaced.length + repeat + speedups.length;
}
