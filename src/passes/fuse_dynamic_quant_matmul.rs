//! What `onnxruntime.quantization.quantize_dynamic` writes for a MatMul with int8/uint8 weights
//! → com.microsoft.DynamicQuantizeMatMul, which quantizes A itself and scales the integer
//! product in one kernel.
//!
//! ```text
//!   before                                                      after
//!
//!   A ─► DynamicQuantizeLinear ─► A_q ─► MatMulInteger(A_q, B,    A ─► DynamicQuantizeMatMul(
//!              │  └─ a_zp ───────────────────┘   b_zp?)               B, b_scale, b_zp?,
//!              └─ a_scale ─► Mul(·, b_scale)        │                 bias?) ─► Y
//!                               └──────► Mul ◄── Cast(float)
//!                                         └─► [Add(bias)] ─► Y
//! ```
//! Either operand order of both Muls and of the Add. When several MatMulIntegers read one
//! DynamicQuantizeLinear (a layer's q, k and v projections), each becomes its own
//! DynamicQuantizeMatMul, which quantizes A again: the same A gives the same A_q, scale and zero
//! point, so the result is the pattern's. The DynamicQuantizeLinear goes with the last of them.
//!
//! Guards: the MatMulInteger reads the DynamicQuantizeLinear's quantized A and its zero point
//! (A's quantization is the dynamic one, not another's); B is a constant int8/uint8 matrix
//! [K, N] and its zero point, if any, a constant of B's type with 1 or N elements; the product
//! is cast to float32, then multiplied by `a_scale · b_scale` with b_scale a float32 constant
//! of 1 (rank 0 or [1]) or N ([N]) elements; the integer product, the cast, the scale product
//! and (when a bias is absorbed) the scaled product each have one reader and are not graph
//! outputs; a bias is a float32 constant [N].

use crate::ir::model::MS_DOMAIN;
use crate::ir::{Model, NodeId, ValueId};
use crate::ops::cast::Cast;
use crate::passes::matchers::{
    constant_value, fresh_node_name, other_input, produced_by, require_vector, sole_consumer,
    sole_consumer_op,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind, ValueRef};
use crate::tensor::DType;

pub struct FuseDynamicQuantMatMul;

impl Rule for FuseDynamicQuantMatMul {
    fn name(&self) -> &'static str {
        "dynamic_quantize_matmul"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["MatMulInteger"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let mmi = g.node(id);
        // Only a MatMulInteger of a dynamically quantized A is a candidate.
        if !mmi.is("MatMulInteger")
            || mmi
                .input(0)
                .and_then(|v| produced_by(g, v, "DynamicQuantizeLinear"))
                .is_none()
        {
            return Proposal::NoMatch;
        }
        Proposal::from(fuse(model, id).map(Some))
    }
}

fn fuse(model: &Model, id: NodeId) -> Result<Patch, String> {
    let g = &model.graph;
    let mmi = g.node(id);
    let label = mmi.label(id);
    let aq = mmi.input(0).ok_or("MatMulInteger has no A")?;
    let (dql_id, dql) = produced_by(g, aq, "DynamicQuantizeLinear").ok_or("no quantized A")?;
    let (a, a_scale, a_zp) = match (dql.input(0), dql.output(0), dql.output(1), dql.output(2)) {
        (Some(a), Some(q), Some(s), Some(z)) if q == aq => (a, s, z),
        _ => return Err("DynamicQuantizeLinear's outputs are not all used as named".into()),
    };
    if mmi.input(2) != Some(a_zp) {
        return Err(format!(
            "MatMulInteger '{label}' does not read the dynamic zero point of A as its a_zero_point"
        ));
    }
    if g.value(a).ty.dtype != Some(DType::F32) {
        return Err(format!("A '{}' is not float32", g.name(a)));
    }
    let b = mmi.input(1).ok_or("MatMulInteger has no B")?;
    let bt =
        constant_value(model, b).ok_or_else(|| format!("B '{}' is not a constant", g.name(b)))?;
    if !matches!(bt.dtype(), DType::I8 | DType::U8) {
        return Err(format!(
            "B '{}' is {}, not int8/uint8",
            g.name(b),
            bt.dtype()
        ));
    }
    let &[_, n] = bt.shape() else {
        return Err(format!(
            "B '{}' has shape {:?}; want a matrix [K, N]",
            g.name(b),
            bt.shape()
        ));
    };
    let b_zp = mmi.input(3);
    if let Some(z) = b_zp {
        let zt = constant_value(model, z)
            .ok_or_else(|| format!("B's zero point '{}' is not a constant", g.name(z)))?;
        if zt.dtype() != bt.dtype() || !per_column(zt.shape(), n) {
            return Err(format!(
                "B's zero point '{}' is {} {:?}; want B's type with 1 or {n} elements",
                g.name(z),
                zt.dtype(),
                zt.shape()
            ));
        }
    }

    let p = mmi.output(0).ok_or("MatMulInteger has no output")?;
    let (cast_id, cast) = sole_consumer_op(g, p, "Cast", "integer product")?;
    let to = crate::ops::attrs_of::<Cast>(model, cast).map(|c| c.to);
    if to != Some(DType::F32) {
        return Err(format!(
            "Cast '{}' casts the integer product to {to:?}, not float32",
            cast.label(cast_id)
        ));
    }
    let pf = cast.output(0).ok_or("Cast has no output")?;
    let (mul_id, mul) = sole_consumer_op(g, pf, "Mul", "float product")?;
    let s = other_input(mul, pf).ok_or("Mul is not binary")?;
    let (smul_id, smul) = produced_by(g, s, "Mul")
        .ok_or_else(|| format!("'{}' is not a product of A's scale and B's", g.name(s)))?;
    let b_scale = other_input(smul, a_scale)
        .filter(|&v| v != a_scale)
        .ok_or_else(|| {
            format!(
                "Mul '{}' does not multiply A's dynamic scale by B's",
                smul.label(smul_id)
            )
        })?;
    if sole_consumer(g, s)? != mul_id {
        return Err(format!("'{}' is read elsewhere", g.name(s)));
    }
    let bs = constant_value(model, b_scale)
        .ok_or_else(|| format!("B's scale '{}' is not a constant", g.name(b_scale)))?;
    if bs.dtype() != DType::F32 || !per_column(bs.shape(), n) {
        return Err(format!(
            "B's scale '{}' is {} {:?}; want float32 with 1 or {n} elements",
            g.name(b_scale),
            bs.dtype(),
            bs.shape()
        ));
    }
    let mut y = mul.output(0).ok_or("Mul has no output")?;
    let mut remove = vec![id, cast_id, smul_id, mul_id];
    let bias = absorbable_bias(model, y, n);
    if let Some((add_id, _, out)) = bias {
        remove.push(add_id);
        y = out;
    }
    // The DynamicQuantizeLinear goes once nothing else reads it.
    let dql_outs: Vec<ValueId> = dql.outputs.iter().flatten().copied().collect();
    let unread = dql_outs
        .iter()
        .all(|&v| !g.is_graph_output(v) && g.consumers(v).iter().all(|c| remove.contains(c)));
    if unread {
        remove.push(dql_id);
    }
    let mut fused = NewNode::new("DynamicQuantizeMatMul", MS_DOMAIN);
    fused.name = fresh_node_name(g, &format!("{label}_DynamicQuantizeMatMul"));
    fused.inputs = vec![
        Some(a.into()),
        Some(b.into()),
        Some(b_scale.into()),
        b_zp.map(ValueRef::from),
    ];
    if let Some((_, c, _)) = bias {
        fused.inputs.push(Some(c.into()));
    }
    while fused.inputs.last() == Some(&None) {
        fused.inputs.pop();
    }
    fused.outputs = vec![Some(y.into())];
    Ok(Patch {
        remove,
        add: vec![fused],
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    })
}

/// True for a shape of 1 element of rank <= 1, or [n].
fn per_column(shape: &[usize], n: usize) -> bool {
    matches!(shape, [] | [1]) || shape == [n]
}

/// When the only reader of `y` is `Add(y, c)` (either order) with c a float32 constant [n]:
/// (the Add, c, its output).
fn absorbable_bias(model: &Model, y: ValueId, n: usize) -> Option<(NodeId, ValueId, ValueId)> {
    let g = &model.graph;
    let (add_id, add) = sole_consumer_op(g, y, "Add", "scaled product").ok()?;
    let c = other_input(add, y).filter(|&c| c != y)?;
    require_vector(model, c, n as i64, "bias").ok()?;
    if constant_value(model, c)?.dtype() != DType::F32 {
        return None;
    }
    Some((add_id, c, add.output(0)?))
}
