//! Control flow: If, Loop and Scan. Their bodies are graph attributes that the reference
//! executor plans and runs itself (`runtime::reference::control`); here are their typed
//! attributes and their output types, read off the bodies' declared outputs.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | If | 1, 11, 13, 16, 19, 21 | `then_branch`, `else_branch` (graphs, required) | bool cond (1 element) -> the chosen branch's outputs (shapes may differ between branches) |
//! | Loop | 1, 11, 13, 16, 19, 21 | `body` (graph, required) | M (int64, optional), cond (bool, optional), N carried -> N final carried + K scan outputs stacked on a new axis 0 |
//! | Scan | 9, 11, 16, 19, 21 | `body`, `num_scan_inputs` (required), `scan_input_axes`/`scan_output_axes` (0s), `scan_input_directions`/`scan_output_directions` (0s: forward) | N states + M scan inputs -> N final states + K scan outputs |
//! | Scan | 8 | `body`, `num_scan_inputs` (required), `directions` (0s: forward, one per scan input) | sequence_lens (int64 [batch], optional), N states [batch, ...] + M scan inputs [batch, seq, ...] -> N final states [batch, ...] + K scan outputs [batch, seq, ...] |
//!
//! Version changes: If 11 lets branches' shapes differ; 13/16/19/21 only add types (optional
//! and sequence types are not held here). Loop 11 makes the trip count and cond inputs' shapes
//! scalar-or-[1]; later versions add types. Scan 8 is batched: every input and output has the
//! batch first and the scan axis is 1; batch entry b runs its own `sequence_lens[b]` steps (1
//! to the scan axis' length, as onnxruntime requires; all of it when the input is absent or
//! empty), and its scan outputs are zero past them. Scan 9 drops the batch and `sequence_lens`; 11 allows negative axes.
//! The kernel below is never called by the executor (which runs the bodies); it refuses.

use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::onnx::proto::GraphProto;
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

/// The graph attribute `name`, held by the op from parse on (the executor plans it as a body).
fn require(a: &Attrs, op: &str, name: &str) -> Result<GraphProto, String> {
    a.graph(name)?
        .cloned()
        .ok_or_else(|| format!("{op}: attribute '{name}' (a graph) is missing"))
}

/// The declared output types of a body graph.
fn body_outputs(g: Option<&GraphProto>) -> Vec<TensorType> {
    g.map(|g| {
        g.output
            .iter()
            .map(|o| {
                o.r#type
                    .as_ref()
                    .map(TensorType::from_proto)
                    .unwrap_or_default()
            })
            .collect()
    })
    .unwrap_or_default()
}

/// What two branches agree on: the type when both declare the same, dims that are equal.
fn merge(a: &TensorType, b: &TensorType) -> TensorType {
    let dtype = if a.dtype == b.dtype { a.dtype } else { None };
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.len() == y.len() => Some(
            x.iter()
                .zip(y)
                .map(|(p, q)| if p == q { p.clone() } else { Dim::Unknown })
                .collect(),
        ),
        _ => None,
    };
    TensorType { dtype, shape }
}

/// `t` with an unknown dim inserted at `axis` (a stacked scan output); unknown shape when the
/// axis does not fit.
fn stacked(t: &TensorType, axis: i64) -> TensorType {
    let shape = t.shape.as_ref().and_then(|s| {
        let rank = s.len() as i64 + 1;
        let ax = if axis < 0 { axis + rank } else { axis };
        (0..rank).contains(&ax).then(|| {
            let mut s = s.clone();
            s.insert(ax as usize, Dim::Unknown);
            s
        })
    });
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

fn refuse(_: &KernelCtx, _: &[Option<&Tensor>]) -> KernelResult {
    Err("control flow runs only inside the reference executor".into())
}

#[derive(Debug)]
pub struct If {
    pub then_branch: GraphProto,
    pub else_branch: GraphProto,
}

impl If {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(If {
            then_branch: require(a, "If", "then_branch")?,
            else_branch: require(a, "If", "else_branch")?,
        }))
    }
}

impl Op for If {
    fn bodies(&self) -> Vec<(&str, &GraphProto)> {
        vec![
            ("then_branch", &self.then_branch),
            ("else_branch", &self.else_branch),
        ]
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let t = body_outputs(Some(&self.then_branch));
        let e = body_outputs(Some(&self.else_branch));
        (0..cx.node.outputs.len())
            .map(|i| match (t.get(i), e.get(i)) {
                (Some(a), Some(b)) => merge(a, b),
                _ => TensorType::default(),
            })
            .collect()
    }
    fn kernel(&self) -> Kernel {
        refuse
    }
    fn any_element_type(&self) -> bool {
        true
    }
}

#[derive(Debug)]
pub struct Loop {
    pub body: GraphProto,
}

impl Loop {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Loop {
            body: require(a, "Loop", "body")?,
        }))
    }
}

impl Op for Loop {
    fn bodies(&self) -> Vec<(&str, &GraphProto)> {
        vec![("body", &self.body)]
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let body = body_outputs(Some(&self.body));
        let n = cx.node.inputs.len().saturating_sub(2);
        (0..cx.node.outputs.len())
            .map(|i| match body.get(i + 1) {
                // Carried values may change shape from one iteration to the next.
                Some(t) if i < n => TensorType {
                    dtype: t.dtype,
                    shape: None,
                },
                Some(t) => stacked(t, 0),
                None => TensorType::default(),
            })
            .collect()
    }
    fn kernel(&self) -> Kernel {
        refuse
    }
    fn any_element_type(&self) -> bool {
        true
    }
}

#[derive(Debug)]
pub struct Scan {
    pub body: GraphProto,
    pub num_scan_inputs: usize,
    pub input_axes: Vec<i64>,
    pub input_directions: Vec<i64>,
    pub output_axes: Vec<i64>,
    pub output_directions: Vec<i64>,
    /// Scan 8: a batch axis first on every input and output, and input 0 `sequence_lens`.
    pub batched: bool,
}

impl Scan {
    pub fn parse(a: &Attrs) -> P {
        let body = require(a, "Scan", "body")?;
        let m = a
            .opt_int("num_scan_inputs")?
            .ok_or("Scan: attribute 'num_scan_inputs' is missing")?;
        let m = usize::try_from(m)
            .ok()
            .filter(|&m| m >= 1)
            .ok_or(format!("Scan: num_scan_inputs is {m}, at least 1 expected"))?;
        let list = |name: &str, len: Option<usize>| -> Result<Vec<i64>, String> {
            let v = a.ints(name)?.unwrap_or_default();
            if let Some(len) = len {
                if !v.is_empty() && v.len() != len {
                    return Err(format!(
                        "Scan: '{name}' has {} entries, {len} expected",
                        v.len()
                    ));
                }
            }
            if name.ends_with("directions") && v.iter().any(|&d| d != 0 && d != 1) {
                return Err(format!("Scan: '{name}' holds a value other than 0 or 1"));
            }
            Ok(v)
        };
        if a.opset < 9 {
            // Scan 8 names its input directions `directions` and has no axes attributes.
            return Ok(Box::new(Scan {
                body,
                num_scan_inputs: m,
                input_axes: Vec::new(),
                input_directions: list("directions", Some(m))?,
                output_axes: Vec::new(),
                output_directions: Vec::new(),
                batched: true,
            }));
        }
        Ok(Box::new(Scan {
            body,
            num_scan_inputs: m,
            input_axes: list("scan_input_axes", Some(m))?,
            input_directions: list("scan_input_directions", Some(m))?,
            output_axes: list("scan_output_axes", None)?,
            output_directions: list("scan_output_directions", None)?,
            batched: false,
        }))
    }
}

impl Op for Scan {
    fn bodies(&self) -> Vec<(&str, &GraphProto)> {
        vec![("body", &self.body)]
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let body = body_outputs(Some(&self.body));
        // Scan 8's input 0 is sequence_lens, and its outputs gain a batch axis in front.
        let skip = usize::from(self.batched);
        let n = cx
            .node
            .inputs
            .len()
            .saturating_sub(self.num_scan_inputs + skip);
        (0..cx.node.outputs.len())
            .map(|i| match body.get(i) {
                Some(t) if self.batched && i < n => stacked(t, 0),
                Some(t) if self.batched => stacked(&stacked(t, 0), 0),
                Some(t) if i < n => t.clone(),
                Some(t) => stacked(t, self.output_axes.get(i - n).copied().unwrap_or(0)),
                None => TensorType::default(),
            })
            .collect()
    }
    fn kernel(&self) -> Kernel {
        refuse
    }
    fn any_element_type(&self) -> bool {
        true
    }
}
