//! Chains of float32 elementwise ops → one `ai.fuselab.FusedElementwise` node that carries the
//! chain as an expression (`crate::ir::expr`), computed in one pass over the output.
//!
//! ```text
//!   before                                        after
//!
//!   x ──► Add ──► s ──► Mul ──► p ──► Relu ──► y    x, y ──► FusedElementwise ──► y
//!   y ───┘              │                               expression =
//!              0.5 ─────┘ (scalar constant)             "(relu (mul (add x0 x1) 0.5))"
//! ```
//!
//! The op, `ai.fuselab.FusedElementwise` (opset import 1):
//! - Inputs: the chain's external tensors, deduplicated, in first-use order (the order they
//!   appear in the printed expression), called `x0`, `x1`, ... in the expression. Single-element
//!   finite float32 constants (initializers no input overrides, Constant outputs) that the
//!   chain reads become literals; other constants stay inputs. A single-element constant of
//!   rank r > 0 becomes a literal only when another input is known to have rank >= r, since
//!   broadcasting it could otherwise raise the output's rank. A Constant node read only by the
//!   chain goes with it.
//! - Attribute `expression` (STRING): the S-expression, grammar in `crate::ir::expr` (ops
//!   `neg abs sqrt exp log erf tanh sigmoid relu`, `add sub mul div pow`; literals print as
//!   Rust's shortest round-trip f32 text; at most `MAX_DEPTH` deep and `MAX_LEN` bytes).
//! - Output: one float32 tensor, the multidirectional (numpy) broadcast of all inputs' shapes,
//!   as the chained ops compute it; each element is the expression of the input elements that
//!   broadcast to its position, with each op's ONNX float32 semantics.
//!
//! Which ops join: Add Sub Mul Div Pow Neg Abs Sqrt Exp Log Erf Tanh Sigmoid Relu in the
//! default domain, with every input and the output known to be float32 and no attributes (the
//! opset < 7 `broadcast`/`axis` and `consumed_inputs` forms mean something else). A group is a
//! tree: an op's output joins the op reading it only when that op is its single reader, reads
//! it once, and it is not a graph output. A value read twice, even inside the chain, ends the
//! group there: the tree would compute it once per use (chains of such values grow the tree
//! exponentially). The group is anchored at its root (the op whose output leaves the chain), so
//! every op is in exactly one group, and fuses when it has at least two ops. Rejections: a lone
//! op that a neighbour could not join (with the neighbour's reason), a chain deeper than
//! `MAX_DEPTH`, one whose text would pass `MAX_LEN`, a non-float32 op next to another
//! elementwise op, and a chain of constants only (const_fold's job).
//!
//! Why the rule is deferred (`Rule::deferred`) and not merely last in the list: the engine
//! sweeps every rule in each iteration, and a named fusion may match only in a later iteration
//! (after shape_fold or a refreshed shape inference makes a dim provable, after gelu produced
//! the Gelu that bias_gelu extends). A rule that only ran last in each sweep would fuse an
//! attention mask's Sub/Mul or a Gelu's Div/Erf/Add/Mul in the first sweep and take them from
//! attention or gelu for good. Deferred, it sweeps only when every other rule is at its fixed
//! point, so it takes exactly what they leave, wherever it is listed.
//!
//! Not a default rule: onnxruntime has no `ai.fuselab` ops, and models saved with the default
//! rules must stay runnable there. A backend that runs FusedElementwise applies
//! `passes::BACKEND_LOWERING_RULES` to its own copy at prepare time; a user opts in by name.

use std::collections::HashMap;

use crate::ir::expr::{BinaryOp, Expr, UnaryOp, MAX_DEPTH, MAX_LEN};
use crate::ir::model::FUSELAB_DOMAIN;
use crate::ir::{attr, Model, Node, NodeId, ValueId};
use crate::passes::matchers::{constant_value, fresh_node_name, require_f32};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};
use crate::tensor::Tensor;

pub const OP_TYPE: &str = "FusedElementwise";

pub struct FuseElementwise;

impl Rule for FuseElementwise {
    fn name(&self) -> &'static str {
        "fused_elementwise"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::BackendLowering
    }

    /// The elementwise ops a group is made of (`member`).
    fn anchors(&self) -> Anchors {
        let unary = UnaryOp::ALL.into_iter().map(UnaryOp::onnx_op);
        let binary = BinaryOp::ALL.into_iter().map(BinaryOp::onnx_op);
        Anchors::Ops(unary.chain(binary).map(|op| ("", op)).collect())
    }

    fn deferred(&self) -> bool {
        true
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let op = match member(model, id) {
            None => return Proposal::NoMatch,
            Some(Ok(op)) => op,
            Some(Err(why)) if has_elementwise_neighbour(model, id) => return Proposal::Reject(why),
            Some(Err(_)) => return Proposal::NoMatch,
        };
        let root = g.node(id);
        let y = root.output(0).expect("member() checked the output");
        // Not a root: the op reading y takes this one into its own group.
        let out_why = match absorbing_reader(model, y) {
            Ok(_) => return Proposal::NoMatch,
            Err(why) => why,
        };
        let mut b = Builder {
            model,
            members: Vec::new(),
            leaves: Vec::new(),
            why_not: Vec::new(),
        };
        let tree = match b.node_expr(id, op, 1) {
            Ok(t) => t,
            Err(why) => return Proposal::Reject(why),
        };
        if b.members.len() < 2 {
            let mut why = vec![out_why];
            why.append(&mut b.why_not);
            return Proposal::Reject(format!(
                "a lone elementwise op, nothing to fuse: {}",
                why.join("; ")
            ));
        }
        let (expr, inputs) = b.fold_literals(tree);
        if inputs.is_empty() {
            return Proposal::Reject(
                "every operand of the chain is a constant (const_fold computes it)".into(),
            );
        }
        let text = expr.to_string();
        if text.len() > MAX_LEN {
            return Proposal::Reject(format!(
                "the expression would be {} bytes, over the {MAX_LEN}-byte limit",
                text.len()
            ));
        }
        let mut remove = b.members.clone();
        remove.extend(dead_constant_nodes(model, &b.members, &inputs));
        let mut fused = Node::new(OP_TYPE, FUSELAB_DOMAIN);
        fused.name = fresh_node_name(g, &format!("{}_{OP_TYPE}", root.label(id)));
        fused.inputs = inputs.into_iter().map(Some).collect();
        fused.outputs = vec![Some(y)];
        fused.set_attr(attr::string("expression", &text));
        Proposal::Rewrite(Patch {
            remove,
            add: vec![fused.into()],
            opsets: vec![(FUSELAB_DOMAIN.to_string(), 1)],
            ..Default::default()
        })
    }
}

#[derive(Clone, Copy)]
enum Op {
    Unary(UnaryOp),
    Binary(BinaryOp),
}

/// `None` when node `id` is not an elementwise op type this rule knows; `Some(Err(why))` when
/// it is one but a guard refuses it; else the op it computes.
fn member(model: &Model, id: NodeId) -> Option<Result<Op, String>> {
    let g = &model.graph;
    let n = g.node(id);
    if !n.is_onnx_domain() {
        return None;
    }
    let (op, arity) = match (
        UnaryOp::from_onnx(&n.op_type),
        BinaryOp::from_onnx(&n.op_type),
    ) {
        (Some(u), _) => (Op::Unary(u), 1),
        (_, Some(b)) => (Op::Binary(b), 2),
        _ => return None,
    };
    let check = || -> Result<Op, String> {
        let label = || format!("{} '{}'", n.op_type, n.label(id));
        if n.inputs.len() != arity || n.inputs.iter().any(Option::is_none) {
            return Err(format!("{} does not have {arity} input(s)", label()));
        }
        if n.outputs.len() != 1 || n.output(0).is_none() {
            return Err(format!("{} does not have one output", label()));
        }
        if let Some(name) = n.attribute_names().next() {
            return Err(format!(
                "{} has attribute '{name}' (a pre-opset-7 form)",
                label(),
            ));
        }
        for v in n.inputs.iter().chain(&n.outputs).flatten() {
            require_f32(g, *v)?;
        }
        Ok(op)
    };
    Some(check())
}

/// True when node `id` is one of the elementwise op types the rule joins, whatever its element
/// type: the profiler (`crate::profile`) measures memory bandwidth on these memory-bound ops.
pub fn is_elementwise(model: &Model, id: NodeId) -> bool {
    member(model, id).is_some()
}

/// True when a producer of `id`'s inputs or a reader of its output is an elementwise op type:
/// only then is a refused op worth a report line (int64 shape arithmetic alone is not).
fn has_elementwise_neighbour(model: &Model, id: NodeId) -> bool {
    let g = &model.graph;
    let n = g.node(id);
    let producers = n.inputs.iter().flatten().filter_map(|&v| g.producer(v));
    let readers = n
        .outputs
        .iter()
        .flatten()
        .flat_map(|&v| g.consumers(v).iter().copied());
    producers.chain(readers).any(|p| member(model, p).is_some())
}

/// The op whose expression absorbs `v`, the output of a member: its only reader, reading it
/// once, itself a member, with `v` not a graph output. Else why the chain ends at `v`.
fn absorbing_reader(model: &Model, v: ValueId) -> Result<NodeId, String> {
    let g = &model.graph;
    let name = g.name(v);
    if g.is_graph_output(v) {
        return Err(format!("'{name}' is a graph output"));
    }
    let describe = |c: NodeId| format!("{} '{}'", g.node(c).op_type, g.node(c).label(c));
    match g.consumers(v) {
        [] => Err(format!("'{name}' has no reader")),
        &[c] => match member(model, c) {
            Some(Ok(_)) => Ok(c),
            Some(Err(why)) => Err(format!(
                "'{name}' feeds {}, which cannot join: {why}",
                describe(c)
            )),
            None => Err(format!(
                "'{name}' feeds {}, not an elementwise op",
                describe(c)
            )),
        },
        many => {
            let outside: Vec<String> = many
                .iter()
                .filter(|&&c| !matches!(member(model, c), Some(Ok(_))))
                .map(|&c| describe(c))
                .collect();
            Err(if outside.is_empty() {
                format!(
                    "'{name}' is read {} times; the expression is a tree and would compute it \
                     once per use",
                    many.len()
                )
            } else {
                format!(
                    "'{name}' is read {} times, also by {} outside the chain",
                    many.len(),
                    outside.join(", ")
                )
            })
        }
    }
}

/// Collects one group from its root down.
struct Builder<'a> {
    model: &'a Model,
    members: Vec<NodeId>,
    /// Values read from outside the group, in first-use order; `Expr::Input(i)` is `leaves[i]`.
    leaves: Vec<ValueId>,
    /// Why elementwise producers of leaves did not join (for a lone op's rejection).
    why_not: Vec<String>,
}

impl Builder<'_> {
    /// The expression of node `id` at op depth `depth` (the root is 1), operands in input order.
    fn node_expr(&mut self, id: NodeId, op: Op, depth: usize) -> Result<Expr, String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "the chain is more than {MAX_DEPTH} ops deep (the expression depth limit)"
            ));
        }
        self.members.push(id);
        let g = &self.model.graph;
        let inputs: Vec<ValueId> = g.node(id).inputs.iter().flatten().copied().collect();
        let mut operands = Vec::with_capacity(inputs.len());
        for u in inputs {
            operands.push(self.operand(u, id, depth)?);
        }
        let mut operands = operands.into_iter();
        let a = operands.next().expect("member() checked the arity");
        Ok(match op {
            Op::Unary(u) => Expr::unary(u, a),
            Op::Binary(b) => Expr::binary(b, a, operands.next().expect("checked")),
        })
    }

    /// The expression for input `u` of member `reader`.
    fn operand(&mut self, u: ValueId, reader: NodeId, depth: usize) -> Result<Expr, String> {
        let g = &self.model.graph;
        if let Some(p) = g.producer(u) {
            match (member(self.model, p), absorbing_reader(self.model, u)) {
                (Some(Ok(op)), Ok(r)) if r == reader => return self.node_expr(p, op, depth + 1),
                (Some(Ok(_)), Err(why)) | (Some(Err(why)), _) => self.why_not.push(why),
                _ => {}
            }
        }
        let i = match self.leaves.iter().position(|&l| l == u) {
            Some(i) => i,
            None => {
                self.leaves.push(u);
                self.leaves.len() - 1
            }
        };
        Ok(Expr::Input(i))
    }

    /// Replaces leaves that are single-element finite constants by literals (see the module doc
    /// for the rank condition) and renumbers the rest: (expression, the node's inputs).
    fn fold_literals(&self, tree: Expr) -> (Expr, Vec<ValueId>) {
        let g = &self.model.graph;
        let literal: Vec<Option<f32>> = self
            .leaves
            .iter()
            .map(|&v| scalar_f32(self.model, v))
            .collect();
        // A lower bound on the output's rank: the known ranks of the leaves that stay inputs.
        let kept_rank = self
            .leaves
            .iter()
            .zip(&literal)
            .filter(|(_, l)| l.is_none())
            .filter_map(|(&v, _)| g.value(v).ty.rank())
            .max()
            .unwrap_or(0);
        let mut map: HashMap<usize, Expr> = HashMap::new();
        let mut inputs = Vec::new();
        for (i, (&v, l)) in self.leaves.iter().zip(&literal).enumerate() {
            let rank = g.value(v).ty.rank();
            let e = match (l, rank) {
                (Some(c), Some(r)) if r <= kept_rank => Expr::Literal(*c),
                _ => {
                    inputs.push(v);
                    Expr::Input(inputs.len() - 1)
                }
            };
            map.insert(i, e);
        }
        (substitute(tree, &map), inputs)
    }
}

/// `tree` with every `Input(i)` replaced by `map[i]`.
fn substitute(tree: Expr, map: &HashMap<usize, Expr>) -> Expr {
    match tree {
        Expr::Input(i) => map[&i].clone(),
        Expr::Literal(c) => Expr::Literal(c),
        Expr::Unary(op, a) => Expr::unary(op, substitute(*a, map)),
        Expr::Binary(op, a, b) => Expr::binary(op, substitute(*a, map), substitute(*b, map)),
    }
}

/// The value of `v` when it is a one-element finite float32 constant. Initializers are sized
/// from their dims before anything is decoded (an embedding table is not read to learn that).
fn scalar_f32(model: &Model, v: ValueId) -> Option<f32> {
    let g = &model.graph;
    let one = match g.constant(v) {
        Some(t) => t.dims.iter().product::<i64>() == 1,
        None => g.value(v).ty.static_shape()?.iter().product::<i64>() == 1,
    };
    if !one {
        return None;
    }
    match constant_value(model, v)?.as_ref() {
        Tensor::F32(a) if a.len() == 1 => a.iter().next().copied().filter(|c| c.is_finite()),
        _ => None,
    }
}

/// Constant nodes whose output the chain folded into literals and nothing else reads.
fn dead_constant_nodes(model: &Model, members: &[NodeId], inputs: &[ValueId]) -> Vec<NodeId> {
    let g = &model.graph;
    let mut out = Vec::new();
    for &m in members {
        for v in g.node(m).inputs.iter().flatten() {
            let Some(p) = g.producer(*v) else { continue };
            let only_chain = g.consumers(*v).iter().all(|c| members.contains(c));
            if g.node(p).is("Constant")
                && g.node(p).outputs.len() == 1
                && !inputs.contains(v)
                && only_chain
                && !g.is_graph_output(*v)
                && !out.contains(&p)
            {
                out.push(p);
            }
        }
    }
    out
}
