// Which of the package's wasm builds this engine runs: `fuselab_bg.relaxed.wasm` (SIMD128
// plus relaxed SIMD: the matrix kernels' multiply-adds are single f32x4.relaxed_madd
// instructions, fused where the CPU has FMA) where the engine validates relaxed SIMD (Chromium
// since 114; node 20 only with --experimental-wasm-relaxed-simd), else
// `fuselab_bg.wasm` (SIMD128). Both come from the same Rust source through the same glue
// (scripts/build_wasm.sh checks that wasm-bindgen wrote identical fuselab.js for both).
//
//   import init from "fuselab";
//   import { wasmUrl } from "fuselab/wasm-url";
//   await init({ module_or_path: wasmUrl() });
//
// A third build, `threads/` (its own glue: fuselab/threads), adds wasm threads (shared memory,
// atomics; relaxed SIMD too) for kernels split over Web Workers. It runs only where the page is
// cross-origin isolated and the engine validates all three (`wasmThreads`); it is loaded by URL
// (`threadsUrl()`), unbundled, because its worker script imports the glue by URL:
//
//   const fl = wasmThreads ? await import(threadsUrl().href) : await import("fuselab");
//   await fl.default();                       // threads build: its .wasm sits beside its glue
//   if (wasmThreads) await fl.startThreads(2); // then { threads: 2 } in Session/Bench options

// A module of one function: three v128.const operands into f32x4.relaxed_madd (0xfd 0x105).
const PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
  0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b, // types: () -> v128
  0x03, 0x02, 0x01, 0x00, // functions: one of type 0
  0x0a, 0x3d, 0x01, 0x3b, 0x00, // code: one body of 59 bytes, no locals
  ...[0, 1, 2].flatMap(() => [0xfd, 0x0c, ...new Array(16).fill(0)]), // v128.const 0, three times
  0xfd, 0x85, 0x02, // f32x4.relaxed_madd
  0x0b, // end
]);

/** Whether this engine runs relaxed SIMD (the probe module validates). */
export const relaxedSimd = (() => {
  try {
    return WebAssembly.validate(PROBE);
  } catch {
    return false;
  }
})();

// A module whose memory is shared (limits flag 3: a maximum, shared): it validates only where
// the engine has wasm threads.
const SHARED = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
  0x05, 0x04, 0x01, 0x03, 0x01, 0x01, // memory: one, shared, 1 page, at most 1
]);

/** Whether the threads build runs here: relaxed SIMD, shared wasm memory, and (in a browser) a
 * cross-origin isolated context, which SharedArrayBuffer needs. */
export const wasmThreads = (() => {
  try {
    return (
      relaxedSimd &&
      typeof SharedArrayBuffer === "function" &&
      globalThis.crossOriginIsolated !== false &&
      WebAssembly.validate(SHARED)
    );
  } catch {
    return false;
  }
})();

/** The URL of the threads build's glue module (`import(threadsUrl().href)`), served as the
 * package ships it: `threads/fuselab.js` with its .wasm and `snippets/` beside it. */
export function threadsUrl() {
  return new URL("./threads/fuselab.js", import.meta.url);
}

/** The URL of the wasm build to pass to `init({ module_or_path })`. */
export function wasmUrl() {
  // Two literal `new URL(..., import.meta.url)` forms, so that bundlers (Vite, webpack 5)
  // emit both files as assets.
  return relaxedSimd
    ? new URL("./fuselab_bg.relaxed.wasm", import.meta.url)
    : new URL("./fuselab_bg.wasm", import.meta.url);
}
