/** Whether this engine runs relaxed SIMD (a probe module using f32x4.relaxed_madd validates). */
export declare const relaxedSimd: boolean;
/** The URL of the wasm build this engine runs, for `init({ module_or_path })`:
 * `fuselab_bg.relaxed.wasm` where `relaxedSimd`, else `fuselab_bg.wasm`. */
export declare function wasmUrl(): URL;
