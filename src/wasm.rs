//! The wasm-bindgen facade the page and the npm package use. Thin on purpose: everything it
//! calls is the code the native CLI runs (`pipeline`, `bench`, the backends); these files only
//! convert between JS values and Rust.
//!
//! ```js
//! const m = Model.load(bytes);                     // + { "weights.bin": Uint8Array } for external data
//! const o = m.optimize({ dims: { seq: 8 } });     // rules, dims, fix_dims, parity, tolerance, seed
//! o.report();  o.graphBefore();  o.graphAfter();  o.bytes();
//! o.model().run(undefined, { dims: { seq: 8 } }); // random inputs; or { name: { dtype, shape, data } }
//! const s = o.model().session({ dims: { seq: 8 } }); // planned once; s.run(inputs) as often as needed
//! const b = new Bench(m, o.model(), { dims: { seq: 8 } });
//! b.calibrate(undefined, () => performance.now()); // warm-up, then runs per sample (>= 1 ms)
//! b.step(10, () => performance.now());            // [original ms, optimized ms] × 10, interleaved
//! b.summary();                                    // medians, minimums, speedup
//! m.profile({ dims: { seq: 8 } }, 10, () => performance.now()); // per op type, op sequence; candidates
//! const g = await GpuBench.prepare(m, o.model(), { dims: { seq: 8 } }); // the same on WebGPU
//! // The threads build (pkg/threads/, feature "wasm-threads"), from a Worker of a cross-origin
//! // isolated page: await startThreads(2), then { threads: 2 } in session/run/Bench options.
//! ```
//!
//! Options and results cross as plain JS objects (JSON-shaped). Their TypeScript types are
//! generated from the Rust types by `tsify` (`#[derive(Tsify)]` on wasm32), so the .d.ts says
//! what the serde types say.
//!
//! Files: `model.rs` (Model, Optimized), `session.rs` (Session), `bench.rs` (Bench, GpuBench),
//! `gpu.rs` (GpuModel), `convert.rs` (JS values ↔ options, tensors, results).

mod bench;
mod convert;
mod gpu;
mod model;
mod session;

use std::collections::HashMap;

use serde::Deserialize;
use tsify::Tsify;
use wasm_bindgen::prelude::*;

use crate::passes::target::Target;
use crate::pipeline::Backend;

pub use bench::{Bench, GpuBench};
pub use gpu::GpuModel;
pub use model::{Optimized, WasmModel};
pub use session::Session;

/// The default rule names, in the order they run. `optimize` also accepts the opt-in rules of
/// `passes::BACKEND_LOWERING_RULES` by name; they are not listed here, so passing this list
/// keeps a model runnable by onnxruntime.
#[wasm_bindgen]
pub fn rules() -> Vec<String> {
    crate::passes::ALL_RULES
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Options of `Model.optimize`; every field is optional.
#[derive(Deserialize, Default, Tsify)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizeOptions {
    /// Rule names; empty or absent: the default rules (see `rules()`). The opt-in
    /// "fused_elementwise" (ai.fuselab ops that onnxruntime cannot run) is accepted by name.
    pub rules: Vec<String>,
    /// The runtime the saved model is for: "ort-cpu" (no ai.fuselab op), "ort-webgpu" (only
    /// fused ops onnxruntime-web's WebGPU EP runs on the GPU) or "fuselab" (adds the ai.fuselab
    /// lowering). Absent: the default rules, nothing refused.
    pub target: Option<Target>,
    /// Sizes of symbolic input dims for the parity inputs (never changes the saved model).
    pub dims: HashMap<String, usize>,
    /// Symbolic dims the optimized model is specialized to.
    pub fix_dims: HashMap<String, i64>,
    /// Compare original and optimized outputs (default true).
    pub parity: Option<bool>,
    /// Largest allowed absolute output difference, for every output (default: 2e-2 for a model
    /// that computes in float16/bfloat16, else 1e-4).
    pub tolerance: Option<f64>,
    pub seed: u64,
}

/// Options of `Model.run`, `Model.profile`, `new Bench`, `GpuModel.prepare` and `GpuBench.prepare`.
#[derive(Deserialize, Default, Tsify)]
#[serde(default, deny_unknown_fields)]
pub struct RunOptions {
    /// Sizes of symbolic input dims for random inputs (unnamed ones are 8).
    pub dims: HashMap<String, usize>,
    /// Seed of the random inputs.
    pub seed: u64,
    /// "reference" (default). For WebGPU use `GpuModel.prepare` or `GpuBench.prepare`;
    /// "webgpu" here is an error.
    pub backend: Option<Backend>,
    /// Threads for the reference backend's kernels (default 1). More than 1 needs the threads
    /// build (`fuselab/threads`) and its pool started with `await startThreads(n)`, n ≥ this;
    /// the results are the same bit for bit at any count. `profile` takes 1 only.
    pub threads: Option<usize>,
}

impl RunOptions {
    fn threads(&self) -> usize {
        self.threads.unwrap_or(1)
    }

    fn check_reference(&self) -> Result<(), JsError> {
        match self.backend.unwrap_or_default() {
            Backend::Reference => Ok(()),
            Backend::Webgpu => Err(JsError::new(
                "backend 'webgpu': prepare the model with GpuModel.prepare(model, options) to run \
                 it, or GpuBench.prepare(original, optimized, options) to benchmark; Model.run and \
                 Bench run on the reference backend",
            )),
        }
    }
}

// Tensors cross as typed arrays, which no serde type describes: `convert.rs` builds and reads
// these by hand.
#[wasm_bindgen(typescript_custom_section)]
const TS_TENSOR: &'static str = r#"
export type TensorData = Float32Array | Float64Array | Int8Array | Uint8Array | Int16Array
  | Uint16Array | Int32Array | Uint32Array | BigInt64Array | BigUint64Array | string[];

/** `data` is the typed array of `dtype`; bool is a Uint8Array of 0/1; float16 and bfloat16
 * travel as Float32Array (exact out, rounded to nearest even in); int4/uint4 as Int8Array/
 * Uint8Array; string is a plain array of strings. */
export interface TensorValue {
  dtype: "float32" | "float64" | "float16" | "bfloat16" | "int8" | "uint8" | "int16" | "uint16"
    | "int32" | "uint32" | "int64" | "uint64" | "int4" | "uint4" | "bool" | "string";
  shape: number[];
  data: TensorData;
}
"#;

/// Starts the threads build's pool of `threads` Web Workers (once per page; the same count again
/// is a no-op) and resolves to its size. Needs a cross-origin isolated page (COOP `same-origin`,
/// COEP `require-corp`). Then `threads` in the run options splits the kernels' work; the calls
/// block until done, so make them from a Worker.
#[cfg(feature = "wasm-threads")]
#[wasm_bindgen(js_name = startThreads)]
pub async fn start_threads(threads: usize) -> Result<usize, JsError> {
    crate::threads::web::start(threads)
        .await
        .map_err(|e| JsError::new(&e))
}

/// The threads the kernels may use here: the pool's size in the threads build after
/// `startThreads` (0 before), 1 in the other builds.
#[wasm_bindgen(js_name = threadPool)]
pub fn thread_pool() -> usize {
    #[cfg(feature = "wasm-threads")]
    return crate::threads::web::pool();
    #[cfg(not(feature = "wasm-threads"))]
    1
}

/// Kernel calls that have split their work between the pool's threads since the module
/// started (always 0 outside the threads build): how a caller sees that `threads` took effect.
#[wasm_bindgen(js_name = parallelCalls)]
pub fn parallel_calls() -> usize {
    #[cfg(feature = "wasm-threads")]
    return crate::threads::web::splits();
    #[cfg(not(feature = "wasm-threads"))]
    0
}

fn err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

fn js_err(e: impl std::fmt::Display) -> JsValue {
    err(e).into()
}
