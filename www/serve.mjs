// Serves www/dist/ locally: `node www/serve.mjs [--port P] [--base /sub/path/]`. Prints the URL.
// A plain static server (correct MIME types, .wasm as application/wasm), plus the two headers
// that make the page cross-origin isolated, which lets it run the threads build (wasm threads
// need SharedArrayBuffer) and gives benchmarks a finer clock. The page works without them too
// (any static host), on one thread. `isolated: false` leaves the headers out (a test's
// plain host).
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { dirname, extname, join, normalize, sep } from "node:path";
import { fileURLToPath } from "node:url";

const MIME = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".map": "application/json",
  ".wasm": "application/wasm",
  ".onnx": "application/octet-stream",
  ".png": "image/png",
  ".svg": "image/svg+xml",
};

export function serve({ dir, port = 8080, base = "/", host = "127.0.0.1", isolated = true } = {}) {
  if (!base.endsWith("/")) base += "/";
  const server = createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    if (path === base.slice(0, -1)) {
      res.writeHead(301, { Location: base }).end();
      return;
    }
    if (!path.startsWith(base)) {
      res.writeHead(404).end("not found");
      return;
    }
    let rel = path.slice(base.length) || "index.html";
    if (rel.endsWith("/")) rel += "index.html";
    const file = normalize(join(dir, rel));
    if (!file.startsWith(dir + sep)) {
      res.writeHead(403).end("forbidden");
      return;
    }
    try {
      const body = await readFile(file);
      res.writeHead(200, {
        "Content-Type": MIME[extname(file)] ?? "application/octet-stream",
        ...(isolated
          ? { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" }
          : {}),
        "Cache-Control": "no-cache",
      });
      res.end(body);
    } catch {
      res.writeHead(404).end("not found");
    }
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      const url = `http://${host}:${server.address().port}${base}`;
      resolve({ server, url });
    });
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opt = (name, def) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : def;
  };
  const dir = join(dirname(fileURLToPath(import.meta.url)), "dist");
  const { url } = await serve({ dir, port: Number(opt("--port", 8080)), base: opt("--base", "/") });
  console.log(`fuselab demo: ${url}  (serving ${dir}; Ctrl-C stops)`);
}
