/** Whether this engine runs relaxed SIMD (a probe module using f32x4.relaxed_madd validates). */
export declare const relaxedSimd: boolean;
/** The URL of the wasm build this engine runs, for `init({ module_or_path })`:
 * `fuselab_bg.relaxed.wasm` where `relaxedSimd`, else `fuselab_bg.wasm`. */
export declare function wasmUrl(): URL;
/** Whether the threads build runs here: relaxed SIMD, shared wasm memory and a cross-origin
 * isolated context. */
export declare const wasmThreads: boolean;
/** The URL of the threads build's glue module (`threads/fuselab.js`), to `import()` unbundled;
 * it exports what `fuselab` does plus `startThreads(n)`. */
export declare function threadsUrl(): URL;
