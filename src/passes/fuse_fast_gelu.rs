//! Tanh-approximated GELU → com.microsoft.FastGelu, with a preceding bias Add absorbed.
//!
//! ```text
//!   before                                                           after
//!
//!   x ─► Pow(3) ─► Mul(0.044715) ─► Add(x) ─► Mul(√(2/π)) ─► Tanh ─┐    x ─► FastGelu ─► y
//!   ┌──────────────────────────────────────────────────────────────┘
//!   └► Add(1) ─► Mul(x) ─► Mul(0.5) ─► y
//! ```
//! `0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 * x³)))`. Accepted variants: x³ as `Pow(x, 3)`,
//! `Mul(Mul(x, x), x)` or `Mul(x, Mul(x, x))`; every operand order of the Adds and Muls; the
//! tail in any association (`matchers::half_x_product`) or as `x * (0.5 + 0.5 * tanh(·))`.
//! BLOOM's factored form `tanh((√(2/π) * x) * (1 + 0.044715 * x * x))` (x² in any association)
//! is the same function and fuses the same way.
//! A second anchor absorbs a bias: `FastGelu(Add(A, bias))` → `FastGelu(A, bias)` with `bias` a
//! 1-D constant of the hidden size.
//!
//! Guards: every intermediate is read once and is not a graph output; 3, 0.044715, √(2/π), 1 and
//! 0.5 are constants within `CONST_REL_TOL` (float16 constants: within their rounding, `matchers::is_scalar`);
//! x is float32 or float16 (onnxruntime's CPU kernel runs both).

use crate::ir::model::MS_DOMAIN;
use crate::ir::{Model, Node, NodeId, ValueId};
use crate::passes::matchers::{
    bias_add, fresh_node_name, half_x_product, is_scalar, last_dim, other_input, produced_by,
    require_f32_or_f16, scaled_by, sole_consumer, sole_consumer_op,
};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

const CUBE_COEFF: f64 = 0.044715;
/// √(2/π)
const TANH_SCALE: f64 = 0.797_884_560_802_865_4;

pub struct FuseFastGelu;

impl Rule for FuseFastGelu {
    fn name(&self) -> &'static str {
        "fast_gelu"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::Ops(vec![("", "Tanh"), (MS_DOMAIN, "FastGelu")])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let node = model.graph.node(id);
        let result = if node.is("Tanh") {
            match match_tanh_form(model, id) {
                None => return Proposal::NoMatch,
                Some(r) => r,
            }
        } else if node.op_type == "FastGelu" && node.domain == MS_DOMAIN && node.inputs.len() == 1 {
            match absorb_bias(model, id) {
                None => return Proposal::NoMatch,
                Some(r) => r,
            }
        } else {
            return Proposal::NoMatch;
        };
        match result {
            Ok(p) => Proposal::Rewrite(p),
            Err(why) => Proposal::Reject(why),
        }
    }
}

/// The nodes computing `x³` into `c`, when they do.
fn cube_of(model: &Model, c: ValueId, x: ValueId) -> Option<Vec<NodeId>> {
    let g = &model.graph;
    if let Some((id, n)) = produced_by(g, c, "Pow") {
        return (n.input(0) == Some(x) && n.input(1).is_some_and(|e| is_scalar(model, e, 3.0)))
            .then(|| vec![id]);
    }
    let (id, n) = produced_by(g, c, "Mul")?;
    let sq = other_input(n, x)?;
    let (sq_id, sq_n) = produced_by(g, sq, "Mul")?;
    let squares_x = sq_n.input(0) == Some(x) && sq_n.input(1) == Some(x);
    (squares_x && sole_consumer(g, sq).ok() == Some(id)).then(|| vec![sq_id, id])
}

/// The nodes computing `0.044715 * x²` into `w` in any association, when they do.
fn scaled_square_of(model: &Model, w: ValueId, x: ValueId) -> Option<Vec<NodeId>> {
    let g = &model.graph;
    let (id, n) = produced_by(g, w, "Mul")?;
    // (x * x) * 0.044715
    if let Ok((_, sq)) = scaled_by(model, w, "Mul", CUBE_COEFF) {
        let (sq_id, sq_n) = produced_by(g, sq, "Mul")?;
        return (sq_n.input(0) == Some(x) && sq_n.input(1) == Some(x)).then(|| vec![sq_id, id]);
    }
    // (x * 0.044715) * x, either order
    let k = other_input(n, x)?;
    match scaled_by(model, k, "Mul", CUBE_COEFF) {
        Ok((k_id, y)) if y == x => Some(vec![k_id, id]),
        _ => None,
    }
}

/// Walks back from the Tanh; `None` when this Tanh is not fed by a Mul (not a candidate).
fn match_tanh_form(model: &Model, tanh_id: NodeId) -> Option<Result<Patch, String>> {
    let g = &model.graph;
    let u = g.node(tanh_id).input(0)?;
    let (u_id, u_node) = produced_by(g, u, "Mul")?;
    Some((|| {
        let (scale_id, s) = match scaled_by(model, u, "Mul", TANH_SCALE) {
            Ok(found) => found,
            Err(why) => return factored(model, tanh_id, u_id, u_node).unwrap_or(Err(why)),
        };
        let (add_id, add) = produced_by(g, s, "Add")
            .ok_or_else(|| format!("'{}' is not computed by Add", g.name(s)))?;
        // Add(x, 0.044715 * x³) in either order.
        let mut why = String::from("Add does not compute x + 0.044715 * x^3");
        for i in [0, 1] {
            let (Some(x), Some(k)) = (add.input(i), add.input(1 - i)) else {
                continue;
            };
            match scaled_by(model, k, "Mul", CUBE_COEFF) {
                Ok((coeff_id, c)) => match cube_of(model, c, x) {
                    Some(mut inner) => {
                        inner.extend([coeff_id, add_id, scale_id]);
                        return finish(model, x, tanh_id, inner);
                    }
                    None => why = format!("'{}' is not x^3", g.name(c)),
                },
                Err(e) if produced_by(g, k, "Mul").is_some() => why = e,
                Err(_) => {}
            }
        }
        Err(why)
    })())
}

/// BLOOM's factored form: `tanh((√(2/π) * x) * (1 + 0.044715 * x * x))`; `None` when the Tanh's
/// Mul is not one.
fn factored(
    model: &Model,
    tanh_id: NodeId,
    u_id: NodeId,
    u_node: &Node,
) -> Option<Result<Patch, String>> {
    let g = &model.graph;
    for i in [0, 1] {
        let (a, d) = (u_node.input(i)?, u_node.input(1 - i)?);
        let Ok((a_id, x)) = scaled_by(model, a, "Mul", TANH_SCALE) else {
            continue;
        };
        let (add_id, add) = produced_by(g, d, "Add")?;
        let one = add
            .inputs
            .iter()
            .flatten()
            .find(|&&v| is_scalar(model, v, 1.0))?;
        let w = other_input(add, *one)?;
        let mut inner = scaled_square_of(model, w, x)?;
        inner.extend([add_id, a_id, u_id]);
        return Some(finish(model, x, tanh_id, inner));
    }
    None
}

/// `inner`: the nodes between x and the Tanh. Each is read only inside the pattern.
fn finish(
    model: &Model,
    x: ValueId,
    tanh_id: NodeId,
    mut chain: Vec<NodeId>,
) -> Result<Patch, String> {
    let g = &model.graph;
    require_f32_or_f16(g, x)?;
    chain.push(tanh_id);
    for &id in &chain[..chain.len() - 1] {
        let v = g.node(id).output(0).ok_or("node has no output")?;
        if !sole_consumer(g, v).is_ok_and(|c| chain.contains(&c)) {
            return Err(format!("'{}' is read outside the GELU pattern", g.name(v)));
        }
    }
    let t = g.node(tanh_id).output(0).ok_or("Tanh has no output")?;
    let (tail, y) = tail(model, t, x)?;
    let mut fused = Node::new("FastGelu", MS_DOMAIN);
    fused.name = fresh_node_name(g, &format!("{}_FastGelu", g.name(y)));
    fused.inputs = vec![Some(x)];
    fused.outputs = vec![Some(y)];
    chain.extend(tail);
    Ok(Patch {
        remove: chain,
        add: vec![fused.into()],
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    })
}

/// From tanh's output `t` to the GELU value: `0.5 * x * (1 + t)` in its forms, or
/// `x * (0.5 + 0.5 * t)`.
fn tail(model: &Model, t: ValueId, x: ValueId) -> Result<(Vec<NodeId>, ValueId), String> {
    let g = &model.graph;
    let first = sole_consumer(g, t).map_err(|why| format!("tanh {why}"))?;
    let n = g.node(first);
    if n.is("Add") {
        let one = other_input(n, t).ok_or("Add is not binary")?;
        if !is_scalar(model, one, 1.0) {
            return Err(format!("Add adds '{}', not the constant 1", g.name(one)));
        }
        let v = n.output(0).ok_or("Add has no output")?;
        let (mut muls, y) = half_x_product(model, v, x)?;
        muls.insert(0, first);
        return Ok((muls, y));
    }
    // x * (0.5 + 0.5 * t)
    let (half_mul, _) = sole_consumer_op(g, t, "Mul", "tanh")?;
    let h = other_input(g.node(half_mul), t).ok_or("Mul is not binary")?;
    if !is_scalar(model, h, 0.5) {
        return Err(format!("tanh is scaled by '{}', not 0.5", g.name(h)));
    }
    let ht = g.node(half_mul).output(0).ok_or("Mul has no output")?;
    let (add_id, add) = sole_consumer_op(g, ht, "Add", "0.5 * tanh")?;
    let c = other_input(add, ht).ok_or("Add is not binary")?;
    if !is_scalar(model, c, 0.5) {
        return Err(format!("Add adds '{}', not 0.5", g.name(c)));
    }
    let v = add.output(0).ok_or("Add has no output")?;
    let (mul_id, mul) = sole_consumer_op(g, v, "Mul", "0.5 + 0.5 * tanh")?;
    if other_input(mul, v) != Some(x) {
        return Err("the last Mul does not multiply by x".into());
    }
    let y = mul.output(0).ok_or("Mul has no output")?;
    Ok((vec![half_mul, add_id, mul_id], y))
}

/// `FastGelu(Add(A, bias))` → `FastGelu(A, bias)`.
fn absorb_bias(model: &Model, id: NodeId) -> Option<Result<Patch, String>> {
    let g = &model.graph;
    let fg = g.node(id);
    let t = fg.input(0)?;
    produced_by(g, t, "Add")?;
    let hidden = match last_dim(g, t) {
        Ok(h) => h,
        Err(why) => return Some(Err(why)),
    };
    let Some((add_id, a, bias)) = bias_add(model, t, hidden) else {
        return Some(Err(format!(
            "'{}' is not a single-use Add of a 1-D constant bias of size {hidden}",
            g.name(t)
        )));
    };
    let mut fused = fg.clone();
    fused.name = fresh_node_name(g, &format!("{}_bias", fg.label(id)));
    fused.inputs = vec![Some(a), Some(bias)];
    Some(Ok(Patch {
        remove: vec![add_id, id],
        add: vec![fused.into()],
        ..Default::default()
    }))
}
