// The page on a real-size model (issue 16, item 5): drops a model and its external data file
// into the built site (www/dist) in headless Chromium, waits until the graphs are shown and
// parity is checked, and prints the page's own timings (its status line: optimize, layout,
// drop to graphs, parity) and the memory the browser took meanwhile: the peak of the summed
// resident set of every Chromium process, polled every 100 ms, and its rise over the page at
// rest before the drop.
//
//   node benches/page_real_size.mjs [MODEL.onnx]   (default tests/models/real/gpt2_small.onnx;
//   needs `npm run build` and the model's .data file beside it)
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { openPage, root, statusAfter } from "../tests/js/page_helpers.mjs";

const model = process.argv[2] ?? join(root, "tests/models/real/gpt2_small.onnx");
const files = [model, `${model}.data`].filter(existsSync);
if (!existsSync(model)) throw new Error(`${model} not found (scripts/gen_weights.py writes the real-size data)`);

/** Summed RSS of every Chromium process, bytes (ps counts KiB). */
function chromiumRss() {
  try {
    const out = execFileSync("ps", ["-C", "chromium", "-o", "rss="], { encoding: "utf8" });
    return out.split("\n").filter(Boolean).reduce((a, l) => a + Number(l) * 1024, 0);
  } catch {
    return 0;
  }
}

const { page, close } = await openPage();
try {
  const rest = chromiumRss();
  let peak = rest;
  const poll = setInterval(() => (peak = Math.max(peak, chromiumRss())), 100);
  const t0 = Date.now();
  await page.setInputFiles("#file", files);
  const text = await statusAfter(page, "parity (checked|FAILED|not checked|skipped)|failed", 900000);
  const wall = Date.now() - t0;
  clearInterval(poll);
  peak = Math.max(peak, chromiumRss());
  const gb = (b) => (b / 1e9).toFixed(2);
  const bytes = files.reduce((a, f) => a + Number(execFileSync("stat", ["-c", "%s", f], { encoding: "utf8" })), 0);
  console.log(`files: ${files.map((f) => f.split("/").pop()).join(" + ")} (${gb(bytes)} GB)`);
  console.log(`status: ${text}`);
  console.log(`wall from the drop to that status: ${(wall / 1000).toFixed(1)} s`);
  console.log(`Chromium RSS, all processes: ${gb(rest)} GB at rest, ${gb(peak)} GB peak (+${gb(peak - rest)} GB, ${((peak - rest) / bytes).toFixed(2)}x the files)`);
} finally {
  await close();
}
