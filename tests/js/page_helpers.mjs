// Shared by the page tests: the built site served from a sub-path, a Chromium page on it, and
// the ways the tests hand it models.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "../../www/serve.mjs";
import { launch, within } from "./browser.mjs";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const cli = process.env.FUSELAB_BIN ?? join(root, "target", "release", "fuselab");
export const outDir = join(root, "target", "e2e");
export const tmp = mkdtempSync(join(tmpdir(), "fuselab-e2e-"));

/** Serves www/dist, opens it in Chromium and waits for "Ready". Returns { page, url, errors, close }. */
export async function openPage() {
  const dist = join(root, "www", "dist");
  assert.ok(existsSync(join(dist, "index.html")), "www/dist is missing: run `npm run build`");
  assert.ok(existsSync(cli), `${cli} is missing: cargo build --release --bin fuselab`);
  mkdirSync(outDir, { recursive: true });
  const { server, url } = await serve({ dir: dist, port: 0, base: "/demo/fuselab/" });
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, acceptDownloads: true });
  const errors = [];
  const requests = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("request", (r) => requests.push(r.url()));
  await within(30000, "page load", page.goto(url));
  await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("Ready"), null, { timeout: 30000 });
  return { page, url, errors, requests, close: async () => (await browser.close(), server.close()) };
}

export function cliReport(model, dims, extra = []) {
  const report = join(tmp, "report.json");
  const args = ["optimize", model, "-o", join(tmp, "cli.onnx"), "--report", report, ...extra];
  for (const [k, v] of Object.entries(dims)) args.push("--dim", `${k}=${v}`);
  execFileSync(cli, args, { stdio: "pipe" });
  return JSON.parse(readFileSync(report, "utf8"));
}

export async function dropFiles(page, files) {
  const payload = files.map((f) => ({ name: f.name, b64: readFileSync(f.path).toString("base64") }));
  await page.evaluate((payload) => {
    const dt = new DataTransfer();
    for (const { name, b64 } of payload) {
      const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      dt.items.add(new File([bytes], name));
    }
    const ev = new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true });
    document.getElementById("drop").dispatchEvent(ev);
  }, payload);
}

/** Waits until the status reads `re` (a string pattern) or shows an error; returns its text. */
export async function statusAfter(page, re, timeout = 60000) {
  await page.waitForFunction((re) => {
    const s = document.getElementById("status");
    return new RegExp(re).test(s.textContent) || s.classList.contains("error");
  }, re, { timeout });
  return page.textContent("#status");
}

/** Builds a test model with tests/js/make_models.py (the project's Python venv). */
export function makeModel(args, name) {
  const py = process.env.PYTHON ?? join(root, ".venv", "bin", "python");
  const out = join(tmp, name);
  execFileSync(py, [join(root, "tests/js/make_models.py"), ...args, out], { stdio: "pipe" });
  return out;
}
