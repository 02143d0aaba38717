//! The graph as the page draws it: nodes (with their attributes and the shapes of what they
//! read and write), the edges between them, and, after optimization, which original nodes each
//! fused node replaced. Plain data, serialized to JSON for the wasm API.
//!
//! Provenance comes from the rewrite trace alone. Each fusion event replaces `removed` by
//! `added`; a removed node that an earlier fusion added stands for the originals it replaced, so
//! a SkipLayerNormalization that absorbed a fused LayerNormalization lists the decomposed nodes.
//! Cleanup rules (dead code, folding, identities) make no fused nodes.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::ir::types::Dim;
use crate::ir::{Model, NodeId, ValueId};
use crate::onnx::proto::{attribute_type as at, AttributeProto};
use crate::passes::RewriteEvent;

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct GraphView {
    pub nodes: Vec<NodeView>,
    pub edges: Vec<EdgeView>,
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct NodeView {
    /// Unique within the view: `n<id>` for operators, `in:<name>` / `out:<name>` for the
    /// graph's inputs and outputs.
    pub id: String,
    pub kind: NodeKind,
    /// The node's name (or `Op#id` when unnamed); the value's name for inputs and outputs.
    pub name: String,
    pub op_type: String,
    pub domain: String,
    pub attributes: BTreeMap<String, String>,
    pub inputs: Vec<PortView>,
    pub outputs: Vec<PortView>,
    /// For a fused node: the rule that made it and the original nodes (names) it replaced.
    pub fused: Option<Fused>,
    /// For a node of the original graph: the fused node (name) that replaced it.
    pub fused_into: Option<String>,
}

/// An operator, or one of the graph's inputs or outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Op,
    Input,
    Output,
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Fused {
    pub rule: String,
    pub replaced: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct PortView {
    pub name: String,
    pub dtype: Option<String>,
    /// Dims as text: numbers, symbolic names, "?" when unknown; None when the rank is unknown.
    pub shape: Option<Vec<String>>,
    /// True for an initializer (weights are not drawn as edges).
    pub constant: bool,
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct EdgeView {
    pub from: String,
    pub to: String,
    pub value: String,
}

/// Fusion provenance: fused node name → (rule, original node names), and the reverse.
#[derive(Clone, Debug, Default)]
pub struct Provenance {
    pub fused_from: HashMap<String, Fused>,
    pub fused_into: HashMap<String, String>,
}

impl Provenance {
    /// Reads the rewrites of one optimization (the trace's, or the report's).
    pub fn from_rewrites(rewrites: &[RewriteEvent]) -> Provenance {
        // Name of every node a fusion added → the originals it stands for.
        let mut stands_for: HashMap<String, (String, Vec<String>)> = HashMap::new();
        let mut fused_last: Vec<String> = Vec::new();
        for e in rewrites {
            if !e.kind.fuses() {
                continue;
            }
            let mut originals = Vec::new();
            for r in &e.removed {
                match stands_for.remove(&r.name) {
                    Some((_, o)) => originals.extend(o),
                    None => originals.push(r.name.clone()),
                }
            }
            for a in &e.added {
                stands_for.insert(a.name.clone(), (e.rule.clone(), originals.clone()));
            }
            if let Some(last) = e.added.last() {
                fused_last.push(last.name.clone());
            }
        }
        let mut p = Provenance::default();
        for name in fused_last {
            if let Some((rule, replaced)) = stands_for.get(&name) {
                for o in replaced {
                    p.fused_into.insert(o.clone(), name.clone());
                }
                p.fused_from.insert(
                    name,
                    Fused {
                        rule: rule.clone(),
                        replaced: replaced.clone(),
                    },
                );
            }
        }
        p
    }
}

/// The view of `model`; with `prov`, fused nodes carry what they replaced and original nodes
/// the fused node that replaced them (only names present in `model` are marked).
pub fn graph_view(model: &Model, prov: Option<&Provenance>) -> GraphView {
    let g = &model.graph;
    let port = |v: ValueId| {
        let ty = &g.value(v).ty;
        PortView {
            name: g.name(v).to_string(),
            dtype: ty.dtype.map(|d| d.name().to_string()),
            shape: ty.shape.as_ref().map(|s| s.iter().map(dim_text).collect()),
            constant: g.initializer(v).is_some(),
        }
    };
    let node_key = |id: NodeId| format!("n{}", id.0);
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for &v in &g.inputs {
        if g.initializer(v).is_some() {
            continue;
        }
        nodes.push(NodeView {
            id: format!("in:{}", g.name(v)),
            kind: NodeKind::Input,
            name: g.name(v).to_string(),
            op_type: "Input".into(),
            domain: String::new(),
            attributes: BTreeMap::new(),
            inputs: vec![],
            outputs: vec![port(v)],
            fused: None,
            fused_into: None,
        });
    }
    for id in g.node_ids() {
        let n = g.node(id);
        let name = n.label(id);
        nodes.push(NodeView {
            id: node_key(id),
            kind: NodeKind::Op,
            op_type: n.op_type.clone(),
            domain: n.domain.clone(),
            attributes: {
                // Inserted one by one: collecting into a BTreeMap sorts with a copy of its own.
                let mut m = BTreeMap::new();
                for a in n.attributes() {
                    m.insert(a.name.clone(), attr_text(a));
                }
                m
            },
            inputs: n.inputs.iter().flatten().map(|&v| port(v)).collect(),
            outputs: n.outputs.iter().flatten().map(|&v| port(v)).collect(),
            fused: prov.and_then(|p| p.fused_from.get(&name).cloned()),
            fused_into: prov.and_then(|p| p.fused_into.get(&name).cloned()),
            name,
        });
        for v in n.all_inputs() {
            let from = match g.producer(v) {
                Some(p) => node_key(p),
                None if g.is_graph_input(v) && g.initializer(v).is_none() => {
                    format!("in:{}", g.name(v))
                }
                None => continue,
            };
            edges.push(EdgeView {
                from,
                to: node_key(id),
                value: g.name(v).to_string(),
            });
        }
    }
    for &v in &g.outputs {
        let id = format!("out:{}", g.name(v));
        let from = match g.producer(v) {
            Some(p) => node_key(p),
            None => format!("in:{}", g.name(v)),
        };
        edges.push(EdgeView {
            from,
            to: id.clone(),
            value: g.name(v).to_string(),
        });
        nodes.push(NodeView {
            id,
            kind: NodeKind::Output,
            name: g.name(v).to_string(),
            op_type: "Output".into(),
            domain: String::new(),
            attributes: BTreeMap::new(),
            inputs: vec![port(v)],
            outputs: vec![],
            fused: None,
            fused_into: None,
        });
    }
    GraphView { nodes, edges }
}

fn dim_text(d: &Dim) -> String {
    d.to_string()
}

/// At most this many list elements are written out.
const LIST_SHOWN: usize = 16;

fn list<T: std::fmt::Display>(xs: &[T]) -> String {
    let shown: Vec<String> = xs.iter().take(LIST_SHOWN).map(|x| x.to_string()).collect();
    let more = xs.len().saturating_sub(LIST_SHOWN);
    if more > 0 {
        format!("[{}, … {more} more]", shown.join(", "))
    } else {
        format!("[{}]", shown.join(", "))
    }
}

/// One line of text for an attribute value.
pub fn attr_text(a: &AttributeProto) -> String {
    let bytes = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match a.r#type {
        at::INT => a.i.to_string(),
        at::FLOAT => a.f.to_string(),
        at::STRING => format!("{:?}", bytes(&a.s)),
        at::INTS => list(&a.ints),
        at::FLOATS => list(&a.floats),
        at::STRINGS => list(
            &a.strings
                .iter()
                .map(|s| format!("{:?}", bytes(s)))
                .collect::<Vec<_>>(),
        ),
        at::TENSOR => match &a.t {
            Some(t) => format!("tensor {} {:?}", crate::DType(t.data_type).name(), t.dims),
            None => "tensor".into(),
        },
        at::GRAPH => "graph".into(),
        at::GRAPHS => format!("{} graphs", a.graphs.len()),
        t => format!("attribute type {t}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::NodeRef;

    fn node(name: &str, op: &str) -> NodeRef {
        NodeRef {
            name: name.into(),
            op_type: op.into(),
            domain: String::new(),
            id: crate::ir::NodeId(0),
        }
    }

    fn event(rule: &str, removed: &[&str], added: &[&str]) -> RewriteEvent {
        RewriteEvent {
            rule: rule.into(),
            kind: crate::passes::rule(rule).expect("a registered rule").kind(),
            iteration: 0,
            removed: removed.iter().map(|n| node(n, "X")).collect(),
            added: added.iter().map(|n| node(n, "Y")).collect(),
            eliminated: Vec::new(),
            intermediate_bytes: None,
        }
    }

    #[test]
    fn provenance_follows_fusions_of_fused_nodes_and_skips_cleanups() {
        let p = Provenance::from_rewrites(&[
            event("layer_norm", &["mean", "sub", "pow"], &["ln"]),
            event("const_fold", &["shape"], &["c"]),
            event("skip_layer_norm", &["add", "ln"], &["sln"]),
            event("attention", &["qk", "softmax"], &["cast", "attn"]),
        ]);
        let sln = &p.fused_from["sln"];
        assert_eq!(sln.rule, "skip_layer_norm");
        assert_eq!(sln.replaced, ["add", "mean", "sub", "pow"]);
        assert!(!p.fused_from.contains_key("ln"), "absorbed by sln");
        assert!(!p.fused_from.contains_key("c"), "cleanup");
        assert!(
            !p.fused_from.contains_key("cast"),
            "helper, not the fused node"
        );
        assert_eq!(p.fused_from["attn"].replaced, ["qk", "softmax"]);
        assert_eq!(p.fused_into["mean"], "sln");
        assert_eq!(p.fused_into["softmax"], "attn");
        assert!(!p.fused_into.contains_key("shape"));
    }
}
