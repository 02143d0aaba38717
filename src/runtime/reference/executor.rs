//! The executor: a plan made once per model (kernels looked up, constants decoded, last uses
//! computed), then run any number of times.

use std::collections::HashMap;

use crate::ir::model::display_domain;
use crate::ir::{Dim, Model, NodeId, ValueId};
use crate::limits::Limits;
use crate::onnx::tensor::to_tensor;
use crate::runtime::reference::{lookup, Kernel, KernelCtx};
use crate::tensor::Tensor;
use crate::{Error, Result};

struct Step {
    node: NodeId,
    kernel: Kernel,
    opset: i64,
    /// Values whose last reader is this step: dropped right after it.
    free_after: Vec<ValueId>,
}

/// Hears about every node the executor runs: `before` just ahead of reading its inputs, `after`
/// once its outputs are stored and the values it read last are dropped.
pub trait StepObserver {
    fn before(&mut self, node: NodeId);
    fn after(&mut self, node: NodeId);
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
    steps: Vec<Step>,
    constants: Vec<Option<Tensor>>,
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
        let domain_name = |d: &str| display_domain(d).to_string();
        let mut missing: Vec<(String, String)> = Vec::new();
        for &id in &order {
            let n = g.node(id);
            let key = (n.op_type.clone(), domain_name(&n.domain));
            if lookup(&n.domain, &n.op_type).is_none() && !missing.contains(&key) {
                missing.push(key);
            }
        }
        let mut steps = Vec::with_capacity(order.len());
        for &id in &order {
            let node = g.node(id);
            let kernel = lookup(&node.domain, &node.op_type).ok_or_else(|| {
                let others: Vec<String> = missing
                    .iter()
                    .skip(1)
                    .map(|(op, d)| format!("{op} ({d})"))
                    .collect();
                Error::UnsupportedOp {
                    op_type: node.op_type.clone(),
                    domain: domain_name(&node.domain),
                    node: node.label(id),
                    also: if others.is_empty() {
                        String::new()
                    } else {
                        format!("; also missing: {}", others.join(", "))
                    },
                }
            })?;
            if !node.implicit_inputs.is_empty() {
                return Err(Error::UnsupportedOp {
                    op_type: format!("{} with subgraphs", node.op_type),
                    domain: domain_name(&node.domain),
                    node: node.label(id),
                    also: String::new(),
                });
            }
            steps.push(Step {
                node: id,
                kernel,
                opset: model.opset(&node.domain).unwrap_or(1),
                free_after: Vec::new(),
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
            }
        }
        let mut constants: Vec<Option<Tensor>> = (0..g.value_count()).map(|_| None).collect();
        for (v, t) in g.initializers() {
            constants[v.0 as usize] = Some(to_tensor(t, limits)?);
        }
        Ok(Executor {
            model,
            steps,
            constants,
            limits: *limits,
        })
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
            let ctx = KernelCtx {
                node,
                opset: step.opset,
                limits: &self.limits,
            };
            let outs = (step.kernel)(&ctx, &args).map_err(|message| Error::Kernel {
                op_type: node.op_type.clone(),
                node: node.label(step.node),
                message,
            })?;
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
