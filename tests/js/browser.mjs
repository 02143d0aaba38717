// Shared by the browser tests: Debian's chromium through playwright-core (Playwright's own
// browser download is not reachable here), and a local static server.
import { execFileSync } from "node:child_process";
import { chromium } from "playwright-core";

export function chromiumPath() {
  if (process.env.CHROMIUM) return process.env.CHROMIUM;
  try {
    return execFileSync("bash", ["-c", "command -v chromium || command -v chromium-browser"], {
      encoding: "utf8",
    }).trim();
  } catch {
    throw new Error("chromium not found: apt-get install chromium (scripts/setup.sh does)");
  }
}

export async function launch() {
  return chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    // WebGPU is off in headless Chromium unless asked for (its SwiftShader adapter then shows).
    args: ["--enable-unsafe-webgpu"],
  });
}

/** Fails after `ms` with `what` instead of hanging the suite (a stuck GPU process can). */
export function within(ms, what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
