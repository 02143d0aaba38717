//! The wasm-bindgen facade: model bytes in, optimized bytes and report JSON out. Thin on
//! purpose: everything it calls is the same code the native CLI runs.

use wasm_bindgen::prelude::*;

use crate::ir::Model;
use crate::onnx::{load_bytes, to_bytes, LoadOptions};
use crate::pipeline::{self, OptimizeOptions};

fn js_err(e: crate::Error) -> JsError {
    JsError::new(&e.to_string())
}

fn load(model: &[u8]) -> Result<Model, JsError> {
    load_bytes(model, &LoadOptions::default()).map_err(js_err)
}

/// The result of `optimize`: the optimized model's bytes and the report as JSON.
#[wasm_bindgen]
pub struct Optimized {
    model: Vec<u8>,
    report: String,
}

#[wasm_bindgen]
impl Optimized {
    /// The optimized .onnx bytes.
    #[wasm_bindgen(getter)]
    pub fn model(&self) -> Vec<u8> {
        self.model.clone()
    }

    /// The optimization report (same fields as the CLI's REPORT.json).
    #[wasm_bindgen(getter)]
    pub fn report(&self) -> String {
        self.report.clone()
    }
}

/// Optimizes `model` (.onnx bytes). `rules`: comma-separated rule names, empty for all. `dims`:
/// JSON object of symbolic dim sizes for the parity inputs, e.g. `{"N": 64}` (or empty).
#[wasm_bindgen]
pub fn optimize(model: &[u8], rules: &str, dims: &str, parity: bool) -> Result<Optimized, JsError> {
    let original = load(model)?;
    let dims = if dims.trim().is_empty() {
        Default::default()
    } else {
        serde_json::from_str(dims).map_err(|e| JsError::new(&format!("dims: {e}")))?
    };
    let opts = OptimizeOptions {
        rules: rules
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(String::from)
            .collect(),
        parity,
        dims,
        ..Default::default()
    };
    let clock = js_sys::Date::now;
    let (optimized, report) = pipeline::optimize(&original, &opts, &clock).map_err(js_err)?;
    Ok(Optimized {
        model: to_bytes(&optimized).map_err(js_err)?,
        report: serde_json::to_string(&report).expect("serializable"),
    })
}

/// Node count and op-type histogram of `model`, as JSON.
#[wasm_bindgen]
pub fn inspect(model: &[u8]) -> Result<String, JsError> {
    let m = load(model)?;
    let summary = serde_json::json!({
        "nodes": m.graph.node_count(),
        "ops": crate::report::op_histogram(&m),
    });
    Ok(summary.to_string())
}
