//! A model prepared once for the GPU: traced for shapes, lowered to kernels, pipelines compiled,
//! weights uploaded and buffers allocated (reused by value liveness). Each run uploads the
//! inputs, encodes every dispatch in one submission and reads back only the graph outputs.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::ir::{Model, NodeId, ValueId};
use crate::limits::Limits;
use crate::runtime::inputs::random_inputs;
use crate::runtime::reference::{Executor, StepObserver};
use crate::tensor::Tensor;
use crate::{Error, Result};

use super::device::{gpu_err, map_read, Gpu};
use super::transfer::{bytes_of, from_gpu_bytes, held_half, is_byte, to_gpu_bytes};
use crate::ops::wgsl::{Bind, Ty};
use crate::ops::{self, lowering::lower, Info, Lowered, NodeCtx};

pub struct GpuSession {
    gpu: Gpu,
    inputs: Vec<InputSlot>,
    outputs: Vec<OutputSlot>,
    steps: Vec<Step>,
    buffers: Vec<wgpu::Buffer>,
}

struct InputSlot {
    name: String,
    info: Info,
    buffer: Option<usize>,
}

enum OutputSlot {
    Gpu {
        name: String,
        info: Info,
        buffer: usize,
        staging: wgpu::Buffer,
    },
    /// Known without running (it does not depend on the inputs' data).
    Static { name: String, tensor: Tensor },
}

struct Step {
    /// The node this dispatch computes (a node may have several).
    node: NodeId,
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    groups: [u32; 3],
}

/// Records, during the traced run, every value's type and shape, and the values of static ones.
struct Tracer<'a> {
    infos: HashMap<ValueId, Info>,
    statics: HashMap<ValueId, Tensor>,
    is_static: &'a HashSet<ValueId>,
}

impl StepObserver for Tracer<'_> {
    fn before(&mut self, _: NodeId) {}
    fn after(&mut self, _: NodeId) {}
    fn produced(&mut self, v: ValueId, t: &Tensor) {
        self.infos.insert(v, Info::of(t));
        if self.is_static.contains(&v) {
            self.statics.insert(v, t.clone());
        }
    }
}

/// One physical GPU buffer's worth of a value (values that alias share one).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Input,
    Static,
    Temp,
}

struct Storage {
    bytes: u64,
    kind: Kind,
    /// Last step that reads it (None: never read by a kernel).
    last_use: Option<usize>,
    pinned: bool,
    buffer: Option<usize>,
    /// uint8/int8 held four to a word (a static value an op reads packed), not widened.
    packed: bool,
    /// float16 held as f16 (the device has `shader-f16`), not widened.
    half: bool,
}

impl GpuSession {
    /// Prepares `model` for inputs sized by `dims` (symbolic dim → size; unnamed ones are 8, as
    /// everywhere in fuselab). Runs the reference backend once to learn every shape, so every
    /// op must also be on the reference backend.
    pub async fn new(
        gpu: &Gpu,
        model: &Model,
        dims: &HashMap<String, usize>,
        limits: &Limits,
    ) -> Result<GpuSession> {
        Self::prepare(gpu, model, &HashMap::new(), dims, limits).await
    }

    /// Prepares `model` for inputs shaped like `inputs` (their values only seed the trace).
    pub async fn for_inputs(
        gpu: &Gpu,
        model: &Model,
        inputs: &HashMap<String, Tensor>,
        limits: &Limits,
    ) -> Result<GpuSession> {
        Self::prepare(gpu, model, inputs, &HashMap::new(), limits).await
    }

    async fn prepare(
        gpu: &Gpu,
        model: &Model,
        given: &HashMap<String, Tensor>,
        dims: &HashMap<String, usize>,
        limits: &Limits,
    ) -> Result<GpuSession> {
        let g = &model.graph;
        let order = g.topo_order()?;
        // Static values: initializers, and what only they and shapes determine.
        let mut is_static: HashSet<ValueId> = g.initializers().map(|(v, _)| v).collect();
        for &id in &order {
            let n = g.node(id);
            let all_static = n.inputs.iter().flatten().all(|v| is_static.contains(v));
            let shape_only = ops::resolve(n, model.opset(&n.domain).unwrap_or(1))
                .is_ok_and(|op| op.reads_only_shapes());
            if (all_static && n.implicit_inputs.is_empty()) || shape_only {
                is_static.extend(n.outputs.iter().flatten().copied());
            }
        }
        let feeds = random_inputs(model, given, dims, 0, limits)?;
        let ex = Executor::new(model, limits)?;
        let mut tracer = Tracer {
            infos: HashMap::new(),
            statics: HashMap::new(),
            is_static: &is_static,
        };
        ex.run_observed(&feeds, &mut tracer)
            .map_err(|e| gpu_err(format!("tracing shapes on the reference backend: {e}")))?;
        let Tracer {
            mut infos,
            mut statics,
            ..
        } = tracer;
        // Initializers as the executor decoded them (not decoded a second time).
        for (v, _) in g.initializers() {
            if let Some(t) = ex.constant(v) {
                infos.insert(v, Info::of(t));
                statics.insert(v, t.clone());
            }
        }
        let mut inputs = Vec::new();
        for &v in &g.inputs {
            let name = g.name(v).to_string();
            if let Some(t) = feeds.get(&name) {
                infos.insert(v, Info::of(t));
                inputs.push((v, name));
            }
        }

        // Lower every node that is not static.
        let mut storage_of: HashMap<ValueId, usize> = HashMap::new();
        let mut storages: Vec<Storage> = Vec::new();
        let new_storage = |storages: &mut Vec<Storage>, info: &Info, kind: Kind, packed: bool| {
            storages.push(Storage {
                bytes: bytes_of(info, packed, gpu.half),
                kind,
                last_use: None,
                pinned: kind != Kind::Temp,
                buffer: None,
                packed,
                half: held_half(info.dtype, gpu.half),
            });
            storages.len() - 1
        };
        for (v, _) in &inputs {
            let s = new_storage(&mut storages, &infos[v], Kind::Input, false);
            storage_of.insert(*v, s);
        }
        struct Planned {
            node: NodeId,
            dispatches: Vec<ops::wgsl::Dispatch>,
            scratch: Vec<usize>,
        }
        let mut planned: Vec<Planned> = Vec::new();
        for &id in &order {
            let n = g.node(id);
            if n.outputs.iter().flatten().all(|v| is_static.contains(v)) {
                continue;
            }
            let info_of = |v: &Option<ValueId>| v.and_then(|v| infos.get(&v).cloned());
            let opset = model.opset(&n.domain).unwrap_or(1);
            let fail = |message: String| Error::Kernel {
                op_type: n.op_type.clone(),
                node: n.label(id),
                message: format!("webgpu: {message}"),
            };
            let op = ops::resolve(n, opset).map_err(|e| match e {
                ops::OpError::BadAttributes(m) => fail(m),
                ops::OpError::Unsupported => fail(format!(
                    "{} ({}) has no webgpu kernel yet",
                    n.op_type,
                    crate::ir::model::display_domain(&n.domain)
                )),
            })?;
            let ctx = NodeCtx {
                node: n,
                op: &*op,
                opset,
                ins: n.inputs.iter().map(info_of).collect(),
                outs: n.outputs.iter().map(info_of).collect(),
                statics: n
                    .inputs
                    .iter()
                    .map(|v| v.and_then(|v| statics.get(&v)))
                    .collect(),
            };
            // A static uint8/int8 input the op reads packed (`Op::packed_byte_inputs`).
            let packed = |k: usize| {
                op.packed_byte_inputs().contains(&k)
                    && n.inputs[k].is_some_and(|v| {
                        is_static.contains(&v) && infos.get(&v).is_some_and(|i| is_byte(i.dtype))
                    })
            };
            for info in ctx.ins.iter().chain(&ctx.outs).flatten() {
                Ty::of(info.dtype).map_err(fail)?;
            }
            // uint8/int8 values are held widened to int32 (`Ty::of`), so only ops that move
            // them unchanged (or Cast, which narrows) may make them; arithmetic would not wrap.
            if let Some(info) = ctx.outs.iter().flatten().find(|i| is_byte(i.dtype)) {
                if !op.any_element_type() {
                    return Err(fail(format!(
                        "{} computing {} is not on webgpu (it holds uint8/int8 as int32: only data movement and the quantized ops take them)",
                        n.op_type, info.dtype
                    )));
                }
            }
            let mut lowered = lower(&ctx).map_err(fail)?;
            // An alias between float16 held as f16 and a float32 (a Cast, which widened storage
            // made a no-op) is a copy that converts.
            let half_of = |i: Option<&Option<Info>>| {
                i.and_then(|i| i.as_ref())
                    .is_some_and(|i| held_half(i.dtype, gpu.half))
            };
            if matches!(lowered, Lowered::Alias)
                && half_of(ctx.ins.first()) != half_of(ctx.outs.first())
            {
                let out = ctx.outs.first().and_then(|o| o.as_ref());
                let out = out.ok_or_else(|| fail("aliasing op without output".into()))?;
                let x = ops::wgsl::Access::broadcast(Ty::F32, &out.shape, &out.shape);
                lowered = Lowered::Run {
                    dispatches: vec![ops::wgsl::elementwise(&out.shape, Ty::F32, &[x], "v0")],
                    scratch: vec![],
                };
            }
            match lowered {
                Lowered::Alias => {
                    let (Some(Some(i)), Some(Some(o))) = (n.inputs.first(), n.outputs.first())
                    else {
                        return Err(fail("aliasing op without input or output".into()));
                    };
                    let s = match storage_of.get(i) {
                        Some(&s) => s,
                        None => {
                            let s = new_storage(&mut storages, &infos[i], Kind::Static, false);
                            storage_of.insert(*i, s);
                            s
                        }
                    };
                    storage_of.insert(*o, s);
                }
                Lowered::Run {
                    dispatches,
                    scratch,
                } => {
                    let step = planned.len();
                    for d in &dispatches {
                        for b in &d.reads {
                            let Bind::In(k) = *b else { continue };
                            let v =
                                n.inputs[k].ok_or_else(|| fail(format!("input {k} is missing")))?;
                            let s = match storage_of.get(&v) {
                                Some(&s) => s,
                                None if is_static.contains(&v) => {
                                    let s = new_storage(
                                        &mut storages,
                                        &infos[&v],
                                        Kind::Static,
                                        packed(k),
                                    );
                                    storage_of.insert(v, s);
                                    s
                                }
                                None => return Err(fail(format!("input {k} has no buffer"))),
                            };
                            if storages[s].packed != packed(k) {
                                return Err(fail(format!(
                                    "input {k} ('{}') is read packed by one node and widened by another, which webgpu does not do",
                                    g.name(v)
                                )));
                            }
                            storages[s].last_use = Some(step);
                        }
                    }
                    for o in n.outputs.iter().flatten() {
                        let info = infos
                            .get(o)
                            .ok_or_else(|| fail("an output has no shape".into()))?;
                        let s = new_storage(&mut storages, info, Kind::Temp, false);
                        storage_of.insert(*o, s);
                    }
                    let scratch_ids = scratch
                        .iter()
                        .map(|&bytes| {
                            storages.push(Storage {
                                bytes: bytes.max(4),
                                kind: Kind::Temp,
                                last_use: Some(step),
                                pinned: false,
                                buffer: None,
                                packed: false,
                                half: false,
                            });
                            storages.len() - 1
                        })
                        .collect();
                    planned.push(Planned {
                        node: id,
                        dispatches,
                        scratch: scratch_ids,
                    });
                }
            }
        }
        // Graph outputs stay put; so do values an alias chain carries out.
        let mut outputs = Vec::new();
        for &v in &g.outputs {
            let name = g.name(v).to_string();
            match storage_of.get(&v) {
                Some(&s) if storages[s].kind != Kind::Static => {
                    storages[s].pinned = true;
                    outputs.push((name, v, Some(s)));
                }
                _ => outputs.push((name, v, None)),
            }
        }
        // Physical buffers: inputs, statics and outputs get their own; temporaries reuse
        // buffers of the same size that no later step reads.
        let max = gpu.max_binding_bytes();
        for (v, &s) in &storage_of {
            if storages[s].bytes > max {
                return Err(gpu_err(format!(
                    "value '{}' needs {} bytes, over this device's {max}-byte buffer limit",
                    g.name(*v),
                    storages[s].bytes
                )));
            }
        }
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC;
        let mut buffers: Vec<wgpu::Buffer> = Vec::new();
        let mut alloc = |bytes: u64| {
            buffers.push(gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: bytes.div_ceil(4) * 4,
                usage,
                mapped_at_creation: false,
            }));
            buffers.len() - 1
        };
        let mut free: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        // Storages written by step i (outputs and scratch), in creation order.
        let mut written_at: Vec<Vec<usize>> = vec![Vec::new(); planned.len()];
        for (i, p) in planned.iter().enumerate() {
            let n = g.node(p.node);
            for o in n.outputs.iter().flatten() {
                let s = storage_of[o];
                if !written_at[i].contains(&s) {
                    written_at[i].push(s);
                }
            }
            written_at[i].extend(&p.scratch);
        }
        let mut releases: Vec<Vec<usize>> = vec![Vec::new(); planned.len()];
        for (s, st) in storages.iter().enumerate() {
            if st.kind == Kind::Temp && !st.pinned {
                if let Some(u) = st.last_use {
                    releases[u].push(s);
                }
            }
        }
        for st in storages.iter_mut() {
            if st.kind != Kind::Temp {
                st.buffer = Some(alloc(st.bytes));
            }
        }
        for i in 0..planned.len() {
            for &s in &written_at[i] {
                if storages[s].buffer.is_some() {
                    continue;
                }
                let size = storages[s].bytes.div_ceil(256) * 256;
                let reuse = if storages[s].pinned {
                    None
                } else {
                    free.get_mut(&size).and_then(|v| v.pop())
                };
                storages[s].buffer = Some(reuse.unwrap_or_else(|| alloc(size)));
            }
            for &s in &releases[i] {
                if let Some(b) = storages[s].buffer {
                    free.entry(storages[s].bytes.div_ceil(256) * 256)
                        .or_default()
                        .push(b);
                }
            }
        }
        // Static data goes up once.
        for (v, &s) in &storage_of {
            if storages[s].kind == Kind::Static {
                let t = statics
                    .get(v)
                    .ok_or_else(|| gpu_err(format!("static value '{}' has no data", g.name(*v))))?;
                let bytes = to_gpu_bytes(g.name(*v), t, storages[s].packed, storages[s].half)?;
                gpu.queue
                    .write_buffer(&buffers[storages[s].buffer.expect("allocated")], 0, &bytes);
            }
        }

        // Pipelines (one per distinct shader) and bind groups.
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut pipelines: HashMap<String, wgpu::ComputePipeline> = HashMap::new();
        let mut steps = Vec::new();
        for p in &planned {
            let n = g.node(p.node);
            for d in &p.dispatches {
                let storage = |b: &Bind| match *b {
                    Bind::In(k) => storage_of[&n.inputs[k].expect("checked")],
                    Bind::Out(k) => {
                        storage_of[&n.outputs[k].expect("lowering binds only present outputs")]
                    }
                    Bind::Scratch(k) => p.scratch[k],
                };
                // Bindings that hold f16 get their declarations and accesses converted.
                let half = |bs: &[Bind]| bs.iter().map(|b| storages[storage(b)].half).collect();
                let (rh, wh): (Vec<bool>, Vec<bool>) = (half(&d.reads), half(&d.writes));
                let wgsl = if rh.iter().chain(&wh).any(|&h| h) {
                    ops::wgsl::with_half_bindings(&d.wgsl, &rh, &wh).map_err(|e| Error::Kernel {
                        op_type: n.op_type.clone(),
                        node: n.label(p.node),
                        message: format!("webgpu: {e}"),
                    })?
                } else {
                    d.wgsl.clone()
                };
                let pipeline = pipelines
                    .entry(wgsl.clone())
                    .or_insert_with(|| {
                        let module =
                            gpu.device
                                .create_shader_module(wgpu::ShaderModuleDescriptor {
                                    label: Some(&n.op_type),
                                    source: wgpu::ShaderSource::Wgsl(wgsl.as_str().into()),
                                });
                        gpu.device
                            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                                label: Some(&n.op_type),
                                layout: None,
                                module: &module,
                                entry_point: Some("main"),
                                compilation_options: Default::default(),
                                cache: None,
                            })
                    })
                    .clone();
                let buffer_of =
                    |b: &Bind| -> usize { storages[storage(b)].buffer.expect("allocated") };
                let entries: Vec<wgpu::BindGroupEntry> = d
                    .reads
                    .iter()
                    .chain(&d.writes)
                    .enumerate()
                    .map(|(i, b)| wgpu::BindGroupEntry {
                        binding: i as u32,
                        resource: buffers[buffer_of(b)].as_entire_binding(),
                    })
                    .collect();
                let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &entries,
                });
                steps.push(Step {
                    node: p.node,
                    pipeline,
                    bind_group,
                    groups: d.groups,
                });
            }
        }
        if let Some(e) = scope.pop().await {
            return Err(gpu_err(format!("preparing kernels: {e}")));
        }
        gpu.check_lost()?;

        let inputs = inputs
            .into_iter()
            .map(|(v, name)| InputSlot {
                name,
                info: infos[&v].clone(),
                buffer: storage_of.get(&v).and_then(|&s| storages[s].buffer),
            })
            .collect();
        let outputs = outputs
            .into_iter()
            .map(|(name, v, s)| match s {
                Some(s) => {
                    let info = infos[&v].clone();
                    let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("readback"),
                        size: bytes_of(&info, false, gpu.half).div_ceil(4) * 4,
                        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    });
                    Ok(OutputSlot::Gpu {
                        name,
                        info,
                        buffer: storages[s].buffer.expect("allocated"),
                        staging,
                    })
                }
                None => statics
                    .get(&v)
                    .cloned()
                    .map(|tensor| OutputSlot::Static {
                        name: name.clone(),
                        tensor,
                    })
                    .ok_or_else(|| gpu_err(format!("output '{name}' was not computed"))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(GpuSession {
            gpu: gpu.clone(),
            inputs,
            outputs,
            steps,
            buffers,
        })
    }

    /// Compute dispatches one run encodes.
    pub fn dispatches(&self) -> usize {
        self.steps.len()
    }

    /// Bytes of the GPU buffers the session holds (weights, inputs, outputs and the pooled
    /// intermediates; not the readback staging).
    pub fn buffer_bytes(&self) -> u64 {
        self.buffers.iter().map(|b| b.size()).sum()
    }

    /// Runs once. `inputs` must have the names, types and shapes the session was prepared for.
    pub async fn run(&self, inputs: &HashMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        self.upload(inputs)?;
        let scope = self
            .gpu
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        let mut enc = self
            .gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            for s in &self.steps {
                s.encode(&mut pass);
            }
        }
        for o in &self.outputs {
            if let OutputSlot::Gpu {
                buffer, staging, ..
            } = o
            {
                enc.copy_buffer_to_buffer(&self.buffers[*buffer], 0, staging, 0, staging.size());
            }
        }
        self.gpu.queue.submit([enc.finish()]);
        if let Some(e) = scope.pop().await {
            return Err(gpu_err(format!("running: {e}")));
        }
        let mut out = Vec::new();
        for o in &self.outputs {
            match o {
                OutputSlot::Static { name, tensor } => out.push((name.clone(), tensor.clone())),
                OutputSlot::Gpu {
                    name,
                    info,
                    staging,
                    ..
                } => {
                    map_read(&self.gpu, staging).await?;
                    let t = {
                        let view = staging
                            .slice(..)
                            .get_mapped_range()
                            .map_err(|e| gpu_err(format!("reading back '{name}': {e}")))?;
                        from_gpu_bytes(info, &view, self.gpu.half)
                    };
                    staging.unmap();
                    out.push((name.clone(), t?));
                }
            }
        }
        Ok(out)
    }

    /// Checks `inputs` against what the session was prepared for and writes them to the GPU.
    fn upload(&self, inputs: &HashMap<String, Tensor>) -> Result<()> {
        self.gpu.check_lost()?;
        for name in inputs.keys() {
            if !self.inputs.iter().any(|s| &s.name == name) {
                return Err(Error::Input {
                    name: name.clone(),
                    message: "is not an input of this graph".into(),
                });
            }
        }
        for slot in &self.inputs {
            let t = inputs.get(&slot.name).ok_or_else(|| Error::Input {
                name: slot.name.clone(),
                message: "missing".into(),
            })?;
            if t.dtype() != slot.info.dtype || t.shape() != slot.info.shape.as_slice() {
                return Err(Error::Input {
                    name: slot.name.clone(),
                    message: format!(
                        "is {} {:?}; this session was prepared for {} {:?}",
                        t.dtype().name(),
                        t.shape(),
                        slot.info.dtype.name(),
                        slot.info.shape
                    ),
                });
            }
            if let Some(b) = slot.buffer {
                self.gpu.queue.write_buffer(
                    &self.buffers[b],
                    0,
                    &to_gpu_bytes(&slot.name, t, false, self.gpu.half)?,
                );
            }
        }
        Ok(())
    }
}

impl Step {
    fn encode(&self, pass: &mut wgpu::ComputePass) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(self.groups[0], self.groups[1], self.groups[2]);
    }
}

#[path = "timing.rs"]
mod timing;
