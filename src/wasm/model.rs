//! `Model` (a loaded ONNX model) and `Optimized` (what `Model.optimize` returns).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use tsify::Tsify;
use wasm_bindgen::prelude::*;

use super::convert::{from_js, outputs_to_js, tensors_from_js, to_js};
use super::{err, OptimizeOptions, RunOptions};
use crate::io::{load_buf, to_bytes, ExternalData, LoadOptions};
use crate::ir::Model;
use crate::pipeline;
use crate::report::OptimizeReport;
use crate::runtime::inputs::random_inputs;
use crate::runtime::reference::Executor;
use crate::view::{graph_view, GraphView, NodeKind, PortView, Provenance};
use crate::Limits;

/// A loaded ONNX model.
#[wasm_bindgen(js_name = Model)]
pub struct WasmModel {
    pub(super) model: Model,
}

/// What `Model.summary` returns.
#[derive(Serialize, Tsify)]
pub struct ModelSummary {
    pub nodes: usize,
    /// Op type → nodes.
    pub ops: BTreeMap<String, usize>,
    /// Domain ("" for the default) → opset version.
    pub opsets: BTreeMap<String, i64>,
    pub inputs: Vec<PortView>,
    pub outputs: Vec<PortView>,
    /// Symbolic dims the model computes as sums of others (a decode step's `total` = past +
    /// seq, its present outputs' length): unless given, inputs get them from those sums, so a
    /// form asking for sizes should leave them out.
    pub summed_dims: Vec<String>,
}

#[wasm_bindgen(js_class = Model)]
impl WasmModel {
    /// Parses .onnx bytes. `external`: `{ fileName: Uint8Array }` for tensors stored in external
    /// data files (their `location`), or undefined.
    pub fn load(
        bytes: js_sys::Uint8Array,
        #[wasm_bindgen(unchecked_param_type = "Record<string, Uint8Array> | undefined")]
        external: JsValue,
    ) -> Result<WasmModel, JsError> {
        // Sizes first: nothing is copied into wasm memory for a model past its ceiling.
        let mut sized: Vec<(String, js_sys::Uint8Array)> = Vec::new();
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
                sized.push((name, data));
            }
        }
        let total =
            (sized.iter().map(|(_, d)| d.length() as u64)).sum::<u64>() + bytes.length() as u64;
        crate::limits::check_wasm_model_bytes(total).map_err(err)?;
        let files: HashMap<String, bytes::Bytes> = sized
            .into_iter()
            .map(|(name, data)| (name, bytes::Bytes::from(data.to_vec())))
            .collect();
        let external = match files.is_empty() {
            true => ExternalData::None,
            false => ExternalData::Files(files),
        };
        let opts = LoadOptions {
            limits: Limits::default(),
            external,
        };
        Ok(WasmModel {
            model: load_buf(bytes.to_vec().into(), &opts).map_err(err)?,
        })
    }

    /// Node count, op histogram, opsets, graph inputs and outputs.
    #[wasm_bindgen(unchecked_return_type = "ModelSummary")]
    pub fn summary(&self) -> Result<JsValue, JsError> {
        let view = graph_view(&self.model, None);
        let ports = |kind: NodeKind| {
            view.nodes
                .iter()
                .filter(|n| n.kind == kind)
                .flat_map(|n| n.inputs.iter().chain(&n.outputs).cloned())
                .collect()
        };
        to_js(&ModelSummary {
            nodes: self.model.graph.node_count(),
            ops: crate::report::op_histogram(&self.model),
            opsets: {
                // Inserted one by one: collecting into a BTreeMap sorts with a copy of its own.
                let mut m = BTreeMap::new();
                for o in &self.model.proto.opset_import {
                    m.insert(o.domain.clone(), o.version);
                }
                m
            },
            inputs: ports(NodeKind::Input),
            outputs: ports(NodeKind::Output),
            summed_dims: {
                let sums = crate::runtime::inputs::with_stated_sums(&self.model, &HashMap::new());
                let mut names: Vec<String> = sums.into_keys().collect();
                crate::ops::common::sort_by_dyn(&mut names, &|a, b| a.cmp(b));
                names
            },
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
        let o: OptimizeOptions = from_js(&options, "optimize options")?;
        let defaults = pipeline::OptimizeOptions::default();
        let opts = pipeline::OptimizeOptions {
            rules: o.rules,
            target: o.target,
            parity: o.parity.unwrap_or(true),
            tolerance: o.tolerance.or(defaults.tolerance),
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
        let o: RunOptions = from_js(&options, "run options")?;
        o.check_reference()?;
        let given = tensors_from_js(&inputs)?;
        let limits = Limits::default();
        let feeds = random_inputs(&self.model, &given, &o.dims, o.seed, &limits).map_err(err)?;
        let ex = Executor::new(&self.model, &limits).map_err(err)?;
        let out = crate::threads::with_threads(o.threads(), || ex.run(&feeds)).map_err(err)?;
        outputs_to_js(&out.map_err(err)?)
    }
}

#[wasm_bindgen(js_class = Model)]
impl WasmModel {
    /// Profiles the model as it is on the reference backend (`fuselab profile`): time per op type
    /// and per op sequence, and the sequences as fusion candidates, each with the rule that
    /// already fuses it or null. For what the rules leave, profile `optimize(...).model()`: its
    /// node names are those of `graphAfter()`. `runs`: timed runs after one untimed one (default
    /// 10); `now`: the clock in milliseconds (`() => performance.now()`).
    #[wasm_bindgen(unchecked_return_type = "Profile")]
    pub fn profile(
        &self,
        #[wasm_bindgen(unchecked_param_type = "RunOptions | undefined")] options: JsValue,
        runs: Option<u32>,
        now: &js_sys::Function,
    ) -> Result<JsValue, JsError> {
        let o: RunOptions = from_js(&options, "profile options")?;
        o.check_reference()?;
        if runs == Some(0) {
            return Err(JsError::new("profile: runs must be at least 1"));
        }
        if o.threads() != 1 {
            return Err(JsError::new("profile: runs on one thread (threads: 1)"));
        }
        let opts = crate::profile::ProfileOptions {
            runs: runs.unwrap_or(10) as usize,
            dims: o.dims,
            seed: o.seed,
            ..Default::default()
        };
        let read = super::convert::clock(now);
        read()?;
        let clock = || read().unwrap_or(0.0);
        to_js(&crate::profile::profile_reference(&self.model, &opts, &clock).map_err(err)?)
    }
}

impl WasmModel {
    /// The model inside (for Rust callers).
    pub fn inner(&self) -> &Model {
        &self.model
    }
}

/// What `Model.optimize` returns.
#[wasm_bindgen]
pub struct Optimized {
    model: Model,
    report: OptimizeReport,
    before: GraphView,
    after: GraphView,
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
