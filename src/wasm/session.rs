//! `Session`: a model planned once and run many times on the reference backend. `Model.run`
//! plans the model on every call (ops resolved, constants looked up, last uses computed) and
//! drops what kernels prepared (packed weights); a session keeps all of it between runs.

use std::collections::HashMap;
use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::convert::{from_js, outputs_to_js, tensors_from_js};
use super::{err, RunOptions, WasmModel};
use crate::ir::Model;
use crate::runtime::inputs::random_inputs;
use crate::runtime::reference::Executor;
use crate::Limits;

/// The reference backend's executor for one model, kept for repeated runs.
#[wasm_bindgen]
pub struct Session {
    // Borrows `*model`. Declared first, so it is dropped first, while the model is alive; the
    // model is never mutated or moved (it sits behind the Rc) while the session lives.
    executor: Executor<'static>,
    model: Rc<Model>,
    dims: HashMap<String, usize>,
    seed: u64,
    threads: usize,
}

#[wasm_bindgen(js_class = Model)]
impl WasmModel {
    /// Plans the model once for repeated runs (`session.run(inputs)`), on the reference
    /// backend. `options`: `dims` and `seed` of the random inputs for what `run` is not given, and
    /// `threads` for every run.
    pub fn session(
        &self,
        #[wasm_bindgen(unchecked_param_type = "RunOptions | undefined")] options: JsValue,
    ) -> Result<Session, JsError> {
        let o: RunOptions = from_js(&options, "session options")?;
        o.check_reference()?;
        let threads = o.threads();
        // Refused now rather than at the first run.
        crate::threads::check(threads).map_err(err)?;
        let model = Rc::new(self.model.clone());
        // SAFETY: the reference points into the Rc's allocation, which `Session` owns and frees
        // only after dropping `executor` (field order), and nothing mutates it meanwhile.
        let borrowed: &'static Model = unsafe { &*Rc::as_ptr(&model) };
        let executor = Executor::new(borrowed, &Limits::default()).map_err(err)?;
        Ok(Session {
            executor,
            model,
            dims: o.dims,
            seed: o.seed,
            threads,
        })
    }
}

#[wasm_bindgen]
impl Session {
    /// Runs the model: `inputs` as for `Model.run` (`{ name: { dtype, shape, data } }`; inputs
    /// not given are seeded random ones sized by the session's `dims`). Returns the outputs.
    pub fn run(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Record<string, TensorValue> | undefined")]
        inputs: JsValue,
    ) -> Result<JsValue, JsError> {
        let given = tensors_from_js(&inputs)?;
        let limits = Limits::default();
        let feeds =
            random_inputs(&self.model, &given, &self.dims, self.seed, &limits).map_err(err)?;
        let executor = &self.executor;
        let out =
            crate::threads::with_threads(self.threads, || executor.run(&feeds)).map_err(err)?;
        outputs_to_js(&out.map_err(err)?)
    }
}
