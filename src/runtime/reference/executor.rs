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

/// Whether the reference backend can run node `id` of `model` (partial parity asks it of every
/// node): its op has a kernel at the model's opset and, for If/Loop/Scan, every body plans. An
/// op whose attributes are bad counts as runnable, so that planning reports it.
pub fn runs_node(model: &Model, id: NodeId, limits: &Limits) -> bool {
    let node = model.graph.node(id);
    let opset = model.opset(&node.domain).unwrap_or(1);
    let op = match ops::resolve(node, opset) {
        Ok(op) => op,
        Err(OpError::Unsupported) => return false,
        Err(OpError::BadAttributes(_)) => return true,
    };
    if node.is_onnx_domain() && super::control::is_control(&node.op_type) {
        op.bodies().into_iter().all(|(_, gp)| {
            crate::io::load::subgraph_model(gp, &model.proto)
                .is_ok_and(|body| Executor::new(&body, limits).is_ok())
        })
    } else {
        node.implicit_inputs.is_empty() && !node.has_subgraphs()
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
    pub fn run_observed(
        &self,
        inputs: &HashMap<String, Tensor>,
        obs: &mut dyn StepObserver,
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

    /// One copy for every observer (a call through `dyn` per node costs nothing beside a
    /// kernel; a copy per observer cost 4 KB in the wasm build).
    fn execute<'a>(
        &'a self,
        mut slots: Vec<Slot<'a>>,
        obs: &mut dyn StepObserver,
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
#[path = "executor_tests.rs"]
mod tests;
