//! The masks of `fuse_mha` (MultiHeadAttention): a proved mask as the op's causal flag,
//! key_padding_mask and filter; an attention_bias; T5's bias plus padding mask; and the zeroing
//! of rows that sdpa's NaN guard zeroes.

use ndarray::{ArrayD, IxDyn};

use crate::ir::types::{Dim, TensorType};
use crate::ir::{attr, Model, ValueId};
use crate::onnx::tensor::from_tensor;
use crate::passes::attention_mask::{attention_mask, op_filter, AttentionMask};
use crate::passes::matchers::{fresh_node_name, int32_mask};
use crate::passes::rewrite::{NewNode, Patch, ValueRef};
use crate::tensor::{DType, Tensor};

/// The op's inputs and attributes for a proved mask: `unidirectional` for its causal part (with a
/// cache of P keys, causal after them), key_padding_mask for its padding part, the filter
/// (`op_filter`), and sdpa's -inf mask with its NaN guard (`zero_masked_rows` after the op).
pub(super) fn proved_mask(
    model: &Model,
    patch: &mut Patch,
    mha: &mut NewNode,
    (m, y, q_ty): (ValueId, ValueId, &TensorType),
    proved: &AttentionMask,
    nan_guard: bool,
    out: &mut ValueRef,
) -> Result<(), String> {
    let g = &model.graph;
    let dt = q_ty.dtype.ok_or("the query's type")?;
    if proved.causal {
        // Keys after the query get the lowest float32 (with a cache of P keys, query i
        // is token P + i), as `Attention` does; `op_filter` below asks the same of F.
        mha.set_attr(attr::int("unidirectional", 1));
    }
    if let Some(a) = proved.padding {
        let kpm = int32_mask(g, patch, a, g.name(y))?;
        mha.inputs.extend([None, Some(kpm)]);
    }
    // sdpa's -inf mask: a row with a visible key weights the masked ones 0 with the
    // lowest float32 as with -inf, and a row without one, NaN in the pattern, is zeroed
    // by the guard, and by `zero_masked_rows` after the op (which weights it uniformly).
    // Float16 alike: a kept score plus -inf is -inf there too, and the op's float32
    // sum weights it 0 with the lowest float32.
    let guarded_inf = nan_guard && proved.filter == f64::NEG_INFINITY;
    if nan_guard && !proved.filter.is_finite() && !guarded_inf {
        return Err(format!(
            "the Where(IsNaN(P), 0, P) guard zeroes rows the mask value {} hides \
             throughout; mask_filter_value does not",
            proved.filter
        ));
    }
    let filter = match guarded_inf {
        true => f32::MIN,
        false => op_filter(dt, proved.filter, proved.causal)?,
    };
    if guarded_inf {
        zero_rows_after(model, patch, m, (y, q_ty), out)?;
    }
    mha.set_attr(attr::float("mask_filter_value", filter));
    Ok(())
}

/// Two masks added to the scores (T5: the relative position bias, then the padding mask, or in
/// its decoder the causal mask): one an attention_bias `[B or 1, 1 or N, S, L]`, the other proved
/// a padding mask, causal mask or both, in either order; float32 only. They become the op's
/// attention_bias, key_padding_mask and unidirectional, which it applies the same way
/// (mask_filter_value where a key is padding, the lowest float32 after the query, plus the bias).
pub(super) fn bias_and_padding(
    model: &Model,
    patch: &mut Patch,
    mha: &mut NewNode,
    masks: [ValueId; 2],
    scores: &[Dim],
    heads: i64,
    dt: DType,
) -> Result<(), String> {
    let g = &model.graph;
    if dt != DType::F32 {
        return Err(format!(
            "two masks added to {dt} scores (only float32 takes a bias)"
        ));
    }
    let mut why = vec![];
    for (bias, pad) in [(masks[1], masks[0]), (masks[0], masks[1])] {
        if !is_attention_bias(model, bias, scores, heads, dt) {
            why.push(format!(
                "'{}' {} is not a [B or 1, 1 or {heads}, S, L] attention_bias",
                g.name(bias),
                g.value(bias).ty
            ));
            continue;
        }
        let proved = match attention_mask(model, pad, scores) {
            Ok(p) => p,
            Err(e) => {
                why.push(e);
                continue;
            }
        };
        // A causal part (T5's decoder: its position bias plus the causal mask) is the op's
        // unidirectional, which hides later keys with the lowest float32 as the mask did.
        let filter = op_filter(dt, proved.filter, proved.causal)?;
        if proved.causal {
            mha.set_attr(attr::int("unidirectional", 1));
        }
        let mut inputs = vec![None, None];
        if let Some(a) = proved.padding {
            inputs[1] = Some(int32_mask(g, patch, a, g.name(pad))?);
        }
        inputs.push(Some(bias.into()));
        mha.inputs.extend(inputs);
        mha.set_attr(attr::float("mask_filter_value", filter));
        return Ok(());
    }
    Err(format!(
        "two masks added to the scores, not an attention_bias and a proved mask: {}",
        why.join("; ")
    ))
}

/// The op writes a fresh value instead of `out` (the merged heads `y` of type `q_ty`), and `out`
/// becomes that value with the rows `zero_masked_rows` finds in `bias` zeroed.
pub(super) fn zero_rows_after(
    model: &Model,
    patch: &mut Patch,
    bias: ValueId,
    (y, q_ty): (ValueId, &TensorType),
    out: &mut ValueRef,
) -> Result<(), String> {
    let g = &model.graph;
    let dt = q_ty.dtype.ok_or("the output type")?;
    let raw = g.fresh_name(&format!("{}_unguarded", g.name(y)));
    let raw = patch.new_value(&raw, q_ty.clone());
    zero_masked_rows(model, patch, bias, raw, *out, dt)?;
    *out = raw;
    Ok(())
}

/// `out = Where(rows, y, 0)` with `rows` [B or 1, S, 1] true where the attention_bias `bias`
/// [B or 1, 1, S, L] has a key above -inf: what sdpa's NaN guard leaves of a row whose keys are
/// all -inf (zeros), built from ops every backend runs (Greater, Cast, ReduceSum, Squeeze,
/// Where). Every layer computes the same `rows` from its own copies of the constants (the rules'
/// patches are built against one graph), so common-subexpression elimination does not merge them
/// yet: 6 nodes per layer.
fn zero_masked_rows(
    model: &Model,
    patch: &mut Patch,
    bias: ValueId,
    y: ValueRef,
    out: ValueRef,
    dt: DType,
) -> Result<(), String> {
    let g = &model.graph;
    if !matches!(
        g.value(bias).ty.shape.as_deref(),
        Some([_, Dim::Known(1), _, _])
    ) {
        return Err(
            "the NaN guard with a per-head attention_bias (its rows differ by head)".into(),
        );
    }
    let opset = model.opset("").unwrap_or(1);
    let base = g.name(bias).to_string();
    let scalar = |patch: &mut Patch, what: &str, t: Tensor| {
        let name = g.fresh_name(&format!("{base}_{what}"));
        patch.new_initializer(&name, from_tensor(&name, &t))
    };
    let value = |patch: &mut Patch, what: &str, dtype: DType| {
        let name = g.fresh_name(&format!("{base}_{what}"));
        patch.new_value(
            &name,
            TensorType {
                dtype: Some(dtype),
                shape: None,
            },
        )
    };
    let node = |patch: &mut Patch, op: &str, inputs: Vec<ValueRef>, output: ValueRef| {
        let mut n = NewNode::new(op, "");
        // Two Greaters in one patch: the graph's fresh names alone would collide.
        n.name = fresh_node_name(g, &format!("{base}_{op}_{}", patch.add.len()));
        n.inputs = inputs.into_iter().map(Some).collect();
        n.outputs = vec![Some(output)];
        patch.add.push(n);
        patch.add.len() - 1
    };
    // In the bias's type (float32, or float16 for a proved float16 mask).
    let neg_inf = scalar(
        patch,
        "neg_inf",
        Tensor::F32(ArrayD::from_elem(IxDyn(&[]), f32::NEG_INFINITY))
            .narrow(dt)
            .ok_or("the mask's type")?,
    );
    let kept = value(patch, "kept", DType::BOOL);
    node(patch, "Greater", vec![bias.into(), neg_inf], kept);
    let kept_f = value(patch, "kept_f", DType::F32);
    let i = node(patch, "Cast", vec![kept], kept_f);
    patch.add[i].set_attr(attr::int("to", DType::F32.0 as i64));
    let count = value(patch, "kept_keys", DType::F32);
    let i = if opset >= 13 {
        let axes = scalar(
            patch,
            "last_axis",
            Tensor::I64(ArrayD::from_elem(IxDyn(&[1]), -1)),
        );
        node(patch, "ReduceSum", vec![kept_f, axes], count)
    } else {
        let i = node(patch, "ReduceSum", vec![kept_f], count);
        patch.add[i].set_attr(attr::ints("axes", &[-1]));
        i
    };
    patch.add[i].set_attr(attr::int("keepdims", 1));
    let zero_f = scalar(
        patch,
        "zero",
        Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 0.0)),
    );
    let any = value(patch, "any_key", DType::BOOL);
    node(patch, "Greater", vec![count, zero_f], any);
    let rows = value(patch, "rows", DType::BOOL);
    if opset >= 13 {
        let axes = scalar(
            patch,
            "head_axis",
            Tensor::I64(ArrayD::from_elem(IxDyn(&[1]), 1)),
        );
        node(patch, "Squeeze", vec![any, axes], rows);
    } else {
        let i = node(patch, "Squeeze", vec![any], rows);
        patch.add[i].set_attr(attr::ints("axes", &[1]));
    }
    let zero = scalar(
        patch,
        "zero_out",
        Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 0.0))
            .narrow(dt)
            .ok_or("the output type")?,
    );
    node(patch, "Where", vec![rows, y, zero], out);
    Ok(())
}

/// True when `m` is a float mask MultiHeadAttention reads as attention_bias: `[B or 1, 1 or N, S,
/// L]` with S and L provably the scores' and B provably theirs or 1 (onnxruntime broadcasts only
/// the first two axes).
pub(super) fn is_attention_bias(
    model: &Model,
    m: ValueId,
    scores: &[Dim],
    heads: i64,
    dt: DType,
) -> bool {
    let ty = &model.graph.value(m).ty;
    let one = Dim::Known(1);
    match (ty.shape.as_deref(), scores) {
        (Some([b, h, s, l]), [sb, _, ss, sl]) => {
            ty.dtype == Some(dt)
                && (b.provably_eq(sb) || *b == one)
                && (*h == one || *h == Dim::Known(heads))
                && s.provably_eq(ss)
                && l.provably_eq(sl)
        }
        _ => false,
    }
}
