//! The wasm-bindgen facade the page and the npm package use. Thin on purpose: everything it
//! calls is the code the native CLI runs; this file only converts between JS values and Rust.
//!
//! ```js
//! const m = Model.load(bytes);                     // + { "weights.bin": Uint8Array } for external data
//! const o = m.optimize({ dims: { seq: 8 } });     // rules, dims, fix_dims, parity, tolerance, seed
//! o.report();  o.graphBefore();  o.graphAfter();  o.bytes();
//! o.model().run(undefined, { dims: { seq: 8 } }); // random inputs; or { name: { dtype, shape, data } }
//! const b = new Bench(m, o.model(), { dims: { seq: 8 } });
//! b.calibrate(1, () => performance.now());         // runs per sample so one takes >= 1 ms
//! b.step(10, () => performance.now());            // [original ms, optimized ms] × 10, interleaved
//! ```
//!
//! Options and results cross as plain JS objects (JSON-shaped); their TypeScript types are in
//! the custom section below, so the generated .d.ts describes them.

use std::collections::HashMap;

use ndarray::{ArrayD, IxDyn};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use crate::io::{load_bytes, to_bytes, ExternalData, LoadOptions};
use crate::ir::Model;
use crate::pipeline::{self, OptimizeOptions};
use crate::report::OptimizeReport;
use crate::runtime::inputs::random_inputs;
use crate::runtime::reference::Executor;
use crate::view::{graph_view, Provenance};
use crate::{Limits, Tensor};

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** Options of `Model.optimize`; every field is optional. */
export interface OptimizeOptions {
  /** Rule names; empty or absent: the default rules (see `rules()`). The opt-in
   *  "fused_elementwise" (ai.fuselab ops that onnxruntime cannot run) is accepted by name. */
  rules?: string[];
  /** Sizes of symbolic input dims for the parity inputs (never changes the saved model). */
  dims?: Record<string, number>;
  /** Symbolic dims the optimized model is specialized to. */
  fix_dims?: Record<string, number>;
  /** Compare original and optimized outputs (default true). */
  parity?: boolean;
  /** Largest allowed absolute output difference (default 1e-4). */
  tolerance?: number;
  seed?: number;
}

/** Options of `Model.run` and `new Bench`. */
export interface RunOptions {
  dims?: Record<string, number>;
  seed?: number;
  /** "reference" (default). For WebGPU use `GpuModel.prepare`; "webgpu" here is an error. */
  backend?: string;
}

export type TensorData = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;

export interface TensorValue {
  dtype: "float32" | "float64" | "int32" | "int64" | "bool";
  shape: number[];
  data: TensorData;
}

export interface PortView { name: string; dtype: string | null; shape: string[] | null; constant: boolean }
export interface NodeView {
  id: string;
  kind: "op" | "input" | "output";
  name: string;
  op_type: string;
  domain: string;
  attributes: Record<string, string>;
  inputs: PortView[];
  outputs: PortView[];
  /** Set on a fused node: the rule that made it and the names of the original nodes it replaced. */
  fused: { rule: string; replaced: string[] } | null;
  /** Set on an original node that a fusion replaced: the fused node's name. */
  fused_into: string | null;
}
export interface GraphView { nodes: NodeView[]; edges: { from: string; to: string; value: string }[] }

export interface ModelSummary {
  nodes: number;
  ops: Record<string, number>;
  opsets: Record<string, number>;
  inputs: PortView[];
  outputs: PortView[];
}

export interface ParityReport { ok: boolean; max_abs_diff: number; tolerance: number; outputs: unknown[] }
export interface OptimizeReport {
  nodes_before: number;
  nodes_after: number;
  ops_before: Record<string, number>;
  ops_after: Record<string, number>;
  /** Fused op type (e.g. "SkipLayerNormalization") → fused nodes in the optimized graph. */
  fusions: Record<string, number>;
  rewrites: { rule: string; iteration: number; removed: unknown[]; added: unknown[] }[];
  rejected: { rule: string; candidate: string; op_type: string; reason: string }[];
  iterations: number;
  stop: "fixed_point" | "iteration_cap";
  parity: ParityReport | null;
  dims: Record<string, number>;
  optimize_ms: number;
}
"#;

fn err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// Serializes through JSON: results are plain JS objects.
fn to_js<T: Serialize>(v: &T) -> Result<JsValue, JsError> {
    let s = serde_json::to_string(v).map_err(err)?;
    js_sys::JSON::parse(&s).map_err(|_| JsError::new("result is not JSON"))
}

/// Reads an options object (undefined or null: the defaults).
fn from_js<T: DeserializeOwned + Default>(v: &JsValue, what: &str) -> Result<T, JsError> {
    if v.is_undefined() || v.is_null() {
        return Ok(T::default());
    }
    let s: String = js_sys::JSON::stringify(v)
        .map_err(|_| JsError::new(&format!("{what}: not a plain object")))?
        .into();
    serde_json::from_str(&s).map_err(|e| JsError::new(&format!("{what}: {e}")))
}

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

/// A loaded ONNX model.
#[wasm_bindgen(js_name = Model)]
pub struct WasmModel {
    model: Model,
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct JsOptimizeOptions {
    rules: Vec<String>,
    dims: HashMap<String, usize>,
    fix_dims: HashMap<String, i64>,
    parity: Option<bool>,
    tolerance: Option<f64>,
    seed: u64,
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct JsRunOptions {
    dims: HashMap<String, usize>,
    seed: u64,
    backend: Option<String>,
}

impl JsRunOptions {
    fn check_backend(&self) -> Result<(), JsError> {
        match self.backend.as_deref().unwrap_or("reference") {
            "reference" => Ok(()),
            "webgpu" => Err(JsError::new(
                "backend 'webgpu': prepare the model with GpuModel.prepare(model, options) and run \
                 that; Model.run and Bench run on the reference backend",
            )),
            b => Err(JsError::new(&format!(
                "unknown backend '{b}' (expected 'reference' or 'webgpu')"
            ))),
        }
    }
}

#[derive(Serialize)]
struct Summary {
    nodes: usize,
    ops: std::collections::BTreeMap<String, usize>,
    opsets: std::collections::BTreeMap<String, i64>,
    inputs: Vec<crate::view::PortView>,
    outputs: Vec<crate::view::PortView>,
}

#[wasm_bindgen(js_class = Model)]
impl WasmModel {
    /// Parses .onnx bytes. `external`: `{ fileName: Uint8Array }` for tensors stored in external
    /// data files (their `location`), or undefined.
    pub fn load(
        bytes: &[u8],
        #[wasm_bindgen(unchecked_param_type = "Record<string, Uint8Array> | undefined")]
        external: JsValue,
    ) -> Result<WasmModel, JsError> {
        let mut files = HashMap::new();
        if !external.is_undefined() && !external.is_null() {
            let obj: &js_sys::Object = external
                .dyn_ref()
                .ok_or_else(|| JsError::new("external: not an object of file bytes"))?;
            for entry in js_sys::Object::entries(obj).iter() {
                let pair: js_sys::Array = entry.into();
                let name = pair
                    .get(0)
                    .as_string()
                    .ok_or_else(|| JsError::new("external: file name is not a string"))?;
                let data: js_sys::Uint8Array = pair.get(1).dyn_into().map_err(|_| {
                    JsError::new(&format!("external: '{name}' is not a Uint8Array"))
                })?;
                files.insert(name, data.to_vec());
            }
        }
        let opts = LoadOptions {
            limits: Limits::default(),
            external: if files.is_empty() {
                ExternalData::None
            } else {
                ExternalData::Files(files)
            },
        };
        Ok(WasmModel {
            model: load_bytes(bytes, &opts).map_err(err)?,
        })
    }

    /// Node count, op histogram, opsets, graph inputs and outputs.
    #[wasm_bindgen(unchecked_return_type = "ModelSummary")]
    pub fn summary(&self) -> Result<JsValue, JsError> {
        let view = graph_view(&self.model, None);
        let ports = |kind: &str| {
            view.nodes
                .iter()
                .filter(|n| n.kind == kind)
                .flat_map(|n| n.inputs.iter().chain(&n.outputs).cloned())
                .collect()
        };
        to_js(&Summary {
            nodes: self.model.graph.node_count(),
            ops: crate::report::op_histogram(&self.model),
            opsets: self
                .model
                .proto
                .opset_import
                .iter()
                .map(|o| (o.domain.clone(), o.version))
                .collect(),
            inputs: ports("input"),
            outputs: ports("output"),
        })
    }

    /// Nodes, attributes, shapes and edges, for drawing.
    #[wasm_bindgen(unchecked_return_type = "GraphView")]
    pub fn graph(&self) -> Result<JsValue, JsError> {
        to_js(&graph_view(&self.model, None))
    }

    /// The model as .onnx bytes.
    pub fn bytes(&self) -> Result<Vec<u8>, JsError> {
        to_bytes(&self.model).map_err(err)
    }

    /// Runs the fusion rules, then (unless `parity: false`) compares original and optimized
    /// outputs on seeded random inputs.
    pub fn optimize(
        &self,
        #[wasm_bindgen(unchecked_param_type = "OptimizeOptions | undefined")] options: JsValue,
    ) -> Result<Optimized, JsError> {
        let o: JsOptimizeOptions = from_js(&options, "optimize options")?;
        let defaults = OptimizeOptions::default();
        let opts = OptimizeOptions {
            rules: o.rules,
            parity: o.parity.unwrap_or(true),
            tolerance: o.tolerance.unwrap_or(defaults.tolerance),
            dims: o.dims,
            fix_dims: o.fix_dims,
            seed: o.seed,
            ..defaults
        };
        let clock = js_sys::Date::now;
        let (optimized, report) = pipeline::optimize(&self.model, &opts, &clock).map_err(err)?;
        let prov = Provenance::from_rewrites(&report.rewrites);
        Ok(Optimized {
            before: graph_view(&self.model, Some(&prov)),
            after: graph_view(&optimized, Some(&prov)),
            model: optimized,
            report,
        })
    }

    /// Runs the model once. `inputs`: `{ name: { dtype, shape, data } }`; inputs not given get
    /// seeded random values sized by `options.dims`. Returns every graph output.
    #[wasm_bindgen(unchecked_return_type = "Record<string, TensorValue>")]
    pub fn run(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Record<string, TensorValue> | undefined")]
        inputs: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RunOptions | undefined")] options: JsValue,
    ) -> Result<JsValue, JsError> {
        let o: JsRunOptions = from_js(&options, "run options")?;
        o.check_backend()?;
        let given = tensors_from_js(&inputs)?;
        let limits = Limits::default();
        let feeds = random_inputs(&self.model, &given, &o.dims, o.seed, &limits).map_err(err)?;
        let ex = Executor::new(&self.model, &limits).map_err(err)?;
        let outs = ex.run(&feeds).map_err(err)?;
        outputs_to_js(&outs)
    }
}

/// A model prepared on the browser's WebGPU (the WebGPU backend, `src/runtime/webgpu/`), for
/// inputs sized by `dims`. Every method returns a Promise: the browser cannot block on a GPU.
#[wasm_bindgen]
pub struct GpuModel {
    session: std::rc::Rc<crate::runtime::webgpu::GpuSession>,
    original: Model,
}

#[wasm_bindgen]
impl GpuModel {
    /// Finds an adapter and prepares `model`; rejects with a clear error where the browser has
    /// no WebGPU or no adapter (callers then run on the reference backend and say so).
    #[wasm_bindgen(unchecked_return_type = "Promise<GpuModel>")]
    pub fn prepare(
        model: &WasmModel,
        #[wasm_bindgen(unchecked_param_type = "RunOptions | undefined")] options: JsValue,
    ) -> Result<js_sys::Promise, JsError> {
        let o: JsRunOptions = from_js(&options, "gpu options")?;
        let m = model.model.clone();
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            Ok(GpuModel::prepare_with(m, o.dims).await?.into())
        }))
    }

    /// Compute dispatches one run encodes.
    pub fn dispatches(&self) -> usize {
        self.session.dispatches()
    }

    /// Runs once on the GPU. `inputs` as for `Model.run` (missing ones get the seeded random
    /// values `Model.run` would give them, sized as prepared).
    #[wasm_bindgen(unchecked_return_type = "Promise<Record<string, TensorValue>>")]
    pub fn run(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Record<string, TensorValue> | undefined")]
        inputs: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RunOptions | undefined")] options: JsValue,
    ) -> Result<js_sys::Promise, JsError> {
        let o: JsRunOptions = from_js(&options, "run options")?;
        let given = tensors_from_js(&inputs)?;
        let feeds = random_inputs(&self.original, &given, &o.dims, o.seed, &Limits::default())
            .map_err(err)?;
        let session = self.session.clone();
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let outs = session.run(&feeds).await.map_err(js_err)?;
            outputs_to_js(&outs).map_err(JsValue::from)
        }))
    }
}

impl GpuModel {
    /// `prepare` for Rust callers (the wasm tests).
    pub async fn prepare_with(
        model: Model,
        dims: HashMap<String, usize>,
    ) -> Result<GpuModel, JsValue> {
        let gpu = crate::runtime::webgpu::Gpu::new().await.map_err(js_err)?;
        let session =
            crate::runtime::webgpu::GpuSession::new(&gpu, &model, &dims, &Limits::default())
                .await
                .map_err(js_err)?;
        Ok(GpuModel {
            session: std::rc::Rc::new(session),
            original: model,
        })
    }

    /// One run for Rust callers: outputs by name.
    pub async fn run_with(
        &self,
        dims: &HashMap<String, usize>,
        seed: u64,
    ) -> Result<Vec<(String, Tensor)>, JsValue> {
        let feeds = random_inputs(
            &self.original,
            &HashMap::new(),
            dims,
            seed,
            &Limits::default(),
        )
        .map_err(js_err)?;
        self.session.run(&feeds).await.map_err(js_err)
    }
}

impl WasmModel {
    /// The model inside (for Rust callers).
    pub fn inner(&self) -> &Model {
        &self.model
    }
}

fn js_err(e: impl std::fmt::Display) -> JsValue {
    JsError::new(&e.to_string()).into()
}

/// What `Model.optimize` returns.
#[wasm_bindgen]
pub struct Optimized {
    model: Model,
    report: OptimizeReport,
    before: crate::view::GraphView,
    after: crate::view::GraphView,
}

#[wasm_bindgen]
impl Optimized {
    /// The optimized model.
    pub fn model(&self) -> WasmModel {
        WasmModel {
            model: self.model.clone(),
        }
    }

    /// The optimized model as .onnx bytes.
    pub fn bytes(&self) -> Result<Vec<u8>, JsError> {
        to_bytes(&self.model).map_err(err)
    }

    /// The report (the CLI's REPORT.json).
    #[wasm_bindgen(unchecked_return_type = "OptimizeReport")]
    pub fn report(&self) -> Result<JsValue, JsError> {
        to_js(&self.report)
    }

    /// The original graph; nodes a fusion replaced carry `fused_into`.
    #[wasm_bindgen(js_name = graphBefore, unchecked_return_type = "GraphView")]
    pub fn graph_before(&self) -> Result<JsValue, JsError> {
        to_js(&self.before)
    }

    /// The optimized graph; fused nodes carry `fused` (rule and the nodes they replaced).
    #[wasm_bindgen(js_name = graphAfter, unchecked_return_type = "GraphView")]
    pub fn graph_after(&self) -> Result<JsValue, JsError> {
        to_js(&self.after)
    }
}

/// Original vs optimized on the same inputs, timed by the caller's clock, interleaved (the order
/// alternates every run) so that noise hits both alike. Call `step` in small batches from a
/// worker to report progress.
#[wasm_bindgen]
pub struct Bench {
    original: Model,
    optimized: Model,
    inputs: HashMap<String, Tensor>,
    done: u32,
    repeat: u32,
}

#[wasm_bindgen]
impl Bench {
    #[wasm_bindgen(constructor)]
    pub fn new(
        original: &WasmModel,
        optimized: &WasmModel,
        #[wasm_bindgen(unchecked_param_type = "RunOptions | undefined")] options: JsValue,
    ) -> Result<Bench, JsError> {
        let o: JsRunOptions = from_js(&options, "bench options")?;
        o.check_backend()?;
        let limits = Limits::default();
        let inputs = random_inputs(&original.model, &HashMap::new(), &o.dims, o.seed, &limits)
            .map_err(err)?;
        Ok(Bench {
            original: original.model.clone(),
            optimized: optimized.model.clone(),
            inputs,
            done: 0,
            repeat: 1,
        })
    }

    /// Runs of one graph per sample (default 1): a sample times that many back-to-back runs and
    /// reports their mean, so that runs shorter than the clock's resolution still measure.
    #[wasm_bindgen(getter)]
    pub fn repeat(&self) -> u32 {
        self.repeat
    }

    /// Warms both graphs up, then sets `repeat` so that one sample of the faster graph takes at
    /// least `min_ms` by `now` (capped at 10,000 runs); returns it. Warm-up: pairs of runs for
    /// `WARM_UP_MS` (at least 3 pairs), because engines first run wasm through a baseline
    /// compiler and tier hot functions up in the background: in Chromium, 20 runs of gpt2_tiny
    /// right after loading measured its unfused graph (many distinct kernels) at 1.7 ms, against
    /// 0.9 ms a second later; 200 ms of warm-up was not enough. Calibration: browsers coarsen
    /// `performance.now()` (to 0.1 ms unless the page is cross-origin isolated), which
    /// sub-millisecond models fall under.
    pub fn calibrate(&mut self, min_ms: f64, now: &js_sys::Function) -> Result<u32, JsError> {
        let limits = Limits::default();
        let a = Executor::new(&self.original, &limits).map_err(err)?;
        let ex = Executor::new(&self.optimized, &limits).map_err(err)?;
        let clock = clock_of(now);
        let start = clock()?;
        for pair in 0..100_000 {
            if pair >= 3 && clock()? - start >= WARM_UP_MS {
                break;
            }
            a.run(&self.inputs).map_err(err)?;
            ex.run(&self.inputs).map_err(err)?;
        }
        let mut runs = 1u32;
        loop {
            // The fastest of three, so that one preempted sample does not stop the search.
            let mut dt = f64::INFINITY;
            for _ in 0..3 {
                let t0 = clock()?;
                for _ in 0..runs {
                    ex.run(&self.inputs).map_err(err)?;
                }
                dt = dt.min(clock()? - t0);
            }
            if dt >= min_ms || runs >= 10_000 {
                break;
            }
            runs = (runs * 2).min(10_000);
        }
        self.repeat = runs;
        Ok(runs)
    }

    /// Runs `pairs` more interleaved samples of both graphs; returns [original ms, optimized ms]
    /// per pair, flat, each the mean over `repeat` runs. `now` is the clock in milliseconds
    /// (`() => performance.now()`).
    pub fn step(&mut self, pairs: u32, now: &js_sys::Function) -> Result<Vec<f64>, JsError> {
        let limits = Limits::default();
        let a = Executor::new(&self.original, &limits).map_err(err)?;
        let b = Executor::new(&self.optimized, &limits).map_err(err)?;
        let clock = clock_of(now);
        let mut out = vec![0.0; 2 * pairs as usize];
        for i in 0..pairs as usize {
            let order = if (self.done as usize + i).is_multiple_of(2) {
                [0, 1]
            } else {
                [1, 0]
            };
            for which in order {
                let ex = if which == 0 { &a } else { &b };
                let t0 = clock()?;
                for _ in 0..self.repeat {
                    ex.run(&self.inputs).map_err(err)?;
                }
                out[2 * i + which] = (clock()? - t0) / self.repeat as f64;
            }
        }
        self.done += pairs;
        Ok(out)
    }
}

/// How long `Bench::calibrate` runs both graphs before measuring.
const WARM_UP_MS: f64 = 1000.0;

fn clock_of(now: &js_sys::Function) -> impl Fn() -> Result<f64, JsError> + '_ {
    move || {
        now.call0(&JsValue::NULL)
            .ok()
            .and_then(|v| v.as_f64())
            .ok_or_else(|| JsError::new("bench clock did not return a number"))
    }
}

fn dims_of(v: &JsValue, name: &str) -> Result<Vec<usize>, JsError> {
    let shape = js_sys::Reflect::get(v, &"shape".into()).unwrap_or(JsValue::UNDEFINED);
    let arr: js_sys::Array = shape
        .dyn_into()
        .map_err(|_| JsError::new(&format!("input '{name}': shape is not an array")))?;
    arr.iter()
        .map(|d| {
            d.as_f64()
                .filter(|x| *x >= 0.0 && x.fract() == 0.0 && *x <= u32::MAX as f64)
                .map(|x| x as usize)
                .ok_or_else(|| JsError::new(&format!("input '{name}': bad dim in shape")))
        })
        .collect()
}

fn tensors_from_js(v: &JsValue) -> Result<HashMap<String, Tensor>, JsError> {
    let mut out = HashMap::new();
    if v.is_undefined() || v.is_null() {
        return Ok(out);
    }
    let obj: &js_sys::Object = v
        .dyn_ref()
        .ok_or_else(|| JsError::new("inputs: not an object"))?;
    for entry in js_sys::Object::entries(obj).iter() {
        let pair: js_sys::Array = entry.into();
        let name = pair.get(0).as_string().unwrap_or_default();
        let t = pair.get(1);
        let dtype = js_sys::Reflect::get(&t, &"dtype".into())
            .ok()
            .and_then(|d| d.as_string())
            .ok_or_else(|| JsError::new(&format!("input '{name}': dtype is not a string")))?;
        let shape = dims_of(&t, &name)?;
        let data = js_sys::Reflect::get(&t, &"data".into()).unwrap_or(JsValue::UNDEFINED);
        let bad = || {
            JsError::new(&format!(
                "input '{name}': data is not a {dtype} typed array"
            ))
        };
        // One arm per dtype: the typed array it must be, and the Tensor variant it becomes.
        macro_rules! typed {
            ($js:ty, $variant:ident) => {
                Tensor::$variant(array(
                    &name,
                    &shape,
                    data.dyn_ref::<$js>().ok_or_else(bad)?.to_vec(),
                )?)
            };
        }
        let tensor = match dtype.as_str() {
            "float32" => typed!(js_sys::Float32Array, F32),
            "float64" => typed!(js_sys::Float64Array, F64),
            "int32" => typed!(js_sys::Int32Array, I32),
            "int64" => typed!(js_sys::BigInt64Array, I64),
            "bool" => {
                let bytes = data.dyn_ref::<js_sys::Uint8Array>().ok_or_else(bad)?;
                Tensor::Bool(array(
                    &name,
                    &shape,
                    bytes.to_vec().into_iter().map(|b| b != 0).collect(),
                )?)
            }
            d => {
                return Err(JsError::new(&format!(
                    "input '{name}': dtype '{d}' is not one of float32, float64, int32, int64, bool"
                )))
            }
        };
        out.insert(name, tensor);
    }
    Ok(out)
}

fn array<T>(name: &str, shape: &[usize], data: Vec<T>) -> Result<ArrayD<T>, JsError> {
    let len = data.len();
    ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|_| {
        JsError::new(&format!(
            "input '{name}': {len} values do not fill shape {shape:?}"
        ))
    })
}

/// Graph outputs as `{ name: TensorValue }`.
fn outputs_to_js(outs: &[(String, Tensor)]) -> Result<JsValue, JsError> {
    let result = js_sys::Object::new();
    for (name, t) in outs {
        js_sys::Reflect::set(&result, &name.into(), &tensor_to_js(t)?)
            .map_err(|_| JsError::new("cannot build the result"))?;
    }
    Ok(result.into())
}

fn tensor_to_js(t: &Tensor) -> Result<JsValue, JsError> {
    macro_rules! typed {
        ($js:ty, $a:expr) => {
            <$js>::from($a.iter().copied().collect::<Vec<_>>().as_slice()).into()
        };
    }
    let data: JsValue = match t {
        Tensor::F32(a) => typed!(js_sys::Float32Array, a),
        Tensor::F64(a) => typed!(js_sys::Float64Array, a),
        Tensor::I32(a) => typed!(js_sys::Int32Array, a),
        Tensor::I64(a) => typed!(js_sys::BigInt64Array, a),
        Tensor::Bool(a) => typed!(js_sys::Uint8Array, a.mapv(|b| b as u8)),
    };
    let o = js_sys::Object::new();
    let shape = js_sys::Array::new();
    for &d in t.shape() {
        shape.push(&JsValue::from(d as f64));
    }
    let set = |k: &str, v: &JsValue| {
        js_sys::Reflect::set(&o, &k.into(), v).map_err(|_| JsError::new("cannot build a tensor"))
    };
    set("dtype", &JsValue::from(t.dtype().name()))?;
    set("shape", &shape)?;
    set("data", &data)?;
    Ok(o.into())
}
