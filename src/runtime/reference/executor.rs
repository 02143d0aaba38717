//! The executor: a plan made once per model (kernels looked up, constants decoded, last uses
//! computed), then run any number of times.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::ir::model::display_domain;
use crate::ir::{Dim, Model, NodeId, ValueId};
use crate::limits::Limits;
use crate::onnx::tensor::{to_tensor, validate};
use crate::ops::{
    self, relabel, Kernel, KernelCtx, OpError, OpRef, Prepared, PreparedCell, RelabelShape,
};
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

struct Step<'m> {
    node: NodeId,
    /// The node's parsed op (typed attributes), resolved once.
    op: OpRef<'m>,
    kernel: Kernel,
    opset: i64,
    /// Values whose last reader is this step: dropped right after it.
    free_after: Vec<ValueId>,
    /// For ops that only relabel input 0's shape (Reshape, Squeeze, ...): how to compute the
    /// output shape. Set only when this step is input 0's last reader, reads it once and it is
    /// not a graph output; then the executor moves the tensor instead of copying it, provided it
    /// owns it (a caller's input or an initializer is only borrowed and takes the kernel).
    relabel: Option<RelabelShape>,
    /// The op computes on the compute types only (see `Op::any_element_type`): storage-typed
    /// inputs are widened first.
    widens: bool,
    /// Per output: its declared (or inferred) element type, if known. A kernel's compute-typed
    /// result is narrowed to a declared storage type.
    declared: Vec<Option<DType>>,
    /// Some output is declared with a storage type.
    narrows: bool,
    /// Narrowing to a smaller integer type clamps instead of wrapping (`Op::saturates`).
    saturates: bool,
    /// If/Loop/Scan: the body graphs by attribute name, as models planned (and checked) once
    /// here and run by `control`.
    bodies: Vec<(String, Model)>,
    /// What the kernel derived once from its constant inputs (`KernelCtx::prepare`).
    prepared: PreparedCell,
}

/// Hears about every node the executor runs: `before` just ahead of reading its inputs, `after`
/// once its outputs are stored and the values it read last are dropped.
pub trait StepObserver {
    fn before(&mut self, node: NodeId);
    fn after(&mut self, node: NodeId);
    /// Each value a node wrote, right after it is stored (the WebGPU backend reads shapes and
    /// types off one traced run).
    #[inline(always)]
    fn produced(&mut self, _value: ValueId, _tensor: &Tensor) {}
}

/// The observer `run` uses: does nothing, and compiles away.
pub struct NoObserver;

impl StepObserver for NoObserver {
    #[inline(always)]
    fn before(&mut self, _node: NodeId) {}
    #[inline(always)]
    fn after(&mut self, _node: NodeId) {}
}

pub struct Executor<'m> {
    model: &'m Model,
    steps: Vec<Step<'m>>,
    /// Initializers, decoded once by the graph and borrowed from it.
    constants: Vec<Option<&'m Tensor>>,
    limits: Limits,
}

enum Slot<'a> {
    Empty,
    Borrowed(&'a Tensor),
    Owned(Tensor),
}

impl Slot<'_> {
    fn get(&self) -> Option<&Tensor> {
        match self {
            Slot::Empty => None,
            Slot::Borrowed(t) => Some(t),
            Slot::Owned(t) => Some(t),
        }
    }
}

impl<'m> Executor<'m> {
    /// Plans `model`. Fails naming the first node whose op the reference backend lacks, and
    /// listing every other missing op type.
    pub fn new(model: &'m Model, limits: &Limits) -> Result<Executor<'m>> {
        let g = &model.graph;
        let order = g.topo_order()?;
        let opset_of = |id: NodeId| model.opset(&g.node(id).domain).unwrap_or(1);
        let mut missing: Vec<(String, String)> = Vec::new();
        for &id in &order {
            let n = g.node(id);
            let key = (n.op_type.clone(), display_domain(&n.domain).to_string());
            if ops::lookup(&n.domain, &n.op_type, opset_of(id)).is_none() && !missing.contains(&key)
            {
                missing.push(key);
            }
        }
        let mut steps = Vec::with_capacity(order.len());
        for &id in &order {
            let node = g.node(id);
            let opset = opset_of(id);
            let op = match ops::resolve(node, opset) {
                Ok(op) => op,
                Err(OpError::Unsupported) => {
                    let others: Vec<String> = missing
                        .iter()
                        .skip(1)
                        .map(|(op, d)| format!("{op} ({d})"))
                        .collect();
                    let mut also = String::new();
                    if let Some(note) = ops::version_note(node, opset) {
                        also.push_str(&format!("; {note}"));
                    }
                    if !others.is_empty() {
                        also.push_str(&format!("; also missing: {}", others.join(", ")));
                    }
                    return Err(Error::UnsupportedOp {
                        op_type: node.op_type.clone(),
                        domain: display_domain(&node.domain).to_string(),
                        node: node.label(id),
                        also,
                    });
                }
                Err(OpError::BadAttributes(message)) => {
                    return Err(Error::Kernel {
                        op_type: node.op_type.clone(),
                        node: node.label(id),
                        message,
                    })
                }
            };
            let is_control = node.is_onnx_domain() && super::control::is_control(&node.op_type);
            let mut bodies = Vec::new();
            if is_control {
                for (name, gp) in op.bodies() {
                    let body = crate::io::load::subgraph_model(gp, &model.proto)?;
                    // Plans the body once now: an op it lacks fails here, not mid-run.
                    Executor::new(&body, limits)?;
                    bodies.push((name.to_string(), body));
                }
            } else if !node.implicit_inputs.is_empty() || node.has_subgraphs() {
                return Err(Error::UnsupportedOp {
                    op_type: format!("{} with subgraphs", node.op_type),
                    domain: display_domain(&node.domain).to_string(),
                    node: node.label(id),
                    also: String::new(),
                });
            }
            let declared: Vec<Option<DType>> = node
                .outputs
                .iter()
                .map(|v| g.value((*v)?).ty.dtype)
                .collect();
            let narrows = declared.iter().flatten().any(|d| !d.is_compute());
            steps.push(Step {
                node: id,
                kernel: op.kernel(),
                widens: !op.any_element_type(),
                saturates: op.saturates(),
                op,
                opset,
                free_after: Vec::new(),
                relabel: None,
                declared,
                narrows,
                bodies,
                prepared: PreparedCell::new(),
            });
        }
        let mut last_use: HashMap<ValueId, usize> = HashMap::new();
        for (i, s) in steps.iter().enumerate() {
            for v in g.node(s.node).all_inputs() {
                last_use.insert(v, i);
            }
        }
        for (v, i) in last_use {
            if !g.is_graph_output(v) {
                steps[i].free_after.push(v);
                let node = g.node(steps[i].node);
                let read_once = node.all_inputs().filter(|&u| u == v).count() == 1;
                if node.inputs.first() == Some(&Some(v)) && read_once {
                    steps[i].relabel = steps[i].op.relabel();
                }
            }
        }
        let mut constants: Vec<Option<&Tensor>> = (0..g.value_count()).map(|_| None).collect();
        for (v, t) in g.initializers() {
            // This run's limits, checked before the graph decodes (once, for every reader).
            validate(t, limits)?;
            constants[v.0 as usize] = match g.initializer_value(v) {
                Some(c) => Some(c),
                // Not decodable: `to_tensor` names why.
                None => {
                    return Err(to_tensor(t, limits).err().unwrap_or_else(|| {
                        Error::invalid(format!("initializer '{}' cannot be decoded", g.name(v)))
                    }))
                }
            };
        }
        Ok(Executor {
            model,
            steps,
            constants,
            limits: *limits,
        })
    }

    /// An initializer's value, decoded when the executor was made.
    pub fn constant(&self, v: ValueId) -> Option<&Tensor> {
        self.constants.get(v.0 as usize).copied().flatten()
    }

    /// Runs the graph. `inputs` by graph-input name; an input with an initializer may be omitted
    /// (its initializer is the default). Returns the graph outputs in order, by name.
    pub fn run(&self, inputs: &HashMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        self.run_observed(inputs, &mut NoObserver)
    }

    /// `run`, telling `obs` when each node starts and ends (for profiling; the executor itself
    /// never reads a clock, which wasm32-unknown-unknown does not have).
    pub fn run_observed<O: StepObserver>(
        &self,
        inputs: &HashMap<String, Tensor>,
        obs: &mut O,
    ) -> Result<Vec<(String, Tensor)>> {
        let g = &self.model.graph;
        let mut slots: Vec<Slot> = (0..g.value_count()).map(|_| Slot::Empty).collect();
        for (i, c) in self.constants.iter().enumerate() {
            if let Some(t) = c {
                slots[i] = Slot::Borrowed(t);
            }
        }
        let mut bound: HashMap<&str, usize> = HashMap::new();
        for &id in &g.inputs {
            let name = g.name(id);
            match inputs.get(name) {
                Some(t) => {
                    check_input(self.model, id, t, &mut bound)?;
                    slots[id.0 as usize] = Slot::Borrowed(t);
                }
                None if self.constants[id.0 as usize].is_some() => {}
                None => {
                    return Err(Error::Input {
                        name: name.to_string(),
                        message: "missing (the graph has no default for it)".into(),
                    })
                }
            }
        }
        if let Some(extra) = inputs
            .keys()
            .find(|k| g.find(k).is_none_or(|v| !g.is_graph_input(v)))
        {
            return Err(Error::Input {
                name: extra.clone(),
                message: "is not an input of this graph".into(),
            });
        }
        self.execute(slots, obs)
    }

    /// Runs this graph as a body: `formal` binds its inputs by position, `outer` the values it
    /// reads from enclosing scopes by name (lexical scoping: a name the body defines itself
    /// hides the outer one). Returns the body's outputs in order.
    pub(super) fn run_body(
        &self,
        formal: Vec<Tensor>,
        outer: &HashMap<&str, &Tensor>,
    ) -> Result<Vec<Tensor>> {
        let g = &self.model.graph;
        if formal.len() != g.inputs.len() {
            return Err(Error::Other(format!(
                "body '{}' takes {} inputs, {} given",
                g.name,
                g.inputs.len(),
                formal.len()
            )));
        }
        let mut slots: Vec<Slot> = (0..g.value_count()).map(|_| Slot::Empty).collect();
        for (i, c) in self.constants.iter().enumerate() {
            if let Some(t) = c {
                slots[i] = Slot::Borrowed(t);
            }
        }
        for (name, t) in outer {
            if let Some(v) = g.find(name) {
                if g.producer(v).is_none() && matches!(slots[v.0 as usize], Slot::Empty) {
                    slots[v.0 as usize] = Slot::Borrowed(t);
                }
            }
        }
        for (&id, t) in g.inputs.iter().zip(formal) {
            slots[id.0 as usize] = Slot::Owned(t);
        }
        Ok(self
            .execute(slots, &mut NoObserver)?
            .into_iter()
            .map(|(_, t)| t)
            .collect())
    }

    fn execute<'a, O: StepObserver>(
        &'a self,
        mut slots: Vec<Slot<'a>>,
        obs: &mut O,
    ) -> Result<Vec<(String, Tensor)>> {
        let g = &self.model.graph;
        for step in &self.steps {
            obs.before(step.node);
            let node = g.node(step.node);
            let args: Vec<Option<&Tensor>> = node
                .inputs
                .iter()
                .map(|v| v.and_then(|v| slots[v.0 as usize].get()))
                .collect();
            if let Some(missing) = node
                .inputs
                .iter()
                .zip(&args)
                .find(|(v, a)| v.is_some() && a.is_none())
            {
                return Err(Error::Kernel {
                    op_type: node.op_type.clone(),
                    node: node.label(step.node),
                    message: format!(
                        "input '{}' has no value",
                        g.name(missing.0.expect("checked"))
                    ),
                });
            }
            // Inputs that are this graph's initializers, the same tensors on every run.
            let constant = node
                .inputs
                .iter()
                .zip(&args)
                .enumerate()
                .take(64)
                .filter(
                    |(_, (v, a))| match (v, a, v.and_then(|v| self.constant(v))) {
                        (Some(_), Some(a), Some(c)) => std::ptr::eq(*a, c),
                        _ => false,
                    },
                )
                .fold(0u64, |m, (i, _)| m | 1 << i);
            let ctx = KernelCtx {
                node,
                op: &*step.op,
                opset: step.opset,
                limits: &self.limits,
                prepared: Some(Prepared {
                    cell: &step.prepared,
                    constant,
                }),
            };
            let kernel_err = |message| Error::Kernel {
                op_type: node.op_type.clone(),
                node: node.label(step.node),
                message,
            };
            let movable = match (step.relabel, node.inputs.first()) {
                (Some(shape_of), Some(&Some(v)))
                    if matches!(slots[v.0 as usize], Slot::Owned(_)) =>
                {
                    Some((shape_of, v))
                }
                _ => None,
            };
            let outs = if !step.bodies.is_empty() {
                let mut outer: HashMap<&str, &Tensor> = HashMap::new();
                for &v in &node.implicit_inputs {
                    match slots[v.0 as usize].get() {
                        Some(t) => outer.insert(g.name(v), t),
                        None => {
                            return Err(kernel_err(format!(
                                "'{}', read by a body, has no value",
                                g.name(v)
                            )))
                        }
                    };
                }
                super::control::run(&ctx, &step.bodies, &args, &outer)?
            } else if let Some((shape_of, v)) = movable {
                let shape = shape_of(&ctx, &args).map_err(kernel_err)?;
                drop(args);
                let Slot::Owned(t) = std::mem::replace(&mut slots[v.0 as usize], Slot::Empty)
                else {
                    unreachable!("checked to be Owned above")
                };
                vec![relabel(&node.op_type, t, &shape).map_err(kernel_err)?]
            } else if step.widens && args.iter().flatten().any(|t| !t.dtype().is_compute()) {
                let wide: Vec<Option<Cow<Tensor>>> =
                    args.iter().map(|a| a.map(|t| t.widen())).collect();
                let wide_args: Vec<Option<&Tensor>> = wide.iter().map(|a| a.as_deref()).collect();
                let outs = (step.kernel)(&ctx, &wide_args).map_err(kernel_err)?;
                // An output of undeclared type takes the first storage-typed input's type when
                // the kernel left it in that type's compute type (Add of two float16s).
                let first = args
                    .iter()
                    .flatten()
                    .map(|t| t.dtype())
                    .find(|d| !d.is_compute());
                narrow_outputs(outs, &step.declared, first, step.saturates).map_err(kernel_err)?
            } else {
                let outs = (step.kernel)(&ctx, &args).map_err(kernel_err)?;
                if step.narrows {
                    narrow_outputs(outs, &step.declared, None, step.saturates)
                        .map_err(kernel_err)?
                } else {
                    outs
                }
            };
            if outs.len() < node.outputs.iter().flatten().count() {
                return Err(Error::Kernel {
                    op_type: node.op_type.clone(),
                    node: node.label(step.node),
                    message: format!(
                        "kernel produced {} outputs, the node names {}",
                        outs.len(),
                        node.outputs.len()
                    ),
                });
            }
            for (slot, t) in node.outputs.iter().zip(outs) {
                if let Some(v) = slot {
                    obs.produced(*v, &t);
                    slots[v.0 as usize] = Slot::Owned(t);
                }
            }
            for v in &step.free_after {
                if let Slot::Owned(_) = slots[v.0 as usize] {
                    slots[v.0 as usize] = Slot::Empty;
                }
            }
            obs.after(step.node);
        }
        // Outputs are moved out, not copied (a graph output listed twice is cloned once).
        let mut result = Vec::with_capacity(g.outputs.len());
        for (i, &o) in g.outputs.iter().enumerate() {
            let listed_again = g.outputs[i + 1..].contains(&o);
            let t = match std::mem::replace(&mut slots[o.0 as usize], Slot::Empty) {
                Slot::Owned(t) if listed_again => {
                    slots[o.0 as usize] = Slot::Owned(t.clone());
                    t
                }
                Slot::Owned(t) => t,
                Slot::Borrowed(t) => {
                    slots[o.0 as usize] = Slot::Borrowed(t);
                    t.clone()
                }
                Slot::Empty => {
                    return Err(Error::Other(format!(
                        "graph output '{}' was not computed",
                        g.name(o)
                    )))
                }
            };
            result.push((g.name(o).to_string(), t));
        }
        Ok(result)
    }
}

/// Stores each output in its declared storage type (`Tensor::narrow`); outputs already of that
/// type, or declared with a compute type, pass through. An output of unknown type takes
/// `fallback` when the kernel left it in that type's compute type.
fn narrow_outputs(
    outs: Vec<Tensor>,
    declared: &[Option<DType>],
    fallback: Option<DType>,
    saturate: bool,
) -> std::result::Result<Vec<Tensor>, String> {
    outs.into_iter()
        .enumerate()
        .map(|(i, t)| {
            let to = match (declared.get(i).copied().flatten(), fallback) {
                (Some(d), _) if d.is_compute() => return Ok(t),
                (Some(d), _) => d,
                (None, Some(f)) if f.compute() == Some(t.dtype()) => f,
                _ => return Ok(t),
            };
            if t.dtype() == to {
                return Ok(t);
            }
            let narrowed = if saturate {
                t.narrow_saturating(to)
            } else {
                t.narrow(to)
            };
            narrowed.ok_or_else(|| format!("output {i} is {} where {to} is declared", t.dtype()))
        })
        .collect()
}

/// Checks a caller's tensor against the input's declared type and shape; symbolic dims must bind
/// consistently across inputs.
fn check_input<'a>(
    model: &'a Model,
    id: ValueId,
    t: &Tensor,
    bound: &mut HashMap<&'a str, usize>,
) -> Result<()> {
    let v = model.graph.value(id);
    let err = |message: String| Error::Input {
        name: v.name.clone(),
        message,
    };
    if let Some(d) = v.ty.dtype {
        if d != t.dtype() {
            return Err(err(format!("expected {d}, got {}", t.dtype())));
        }
    }
    if let Some(shape) = &v.ty.shape {
        let got = t.shape();
        if shape.len() != got.len() {
            return Err(err(format!(
                "expected rank {} ({}), got shape {got:?}",
                shape.len(),
                v.ty
            )));
        }
        for (d, &n) in shape.iter().zip(got) {
            match d {
                Dim::Known(k) if *k as usize != n => {
                    return Err(err(format!("expected shape {}, got {got:?}", v.ty)))
                }
                Dim::Sym(s) => {
                    if let Some(&prev) = bound.get(s.as_str()) {
                        if prev != n {
                            return Err(err(format!(
                                "dim '{s}' is {n} here but {prev} in an earlier input"
                            )));
                        }
                    } else {
                        bound.insert(s, n);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::GraphBuilder;
    use crate::ir::{attr, Dim};
    use crate::tensor::DType;
    use ndarray::{ArrayD, IxDyn};

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
    }

    fn run(m: &Model, feeds: &[(&str, Tensor)]) -> Vec<(String, Tensor)> {
        let inputs: HashMap<String, Tensor> = feeds
            .iter()
            .map(|(k, t)| (k.to_string(), t.clone()))
            .collect();
        Executor::new(m, &Limits::default())
            .unwrap()
            .run(&inputs)
            .unwrap()
    }

    /// Storage types reach a compute kernel widened and leave narrowed to their declared type:
    /// float16 1 + 2^-11 is a tie that the float32 sum leaves exact and the narrowing rounds
    /// to even (1.0); int8 -100 + -100 wraps to 56; data movement (Transpose) keeps the type.
    #[test]
    fn storage_types_are_widened_for_kernels_and_narrowed_back() {
        use half::f16;
        let mut b = GraphBuilder::new("g", 17);
        let h = b.input("H", DType::F16, vec![Dim::Known(2)]);
        let q = b.input("Q", DType::I8, vec![Dim::Known(2)]);
        let hs = b.op("Add", &[h, h], vec![]);
        let hh = b.op("Add", &[hs, h], vec![]);
        let qq = b.op("Add", &[q, q], vec![]);
        let qt = b.op("Transpose", &[qq], vec![]);
        b.output(hh, "HH");
        b.output(qt, "QT");
        let m = b.build();
        let tie = f16::from_f32(1.0 + 2f32.powi(-11) / 3.0);
        let halves = ArrayD::from_shape_vec(IxDyn(&[2]), vec![f16::ONE, tie]).unwrap();
        let bytes = ArrayD::from_shape_vec(IxDyn(&[2]), vec![-100i8, 7]).unwrap();
        let out = run(&m, &[("H", Tensor::F16(halves)), ("Q", Tensor::I8(bytes))]);
        let Tensor::F16(hh) = &out[0].1 else {
            panic!("HH is {:?}", out[0].1.dtype())
        };
        assert_eq!(hh.iter().map(|v| v.to_f32()).collect::<Vec<_>>()[0], 3.0);
        // Each f16 sum rounds: 3 * tie in f32, rounded once per Add, never a float32 result.
        let twice = f16::from_f32(tie.to_f32() * 2.0);
        assert_eq!(hh[1], f16::from_f32(twice.to_f32() + tie.to_f32()));
        assert_eq!(
            out[1].1,
            Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[2]), vec![56, 14]).unwrap())
        );
    }

    /// A kernel's prepared state (Conv's packed weights) is kept only for initializers: one
    /// executor run twice with two different W fed as an input gives each W's result, and an
    /// initializer W prepared on the first run gives the same values on the second.
    #[test]
    fn prepared_state_is_kept_for_initializers_only() {
        let shape = [20, 3, 3, 3];
        let w1: Vec<f32> = (0..540).map(|i| (i % 11) as f32 * 0.1 - 0.5).collect();
        let w2: Vec<f32> = w1.iter().map(|v| v * -2.0 + 0.25).collect();
        let xv: Vec<f32> = (0..3 * 64).map(|i| (i % 7) as f32 * 0.3 - 1.0).collect();
        let x = f32s(&[1, 3, 8, 8], &xv);
        let conv = |w_init: Option<&[f32]>| {
            let mut b = GraphBuilder::new("g", 17);
            let xi = b.input("X", DType::F32, [1, 3, 8, 8].map(Dim::Known).to_vec());
            let w = match w_init {
                Some(v) => b.initializer("W", &f32s(&shape, v)),
                None => b.input(
                    "W",
                    DType::F32,
                    shape.map(|d| Dim::Known(d as i64)).to_vec(),
                ),
            };
            let y = b.op("Conv", &[xi, w], vec![attr::ints("pads", &[1, 1, 1, 1])]);
            b.output(y, "Y");
            b.build()
        };
        let fed = conv(None);
        let ex = Executor::new(&fed, &Limits::default()).unwrap();
        let feed = |w: &[f32]| {
            HashMap::from([
                ("X".to_string(), x.clone()),
                ("W".to_string(), f32s(&shape, w)),
            ])
        };
        let y1 = ex.run(&feed(&w1)).unwrap();
        let y2 = ex.run(&feed(&w2)).unwrap();
        assert_ne!(y1, y2);
        for (w, want) in [(&w1, &y1), (&w2, &y2)] {
            let m = conv(Some(w));
            let ex = Executor::new(&m, &Limits::default()).unwrap();
            let only_x = HashMap::from([("X".to_string(), x.clone())]);
            assert_eq!(&ex.run(&only_x).unwrap(), want);
            assert_eq!(&ex.run(&only_x).unwrap(), want, "second run, prepared W");
        }
    }

    /// Resize (`Op::saturates`) clamps its widened integer results into uint8 as onnxruntime
    /// does: cubic upsampling of a 0 -> 255 step overshoots both ends, and those values must
    /// come out 0 and 255 (wrapping would give values near the other end). Each uint8 value is
    /// the float32 Resize of the same data rounded half to even and clamped.
    #[test]
    fn resize_saturates_when_narrowing_to_uint8() {
        let mut b = GraphBuilder::new("g", 17);
        let u = b.input("U", DType::U8, vec![Dim::Known(1), Dim::Known(6)]);
        let f = b.input("F", DType::F32, vec![Dim::Known(1), Dim::Known(6)]);
        let scales = b.initializer("scales", &f32s(&[2], &[1., 3.]));
        let cubic = || vec![attr::string("mode", "cubic")];
        let ru = b.node("", "Resize", &[Some(u), None, Some(scales)], 1, cubic())[0];
        let rf = b.node("", "Resize", &[Some(f), None, Some(scales)], 1, cubic())[0];
        b.output(ru, "RU");
        b.output(rf, "RF");
        let m = b.build();
        let v = [0u8, 0, 0, 255, 255, 255];
        let ut = Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[1, 6]), v.to_vec()).unwrap());
        let ft = f32s(&[1, 6], &v.map(f32::from));
        let out = run(&m, &[("U", ut), ("F", ft)]);
        let Tensor::F32(rf) = &out[1].1 else {
            panic!("RF is {:?}", out[1].1.dtype())
        };
        assert!(rf.iter().any(|&x| x < -0.5) && rf.iter().any(|&x| x > 255.5));
        let want: Vec<u8> = rf
            .iter()
            .map(|&x| x.round_ties_even().clamp(0.0, 255.0) as u8)
            .collect();
        let want = Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[1, 18]), want).unwrap());
        assert_eq!(out[0].1, want);
    }

    /// A value read by a Reshape and then by a later node keeps its data for that node: only the
    /// last reader may take it.
    #[test]
    fn relabel_moves_only_at_the_last_reader() {
        let mut b = GraphBuilder::new("g", 17);
        let a = b.input("A", DType::F32, vec![Dim::Known(2), Dim::Known(3)]);
        let x = b.op("Add", &[a, a], vec![]);
        let shape = b.initializer("shape", &Tensor::from_i64s(&[3, 2]));
        // x is read by the Reshape first, by the Mul after it: no move at the Reshape.
        let r = b.op("Reshape", &[x, shape], vec![]);
        let y = b.op("Mul", &[x, x], vec![]);
        // x2 is read only by the Unsqueeze: moved there.
        let x2 = b.op("Neg", &[y], vec![]);
        let u = b.op("Unsqueeze", &[x2], vec![attr::ints("axes", &[0])]);
        let u = b.op("Unsqueeze", &[u], vec![attr::ints("axes", &[0])]);
        // The graph input A (borrowed) goes through Identity: copied, and A stays intact.
        let i = b.op("Identity", &[a], vec![]);
        let s = b.op("Sub", &[i, a], vec![]);
        b.output(r, "R");
        b.output(y, "Y");
        b.output(u, "U");
        b.output(s, "S");
        let mut m = b.build();
        // Squeeze/Unsqueeze at opset 11 take axes as an attribute.
        m.proto.opset_import[0].version = 11;
        let av = [1., 2., 3., 4., 5., 6.];
        let out = run(&m, &[("A", f32s(&[2, 3], &av))]);
        let two: Vec<f32> = av.iter().map(|v| 2.0 * v).collect();
        let sq: Vec<f32> = two.iter().map(|v| v * v).collect();
        let neg: Vec<f32> = sq.iter().map(|v| -v).collect();
        assert_eq!(out[0], ("R".into(), f32s(&[3, 2], &two)));
        assert_eq!(out[1], ("Y".into(), f32s(&[2, 3], &sq)));
        assert_eq!(out[2], ("U".into(), f32s(&[1, 1, 2, 3], &neg)));
        assert_eq!(out[3], ("S".into(), f32s(&[2, 3], &[0.; 6])));
    }

    /// A graph output that a Reshape also reads is still returned whole, and a Reshape reading
    /// the same value twice (data and shape) is not moved.
    #[test]
    fn relabel_keeps_graph_outputs_and_values_read_twice() {
        let mut b = GraphBuilder::new("g", 17);
        let a = b.input("A", DType::F32, vec![Dim::Known(4)]);
        let x = b.op("Add", &[a, a], vec![]);
        let f = b.op("Flatten", &[x], vec![attr::int("axis", 0)]);
        b.output(x, "X");
        b.output(f, "F");
        let k = b.input("K", DType::I64, vec![Dim::Known(1)]);
        let k2 = b.op("Mul", &[k, k], vec![]);
        let r = b.op("Reshape", &[k2, k2], vec![]);
        b.output(r, "R");
        let m = b.build();
        let out = run(
            &m,
            &[
                ("A", f32s(&[4], &[1., 2., 3., 4.])),
                ("K", Tensor::from_i64s(&[1])),
            ],
        );
        assert_eq!(out[0], ("X".into(), f32s(&[4], &[2., 4., 6., 8.])));
        assert_eq!(out[1], ("F".into(), f32s(&[1, 4], &[2., 4., 6., 8.])));
        assert_eq!(out[2], ("R".into(), Tensor::from_i64s(&[1])));
    }

    #[test]
    fn relabel_reuses_a_row_major_buffer_and_copies_otherwise() {
        let t = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let p = t.as_f32().unwrap().as_ptr();
        let r = relabel("Reshape", t, &[3, 2]).unwrap();
        assert_eq!(r.as_f32().unwrap().as_ptr(), p);
        assert_eq!(r, f32s(&[3, 2], &[1., 2., 3., 4., 5., 6.]));
        // A transposed (column-major) array is read in row-major order of its logical shape.
        let a = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
        let r = relabel("Reshape", Tensor::F32(a.reversed_axes()), &[6]).unwrap();
        assert_eq!(r, f32s(&[6], &[1., 4., 2., 5., 3., 6.]));
        assert!(relabel("Reshape", f32s(&[2], &[1., 2.]), &[3]).is_err());
    }
}
