//! BERT's embedding block → com.microsoft.EmbedLayerNormalization. Runs after `layer_norm` (the
//! decomposed norm arrives as ai.onnx LayerNormalization) and anchors on the LayerNormalization.
//!
//! ```text
//!   before
//!
//!   Gather(word, input_ids) ──────► Add ◄── Gather(segment, token_type_ids)
//!                                    │
//!                                    ▼
//!   Gather(position, Slice(arange buffer [1, N], 0, S, axis 1)) ──► Add
//!                                                                   │
//!                                                                   ▼
//!                                                   LayerNormalization(gamma, beta) ──► y
//!
//!   after
//!
//!   input_ids ──► Cast(int32) ──┐
//!   token_type_ids ► Cast(int32) ┴► EmbedLayerNormalization(·, ·, word, position, segment,
//!                                                           gamma, beta) ──► y
//!                                                                       └──► mask_index (unread)
//! ```
//! Accepted sums: `(word + segment) + position` and `(word + position) + segment` in any operand
//! order and association, or `word + position` without segments. Of the two id-gathered tables
//! the one with more rows is the word table (the sum does not depend on which is which). The fused
//! node gets no mask and no position_ids: the rule proves the positions are 0..S-1, so the op's
//! default (token `s` reads position row `s`) is exact.
//!
//! Guards: every intermediate (the Gather outputs and the Add outputs) has one reader and is not a
//! graph output; the three tables are 2-D float32 constants read by Gather on axis 0 with one
//! hidden size H; the LayerNormalization normalizes the last axis, computes its statistics in f32,
//! leaves Mean/InvStdDev unread, and its scale and bias are 1-D constants of H; input_ids and
//! segment ids are int64/int32 values of rank 2 with provably the same shape [B, S]; and the
//! position indices are proven to be 0..S-1 broadcast over the batch, S being input_ids' dim 1:
//! either a constant [1, S] or [S] holding 0..S-1, or a Slice of a constant [1, N] or [N] buffer
//! holding exactly 0..N-1, on its last axis, from 0 with step 1, to an end that is statically
//! input_ids' dim 1. In a static graph constant folding may have gathered the positions already:
//! a summed f32 constant of shape [1, S, H] or [S, H], S being input_ids' (known) dim 1, is then
//! the position term, and its rows become the position table (token `s` adds row `s` in both).
//!
//! Sequences longer than the tables. With the Slice form the original slices min(S, N) positions;
//! for S > N its Add would then fail to broadcast, except for a 1-row buffer, whose single position
//! would broadcast to every token. The fused op instead errors when S exceeds the position table's
//! P rows. The two agree (both fail for S > N, both give 0..S-1 otherwise) only when N >= P and
//! N >= 2, so the rule also requires that; BERT's buffer and table are both
//! max_position_embeddings long.
//!
//! Ids. The op takes int32 ids, so int64 ids get a Cast. Every id of a table that fits the
//! op (fewer than 2^31 rows) is in int32 range, and the kernel bound-checks each cast id against
//! its table, erroring clearly. One caveat: ONNX leaves int64 → int32 casts of out-of-range values
//! unspecified, and ours (and onnxruntime's) wrap, so an id outside int32 range, for which the
//! original Gather fails, can wrap onto a valid row after the Cast instead of failing. Negative ids
//! in [-rows, 0), which ONNX Gather wraps to rows counted from the end, are errors in the fused op
//! (onnxruntime's kernel rejects them too); tokenizers never produce them.

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{Dim, TensorType};
use crate::ir::{Graph, Model, Node, NodeId, ValueId};
use crate::ops::shape_value::{constant_ints, constant_tensor, int_elements};
use crate::passes::matchers::{
    absorbable_layer_norm, constant_value, fresh_node_name, produced_by, require_f32, sole_consumer,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind, ValueRef};
use crate::tensor::{DType, Tensor};

pub struct FuseEmbedLayerNorm;

impl Rule for FuseEmbedLayerNorm {
    fn name(&self) -> &'static str {
        "embed_layer_norm"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["LayerNormalization"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let ln = g.node(id);
        if !ln.is("LayerNormalization") {
            return Proposal::NoMatch;
        }
        let Some(tree) = ln.input(0).and_then(|x| sum_of_gathers(g, x)) else {
            return Proposal::NoMatch;
        };
        match propose(model, id, &tree) {
            Ok(p) => Proposal::Rewrite(p),
            Err(why) => Proposal::Reject(why),
        }
    }
}

/// The LayerNormalization's input as a sum of 2 or 3 Gather outputs.
struct SumTree {
    /// The Add nodes, outermost first, with their outputs.
    adds: Vec<(NodeId, ValueId)>,
    /// The summed Gather outputs.
    leaves: Vec<ValueId>,
    /// A summed constant: position rows already gathered (constant folding of a static graph).
    folded: Option<ValueId>,
}

fn binary_inputs(n: &Node) -> Option<[ValueId; 2]> {
    (n.inputs.len() == 2).then_some([n.input(0)?, n.input(1)?])
}

/// `x` as `Add(a, b)` or `Add(Add(a, b), c)` (any order) with every leaf computed by Gather.
fn sum_of_gathers(g: &Graph, x: ValueId) -> Option<SumTree> {
    let (top, add) = produced_by(g, x, "Add")?;
    let mut adds = vec![(top, x)];
    let mut leaves = Vec::new();
    for v in binary_inputs(add)? {
        match produced_by(g, v, "Add") {
            Some((inner, n)) if adds.len() == 1 => {
                adds.push((inner, v));
                leaves.extend(binary_inputs(n)?);
            }
            Some(_) => return None,
            None => leaves.push(v),
        }
    }
    let (consts, leaves): (Vec<ValueId>, Vec<ValueId>) = leaves
        .into_iter()
        .partition(|&v| g.producer(v).is_none_or(|p| g.node(p).is("Constant")));
    let all_gathers = leaves
        .iter()
        .all(|&v| produced_by(g, v, "Gather").is_some());
    match consts[..] {
        [] if all_gathers => Some(SumTree {
            adds,
            leaves,
            folded: None,
        }),
        [c] if all_gathers && constant_tensor(g, c).is_some() => Some(SumTree {
            adds,
            leaves,
            folded: Some(c),
        }),
        _ => None,
    }
}

/// One `Gather(table, indices)` leaf.
struct Lookup {
    gather: NodeId,
    table: ValueId,
    rows: usize,
    indices: ValueId,
}

/// Checks a Gather leaf: a 2-D float32 constant table of hidden size `hidden` (when known yet)
/// read on axis 0.
fn lookup(model: &Model, v: ValueId, hidden: &mut Option<usize>) -> Result<Lookup, String> {
    let g = &model.graph;
    let (id, n) = produced_by(g, v, "Gather").ok_or("not a Gather")?;
    let [table, indices] =
        binary_inputs(n).ok_or_else(|| format!("Gather '{}' is not binary", n.label(id)))?;
    let axis = crate::ops::attrs_of::<crate::ops::index_ops::Gather>(model, n)
        .ok_or("Gather's attributes are not parsed")?
        .axis;
    if axis != 0 && axis != -2 {
        return Err(format!(
            "Gather '{}' reads axis {axis}, not the table's rows (axis 0)",
            n.label(id)
        ));
    }
    let t = constant_value(model, table)
        .ok_or_else(|| format!("embedding table '{}' is not a constant", g.name(table)))?;
    if t.dtype() != DType::F32 {
        return Err(format!(
            "embedding table '{}' is {}; the fused op is f32 only",
            g.name(table),
            t.dtype()
        ));
    }
    let &[rows, cols] = t.shape() else {
        return Err(format!(
            "embedding table '{}' has shape {:?}, not 2-D [rows, hidden]",
            g.name(table),
            t.shape()
        ));
    };
    match *hidden {
        Some(h) if h != cols => {
            return Err(format!(
                "embedding table '{}' has hidden size {cols}, another table has {h}",
                g.name(table)
            ))
        }
        _ => *hidden = Some(cols),
    }
    Ok(Lookup {
        gather: id,
        table,
        rows,
        indices,
    })
}

/// True when `v` looks like position indices rather than token ids: a constant or a Slice.
fn is_position_source(model: &Model, v: ValueId) -> bool {
    produced_by(&model.graph, v, "Slice").is_some() || constant_value(model, v).is_some()
}

/// Shape [B, S] of int64/int32 token ids `v`, else why not.
fn id_dims(g: &Graph, v: ValueId) -> Result<Vec<Dim>, String> {
    let ty = &g.value(v).ty;
    if !matches!(ty.dtype, Some(DType::I64) | Some(DType::I32)) {
        return Err(format!("ids '{}' are {ty}, not int64 or int32", g.name(v)));
    }
    match ty.shape.as_deref() {
        Some([b, s]) => Ok(vec![b.clone(), s.clone()]),
        _ => Err(format!(
            "ids '{}' are {ty}, not of rank 2 [batch, seq]",
            g.name(v)
        )),
    }
}

/// Values of an integer constant `t` that is 0..len-1, else why not.
fn is_arange(t: &Tensor) -> bool {
    t.to_i64_vec()
        .is_some_and(|v| v.iter().enumerate().all(|(i, &x)| x == i as i64))
}

/// Proves `idx` is 0..S-1 as [1, S] or [S], with S = `seq` (input_ids' dim 1); `table_rows` is
/// the position table's row count.
fn prove_positions(
    model: &Model,
    idx: ValueId,
    seq: &Dim,
    table_rows: usize,
) -> Result<(), String> {
    let g = &model.graph;
    if *seq == Dim::Unknown {
        return Err("input_ids' sequence dim is unknown".into());
    }
    if let Some(t) = constant_value(model, idx) {
        let len = match t.shape() {
            [1, n] | [n] => *n,
            s => {
                return Err(format!(
                    "position indices '{}' have shape {s:?}, not [1, S]",
                    g.name(idx)
                ))
            }
        };
        if !is_arange(&t) {
            return Err(format!(
                "position indices '{}' are not 0..{len}",
                g.name(idx)
            ));
        }
        if *seq != Dim::Known(len as i64) {
            return Err(format!(
                "position indices '{}' cover {len} positions, input_ids' sequence dim is {seq}",
                g.name(idx)
            ));
        }
        return Ok(());
    }
    let (sid, slice) = produced_by(g, idx, "Slice").ok_or("position indices are not sliced")?;
    let label = slice.label(sid);
    let input = |i: usize| slice.input(i);
    let data = input(0).ok_or_else(|| format!("Slice '{label}' has no data"))?;
    let buf = constant_value(model, data)
        .ok_or_else(|| format!("position buffer '{}' is not a constant", g.name(data)))?;
    let (rank, n) = match buf.shape() {
        [1, n] => (2, *n),
        [n] => (1, *n),
        s => {
            return Err(format!(
                "position buffer '{}' has shape {s:?}, not [1, N]",
                g.name(data)
            ))
        }
    };
    if !matches!(buf.dtype(), DType::I64 | DType::I32) || !is_arange(&buf) {
        return Err(format!(
            "position buffer '{}' is not the integers 0..{n}",
            g.name(data)
        ));
    }
    if n < table_rows || n < 2 {
        return Err(format!(
            "position buffer '{}' has {n} entries, fewer than 2 or than the position table's \
             {table_rows} rows (a longer sequence would not fail the same way)",
            g.name(data)
        ));
    }
    let ints = |i: usize, what: &str| -> Result<Option<Vec<i64>>, String> {
        match input(i) {
            None => Ok(None),
            Some(v) => constant_ints(g, v)
                .map(Some)
                .ok_or_else(|| format!("Slice '{label}' {what} '{}' is not a constant", g.name(v))),
        }
    };
    let starts = ints(1, "starts")?
        .ok_or_else(|| format!("Slice '{label}' has no starts input (opset < 10)"))?;
    if starts != [0] {
        return Err(format!("Slice '{label}' starts at {starts:?}, not [0]"));
    }
    let axes = ints(3, "axes")?.unwrap_or_else(|| vec![0]);
    if axes != [rank - 1] && axes != [-1] {
        return Err(format!(
            "Slice '{label}' slices axes {axes:?}, not the buffer's last axis"
        ));
    }
    if let Some(steps) = ints(4, "steps")? {
        if steps != [1] {
            return Err(format!("Slice '{label}' has steps {steps:?}, not [1]"));
        }
    }
    let ends = input(2).ok_or_else(|| format!("Slice '{label}' has no ends"))?;
    match int_elements(g, ends).as_deref() {
        Some([end]) if end == seq => Ok(()),
        e => Err(format!(
            "Slice '{label}' ends at {}, not provably input_ids' sequence dim {seq}",
            e.map_or("an unknown value".to_string(), |e| {
                let dims: Vec<String> = e.iter().map(|d| d.to_string()).collect();
                format!("[{}]", dims.join(", "))
            })
        )),
    }
}

/// A constant summed term of shape [1, S, H] or [S, H] (S = `seq`, input_ids' dim 1): row `s` is
/// added to every batch's token `s`, which is what EmbedLayerNormalization does with it as the
/// position table and default positions. Returns the table value ([S, H]; a reshaped copy for
/// [1, S, H]).
fn folded_positions(
    model: &Model,
    c: ValueId,
    seq: &Dim,
    h: i64,
    patch: &mut Patch,
) -> Result<ValueRef, String> {
    let g = &model.graph;
    let t = constant_value(model, c).ok_or("not a constant")?;
    let Tensor::F32(a) = t.as_ref() else {
        return Err(format!(
            "summed constant '{}' is {}; the fused op is f32 only",
            g.name(c),
            t.dtype()
        ));
    };
    let rows = match a.shape() {
        [1, n, k] | [n, k] if *k as i64 == h => *n,
        s => {
            return Err(format!(
                "summed constant '{}' has shape {s:?}, not [1, S, {h}] (positions)",
                g.name(c)
            ))
        }
    };
    if *seq != Dim::Known(rows as i64) {
        return Err(format!(
            "summed constant '{}' has {rows} position rows, input_ids' sequence dim is {seq}",
            g.name(c)
        ));
    }
    if a.ndim() == 2 {
        return Ok(c.into());
    }
    let table = Tensor::F32(
        a.to_shape(ndarray::IxDyn(&[rows, h as usize]))
            .map_err(|e| e.to_string())?
            .to_owned(),
    );
    let name = g.fresh_name(&format!("{}_rows", g.name(c)));
    Ok(patch.new_initializer(&name, crate::onnx::tensor::from_tensor(&name, &table)))
}

fn propose(model: &Model, ln_id: NodeId, tree: &SumTree) -> Result<Patch, String> {
    let g = &model.graph;
    let ln = g.node(ln_id);
    let x = tree.adds[0].1;
    // Intermediates: the Adds' and Gathers' outputs are read once, by the pattern.
    for &v in tree.leaves.iter().chain(tree.adds.iter().map(|(_, v)| v)) {
        sole_consumer(g, v)?;
    }
    let mut hidden = None;
    let lookups: Vec<Lookup> = tree
        .leaves
        .iter()
        .map(|&v| lookup(model, v, &mut hidden))
        .collect::<Result<_, _>>()?;
    require_f32(g, x)?;
    let h = hidden.ok_or("no embedding table")? as i64;

    // The LayerNormalization.
    let rank = g.value(x).ty.rank().unwrap_or(0) as i64;
    let (y, gamma, beta) = absorbable_layer_norm(model, ln, ln_id, rank, h)?;

    // Which Gather is which.
    let (pos, ids): (Vec<&Lookup>, Vec<&Lookup>) = lookups
        .iter()
        .partition(|l| is_position_source(model, l.indices));
    let n_pos = pos.len() + usize::from(tree.folded.is_some());
    if n_pos != 1 {
        return Err(format!(
            "{n_pos} of the summed terms are constant, or Gathers of constant or sliced indices; \
             an embedding sum has one (the positions)"
        ));
    }
    let (word, segment) = match ids[..] {
        [w] => (w, None),
        [a, b] if b.rows > a.rows => (b, Some(a)),
        [a, b] => (a, Some(b)),
        _ => return Err("no Gather reads token ids".into()),
    };
    let id_shape = id_dims(g, word.indices)?;
    if let Some(s) = segment {
        id_dims(g, s.indices)?;
        let (tw, ts) = (&g.value(word.indices).ty, &g.value(s.indices).ty);
        if !tw.same_shape_as(ts) {
            return Err(format!(
                "ids '{}' {tw} and segment ids '{}' {ts} are not provably the same shape",
                g.name(word.indices),
                g.name(s.indices)
            ));
        }
    }
    let mut patch = Patch {
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    };
    let pos_table = match (pos.first(), tree.folded) {
        (Some(pos), _) => {
            prove_positions(model, pos.indices, &id_shape[1], pos.rows)?;
            pos.table.into()
        }
        (None, Some(c)) => folded_positions(model, c, &id_shape[1], h, &mut patch)?,
        (None, None) => return Err("no position term".into()),
    };

    // The patch.
    let mut casts: Vec<(ValueId, ValueRef)> = Vec::new();
    let mut as_int32 = |patch: &mut Patch, v: ValueId| -> ValueRef {
        if g.value(v).ty.dtype == Some(DType::I32) {
            return v.into();
        }
        if let Some(&(_, c)) = casts.iter().find(|(from, _)| *from == v) {
            return c;
        }
        let ty = TensorType {
            dtype: Some(DType::I32),
            shape: g.value(v).ty.shape.clone(),
        };
        let out = patch.new_value(&g.fresh_name(&format!("{}_int32", g.name(v))), ty);
        let mut cast = NewNode::new("Cast", "");
        cast.name = fresh_node_name(g, &format!("{}_Cast_int32", g.name(v)));
        cast.inputs = vec![Some(v.into())];
        cast.outputs = vec![Some(out)];
        cast.set_attr(crate::ir::attr::int("to", DType::I32.0 as i64));
        patch.add.push(cast);
        casts.push((v, out));
        out
    };
    let ids32 = as_int32(&mut patch, word.indices);
    let seg32 = segment.map(|s| as_int32(&mut patch, s.indices));
    let beta = match beta {
        Some(b) => b.into(),
        None => {
            let name = g.fresh_name(&format!("{}_zero_beta", g.name(y)));
            let zeros = Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[h as usize])));
            patch.new_initializer(&name, crate::onnx::tensor::from_tensor(&name, &zeros))
        }
    };
    let mask_index = patch.new_value(
        &g.fresh_name(&format!("{}_mask_index", g.name(y))),
        TensorType {
            dtype: Some(DType::I32),
            shape: Some(vec![id_shape[0].clone()]),
        },
    );
    let mut fused = NewNode::new("EmbedLayerNormalization", MS_DOMAIN);
    fused.name = fresh_node_name(g, &format!("{}_EmbedLayerNormalization", ln.label(ln_id)));
    fused.inputs = vec![
        Some(ids32),
        seg32,
        Some(word.table.into()),
        Some(pos_table),
        segment.map(|s| s.table.into()),
        Some(gamma.into()),
        Some(beta),
    ];
    fused.outputs = vec![Some(y.into()), Some(mask_index)];
    let eps = crate::ops::attrs_of::<crate::ops::transformer::LayerNormalization>(model, ln)
        .ok_or("LayerNormalization's attributes are not parsed")?
        .epsilon;
    fused.set_attr(crate::ir::attr::float("epsilon", eps));
    patch.add.push(fused);
    patch.remove = std::iter::once(ln_id)
        .chain(tree.adds.iter().map(|&(a, _)| a))
        .chain(lookups.iter().map(|l| l.gather))
        .collect();
    Ok(patch)
}
