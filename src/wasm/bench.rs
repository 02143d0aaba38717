//! `Bench` (reference backend) and `GpuBench` (WebGPU): original vs optimized on the same
//! inputs under the policy of `crate::bench` (warm-up, calibration, interleaving, statistics),
//! timed by the caller's clock. Call `step` in small batches from a worker to report progress.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::convert::{clock, from_js, to_js};
use super::{err, js_err, RunOptions, WasmModel};
use crate::bench::{self, Graph, Pair, Policy};
use crate::ir::Model;
use crate::pipeline::{self, Backend};
use crate::runtime::inputs::random_inputs;
use crate::runtime::reference::Executor;
use crate::runtime::webgpu::{Gpu, GpuSession};
use crate::{Limits, Tensor};

/// Original vs optimized on the reference backend.
#[wasm_bindgen]
pub struct Bench {
    /// Original, optimized.
    graphs: [Model; 2],
    inputs: HashMap<String, Tensor>,
    bench: bench::Bench,
    threads: usize,
}

#[wasm_bindgen]
impl Bench {
    #[wasm_bindgen(constructor)]
    pub fn new(
        original: &WasmModel,
        optimized: &WasmModel,
        #[wasm_bindgen(unchecked_param_type = "RunOptions | undefined")] options: JsValue,
    ) -> Result<Bench, JsError> {
        let o: RunOptions = from_js(&options, "bench options")?;
        o.check_reference()?;
        let threads = o.threads();
        crate::threads::check(threads).map_err(err)?;
        let limits = Limits::default();
        let inputs = random_inputs(&original.model, &HashMap::new(), &o.dims, o.seed, &limits)
            .map_err(err)?;
        Ok(Bench {
            graphs: [original.model.clone(), optimized.model.clone()],
            inputs,
            bench: bench::Bench::new(Policy::BROWSER),
            threads,
        })
    }

    /// Runs of one graph per sample (1 until `calibrate`): a sample times that many back-to-back
    /// runs and reports their mean, so that runs shorter than the clock's resolution still
    /// measure.
    #[wasm_bindgen(getter)]
    pub fn repeat(&self) -> u32 {
        self.bench.repeat()
    }

    /// Warms both graphs up (1 s, at least 3 pairs), then doubles `repeat` until one sample takes
    /// at least `min_ms` (default 1) by `now` (capped at 10,000 runs); returns it. Drops the
    /// samples taken before.
    pub fn calibrate(
        &mut self,
        min_ms: Option<f64>,
        now: &js_sys::Function,
    ) -> Result<u32, JsError> {
        let ex = executors(&self.graphs)?;
        let run = runner(&ex, &self.inputs, self.threads);
        self.bench.calibrate(min_ms, clock(now), run)
    }

    /// Takes `pairs` more interleaved samples of both graphs; returns [original ms, optimized ms]
    /// per pair, flat, each the mean over `repeat` runs. `now` is the clock in milliseconds
    /// (`() => performance.now()`).
    pub fn step(&mut self, pairs: u32, now: &js_sys::Function) -> Result<Vec<f64>, JsError> {
        let ex = executors(&self.graphs)?;
        let run = runner(&ex, &self.inputs, self.threads);
        self.bench.sample(pairs.into(), clock(now), run)
    }

    /// Medians, minimums and the speedup over the samples since the last calibration.
    #[wasm_bindgen(unchecked_return_type = "BenchSummary")]
    pub fn summary(&self) -> Result<JsValue, JsError> {
        to_js(&self.bench.summary())
    }
}

/// One timed run of a graph, on `threads` threads (the clock is read outside, on this thread).
fn runner<'a>(
    ex: &'a [Executor<'_>; 2],
    inputs: &'a HashMap<String, Tensor>,
    threads: usize,
) -> impl Fn(Graph) -> Result<(), JsError> + 'a {
    move |g: Graph| {
        let e = &ex[g.index()];
        crate::threads::with_threads(threads, || e.run(inputs).map(drop))
            .map_err(err)?
            .map_err(err)
    }
}

fn executors(graphs: &[Model; 2]) -> Result<[Executor<'_>; 2], JsError> {
    let limits = Limits::default();
    let [a, b] = graphs;
    Ok([
        Executor::new(a, &limits).map_err(err)?,
        Executor::new(b, &limits).map_err(err)?,
    ])
}

/// Original vs optimized on the browser's WebGPU, the optimized graph as the WebGPU backend
/// runs it (`pipeline::for_backend`, as `fuselab bench --backend webgpu`). Each run uploads the
/// inputs, submits every dispatch and reads the outputs back, as an application would.
#[wasm_bindgen]
pub struct GpuBench {
    state: Rc<GpuState>,
}

struct GpuState {
    sessions: [GpuSession; 2],
    nodes: Pair<usize>,
    inputs: HashMap<String, Tensor>,
    /// Taken out while a `calibrate` or `step` runs.
    bench: RefCell<Option<bench::Bench>>,
    repeat: Cell<u32>,
}

#[wasm_bindgen]
impl GpuBench {
    /// Finds an adapter and prepares both graphs; rejects with a clear error where the browser
    /// has no WebGPU or no adapter.
    #[wasm_bindgen(unchecked_return_type = "Promise<GpuBench>")]
    pub fn prepare(
        original: &WasmModel,
        optimized: &WasmModel,
        #[wasm_bindgen(unchecked_param_type = "RunOptions | undefined")] options: JsValue,
    ) -> Result<js_sys::Promise, JsError> {
        let o: RunOptions = from_js(&options, "gpu bench options")?;
        let (a, b) = (original.model.clone(), optimized.model.clone());
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            Ok(GpuBench::prepare_with(a, b, o.dims, o.seed).await?.into())
        }))
    }

    /// As `Bench.calibrate`; resolves to the runs per sample.
    #[wasm_bindgen(unchecked_return_type = "Promise<number>")]
    pub fn calibrate(&self, min_ms: Option<f64>, now: js_sys::Function) -> js_sys::Promise {
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let repeat = state.drive(now, |b| b.start_calibration(min_ms)).await?;
            Ok(repeat.into())
        })
    }

    /// As `Bench.step`; resolves to [original ms, optimized ms] per pair, flat.
    #[wasm_bindgen(unchecked_return_type = "Promise<Float64Array>")]
    pub fn step(&self, pairs: u32, now: js_sys::Function) -> js_sys::Promise {
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut from = 0;
            state
                .drive(now, |b| {
                    b.start_samples(pairs.into());
                    from = b.samples(Graph::Original).len();
                })
                .await?;
            let b = state.bench.borrow();
            let taken = b.as_ref().map(|b| b.taken_since(from)).unwrap_or_default();
            Ok(js_sys::Float64Array::from(taken.as_slice()).into())
        })
    }

    #[wasm_bindgen(getter)]
    pub fn repeat(&self) -> u32 {
        self.state.repeat.get()
    }

    /// As `Bench.summary`.
    #[wasm_bindgen(unchecked_return_type = "BenchSummary")]
    pub fn summary(&self) -> Result<JsValue, JsError> {
        let b = self.state.bench.borrow();
        to_js(&b.as_ref().ok_or_else(busy)?.summary())
    }

    /// Compute dispatches one run of each graph encodes.
    #[wasm_bindgen(unchecked_return_type = "Pair<number>")]
    pub fn dispatches(&self) -> Result<JsValue, JsError> {
        let [a, b] = &self.state.sessions;
        to_js(&Pair {
            original: a.dispatches(),
            optimized: b.dispatches(),
        })
    }

    /// Nodes of each graph as run (the optimized one with the backend's lowering).
    #[wasm_bindgen(unchecked_return_type = "Pair<number>")]
    pub fn nodes(&self) -> Result<JsValue, JsError> {
        to_js(&self.state.nodes)
    }
}

fn busy() -> JsError {
    JsError::new("GpuBench: a calibrate or step is still running; await it first")
}

impl GpuBench {
    /// `prepare` for Rust callers (the wasm tests): `optimized` as the default rules left it.
    pub async fn prepare_with(
        original: Model,
        optimized: Model,
        dims: HashMap<String, usize>,
        seed: u64,
    ) -> Result<GpuBench, JsValue> {
        let limits = Limits::default();
        let optimized = pipeline::for_backend(&optimized, Backend::Webgpu).map_err(js_err)?;
        let inputs =
            random_inputs(&original, &HashMap::new(), &dims, seed, &limits).map_err(js_err)?;
        let gpu = Gpu::new().await.map_err(js_err)?;
        let prepare = |m| GpuSession::for_inputs(&gpu, m, &inputs, &limits);
        let sessions = [
            prepare(&original).await.map_err(js_err)?,
            prepare(&optimized).await.map_err(js_err)?,
        ];
        let bench = bench::Bench::new(Policy::BROWSER);
        Ok(GpuBench {
            state: Rc::new(GpuState {
                sessions,
                nodes: Pair {
                    original: original.graph.node_count(),
                    optimized: optimized.graph.node_count(),
                },
                repeat: Cell::new(bench.repeat()),
                bench: RefCell::new(Some(bench)),
                inputs,
            }),
        })
    }
}

impl GpuState {
    /// Starts a task with `start` and runs it to its end on the GPU; returns the runs per sample.
    async fn drive(
        &self,
        now: js_sys::Function,
        start: impl FnOnce(&mut bench::Bench),
    ) -> Result<u32, JsValue> {
        let mut b = self.bench.borrow_mut().take().ok_or_else(busy)?;
        start(&mut b);
        let run = |g: Graph| async move {
            self.sessions[g.index()]
                .run(&self.inputs)
                .await
                .map(drop)
                .map_err(err)
        };
        let done = b.drive_async(clock(&now), run).await;
        let repeat = b.repeat();
        self.repeat.set(repeat);
        *self.bench.borrow_mut() = Some(b);
        done.map(|()| repeat).map_err(JsValue::from)
    }
}
