//! `GpuModel`: a model prepared on the browser's WebGPU (the WebGPU backend,
//! `src/runtime/webgpu/`).

use std::collections::HashMap;
use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::convert::{from_js, outputs_to_js, tensors_from_js};
use super::{err, js_err, RunOptions, WasmModel};
use crate::ir::Model;
use crate::runtime::inputs::random_inputs;
use crate::runtime::webgpu::{Gpu, GpuSession};
use crate::{Limits, Tensor};

/// A model prepared on the browser's WebGPU for inputs sized by `dims`. It runs the graph it was
/// given (to benchmark an optimized graph as the WebGPU backend runs it, use `GpuBench`). Every
/// method that touches the GPU returns a Promise: the browser cannot block on a GPU.
#[wasm_bindgen]
pub struct GpuModel {
    session: Rc<GpuSession>,
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
        let o: RunOptions = from_js(&options, "gpu options")?;
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
        let o: RunOptions = from_js(&options, "run options")?;
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
        let gpu = Gpu::new().await.map_err(js_err)?;
        let session = GpuSession::new(&gpu, &model, &dims, &Limits::default())
            .await
            .map_err(js_err)?;
        Ok(GpuModel {
            session: Rc::new(session),
            original: model,
        })
    }

    /// One run on given inputs, for Rust callers (the wasm tests: the same feeds as the
    /// reference backend's run of another graph): outputs by name.
    pub async fn run_inputs(
        &self,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<Vec<(String, Tensor)>, JsValue> {
        self.session.run(inputs).await.map_err(js_err)
    }

    /// One run for Rust callers: outputs by name.
    pub async fn run_with(
        &self,
        dims: &HashMap<String, usize>,
        seed: u64,
    ) -> Result<Vec<(String, Tensor)>, JsValue> {
        let limits = Limits::default();
        let feeds =
            random_inputs(&self.original, &HashMap::new(), dims, seed, &limits).map_err(js_err)?;
        self.session.run(&feeds).await.map_err(js_err)
    }
}
