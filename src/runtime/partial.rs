//! Partial parity: when the reference backend lacks a kernel for some node, the values whose
//! whole cone of producers it can run are still compared. A model with one custom op at the end
//! (or an `IsNaN` guard on one branch) keeps its parity check for everything else.

use crate::ir::model::display_domain;
use crate::ir::{Model, NodeId, ValueId};
use crate::limits::Limits;
use crate::runtime::reference::runs_node;

/// What the reference backend can compute of a model.
pub struct Runnable {
    /// Per value id: computable from the graph inputs and constants with kernels it has.
    computable: Vec<bool>,
    /// "Op (domain)" of each op type it has no kernel for, in graph order, once each.
    pub missing: Vec<String>,
}

impl Runnable {
    pub fn of(model: &Model, limits: &Limits) -> crate::Result<Runnable> {
        let g = &model.graph;
        let mut computable = vec![false; g.value_count()];
        for &v in &g.inputs {
            computable[v.0 as usize] = true;
        }
        for (v, _) in g.initializers() {
            computable[v.0 as usize] = true;
        }
        let mut missing = Vec::new();
        for id in g.topo_order()? {
            let n = g.node(id);
            let runs = runs_node(model, id, limits);
            if !runs {
                let key = format!("{} ({})", n.op_type, display_domain(&n.domain));
                if !missing.contains(&key) {
                    missing.push(key);
                }
            }
            let fed = n.all_inputs().all(|v| computable[v.0 as usize]);
            for &o in n.outputs.iter().flatten() {
                computable[o.0 as usize] = runs && fed;
            }
        }
        Ok(Runnable {
            computable,
            missing,
        })
    }

    pub fn computes(&self, v: ValueId) -> bool {
        self.computable.get(v.0 as usize).copied().unwrap_or(false)
    }
}

/// `model` cut down to the nodes `outputs` need, with `outputs` (each computable) as its graph
/// outputs. Value ids stay the same, so what is kept of one run maps back to `model`'s values.
pub fn restrict(model: &Model, outputs: &[ValueId]) -> Model {
    let mut m = model.clone();
    let g = &mut m.graph;
    let mut needed = std::collections::HashSet::new();
    let mut stack: Vec<ValueId> = outputs.to_vec();
    let mut seen = vec![false; g.value_count()];
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut seen[v.0 as usize], true) {
            continue;
        }
        if let Some(p) = g.producer(v) {
            needed.insert(p);
            stack.extend(g.node(p).all_inputs());
        }
    }
    let drop: Vec<NodeId> = g.node_ids().filter(|id| !needed.contains(id)).collect();
    for id in drop {
        g.remove_node(id);
    }
    g.outputs = outputs.to_vec();
    m
}
