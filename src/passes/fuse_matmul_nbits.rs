//! A block-quantized weight dequantized into MatMul → com.microsoft.MatMulNBits: the QDQ form
//! that onnxruntime's `MatMulNBitsQuantizer(..., quant_format=QuantFormat.QDQ)` writes (and
//! any exporter of blocked int4/int8 weights), in the operator its CPU and GPU providers run
//! without materializing the float weight.
//!
//! ```text
//!   before                                             after
//!
//!   W_q [K, N] ─┐                                       A ─► MatMulNBits(K, N, bits,
//!   scale ──────┼─► DequantizeLinear(axis 0,               block_size) ─► Y
//!   zp? ────────┘     block_size bs) ─► W ─┐                 ▲
//!                                  A ─► MatMul ─► Y         B [N, k_blocks, blob] uint8,
//!                                                           scales [N, k_blocks], zero_points?
//! ```
//! W_q is repacked to MatMulNBits' layout (`ops::quant_ms` states it): each column n becomes a
//! row of B, its K codes block after block, two 4-bit codes a byte low nibble first (one code a
//! byte for 8 bits); the scales are transposed. Signed codes (int4/int8) are shifted to unsigned
//! by `2^(bits-1)` and so are their zero points: without a zero point a signed weight needs none
//! (MatMulNBits' default zero point is `2^(bits-1)`), an unsigned one gets explicit zeros. A
//! K that is not a multiple of bs keeps its partial last block (DequantizeLinear's scale has
//! `ceil(K / bs)` rows, as MatMulNBits' k_blocks); its padding codes are written as the block's
//! zero point and never read. When several MatMuls read one W, each becomes a MatMulNBits and
//! all share the repacked initializers (one rewrite, anchored at the DequantizeLinear).
//!
//! Guards: W_q, scale and zero point are constants; W_q is int4/uint4 (bits 4) or int8/uint8
//! (bits 8) of rank 2; DequantizeLinear is blocked along K (axis 0, block_size a power of two
//! from 16, MatMulNBits' own rule, and at most the power of two from K: a larger block would be
//! mostly padding in B). A per-tensor or per-column (block_size 0) one is refused:
//! MatMulNBits has one scale per block of K, and a single block spanning all of K (which that
//! would need) is not mapped. Scale is float32 or float16 of shape [ceil(K / bs), N], the zero
//! point W_q's type of the same shape; W is read only by MatMuls, as their second input (B),
//! and is not a graph output; each MatMul's A has scale's type (MatMulNBits' T), a known rank of
//! at least 2 and, when known, last dim K.

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::Dim;
use crate::ir::{Model, NodeId, ValueId};
use crate::onnx::tensor::from_tensor;
use crate::ops::quant::DequantizeLinear;
use crate::passes::matchers::{constant_value, fresh_node_name};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind, ValueRef};
use crate::tensor::{DType, Tensor};

pub struct FuseMatMulNBits;

impl Rule for FuseMatMulNBits {
    fn name(&self) -> &'static str {
        "matmul_nbits"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["DequantizeLinear"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let dq = g.node(id);
        let Some(w) = dq.output(0).filter(|_| dq.is("DequantizeLinear")) else {
            return Proposal::NoMatch;
        };
        // Only a dequantized value that some MatMul multiplies by is a candidate.
        if !g.consumers(w).iter().any(|&c| g.node(c).is("MatMul")) {
            return Proposal::NoMatch;
        }
        Proposal::from(fuse(model, id).map(Some))
    }
}

/// The repacked weight: MatMulNBits' B, scales and (packed) zero points.
struct Packed {
    k: usize,
    n: usize,
    bits: usize,
    block: usize,
    b: Tensor,
    scales: Tensor,
    zero_points: Option<Tensor>,
}

fn fuse(model: &Model, id: NodeId) -> Result<Patch, String> {
    let g = &model.graph;
    let dq = g.node(id);
    let w = dq.output(0).ok_or("DequantizeLinear has no output")?;
    let label = dq.label(id);
    if g.is_graph_output(w) {
        return Err(format!("'{}' is a graph output", g.name(w)));
    }
    let mut matmuls = Vec::new();
    for &c in g.consumers(w) {
        let m = g.node(c);
        if !m.is("MatMul") || m.input(1) != Some(w) || m.input(0) == Some(w) {
            return Err(format!(
                "'{}' is also read by {} '{}', not only as a MatMul's weight (B)",
                g.name(w),
                m.op_type,
                m.label(c)
            ));
        }
        matmuls.push(c);
    }
    let attrs = crate::ops::attrs_of::<DequantizeLinear>(model, dq)
        .ok_or_else(|| format!("DequantizeLinear '{label}' attributes are not parsed"))?;
    let packed = pack(model, dq, attrs)?;
    let t = packed.scales.dtype();
    for &c in &matmuls {
        let a = g.node(c).input(0).ok_or("MatMul has no A")?;
        require_a(g, a, t, packed.k)?;
    }

    let mut patch = Patch {
        remove: vec![id],
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    };
    let base = g.name(w).to_string();
    let mut init = |suffix: &str, t: &Tensor| {
        let name = g.fresh_name(&format!("{base}_{suffix}"));
        patch.new_initializer(&name, from_tensor(&name, t))
    };
    let b = init("MatMulNBits_B", &packed.b);
    let scales = init("MatMulNBits_scales", &packed.scales);
    let zps = packed
        .zero_points
        .as_ref()
        .map(|z| init("MatMulNBits_zero_points", z));
    for &c in &matmuls {
        let m = g.node(c);
        let y = m.output(0).ok_or("MatMul has no output")?;
        let mut fused = NewNode::new("MatMulNBits", MS_DOMAIN);
        fused.name = fresh_node_name(g, &format!("{}_MatMulNBits", m.label(c)));
        fused.inputs = vec![m.input(0).map(ValueRef::from), Some(b), Some(scales)];
        if let Some(z) = zps {
            fused.inputs.push(Some(z));
        }
        fused.outputs = vec![Some(y.into())];
        for (name, v) in [
            ("K", packed.k),
            ("N", packed.n),
            ("bits", packed.bits),
            ("block_size", packed.block),
        ] {
            fused.set_attr(crate::ir::attr::int(name, v as i64));
        }
        patch.remove.push(c);
        patch.add.push(fused);
    }
    Ok(patch)
}

/// Ok when MatMul input `a` has MatMulNBits' T (`t`), a known rank >= 2 and last dim `k` (when
/// known); else why not.
fn require_a(g: &crate::ir::Graph, a: ValueId, t: DType, k: usize) -> Result<(), String> {
    let ty = &g.value(a).ty;
    match ty.dtype {
        Some(d) if d == t => {}
        Some(d) => {
            return Err(format!(
                "A '{}' is {d} but the scales are {t}: MatMulNBits takes one type for both",
                g.name(a)
            ))
        }
        None => return Err(format!("element type of A '{}' is unknown", g.name(a))),
    }
    match ty.shape.as_deref() {
        Some(s) if s.len() >= 2 => match s.last() {
            Some(Dim::Known(d)) if *d != k as i64 => {
                Err(format!("A '{}' has last dim {d}, not K = {k}", g.name(a)))
            }
            _ => Ok(()),
        },
        _ => Err(format!(
            "A '{}' has shape {ty}: a known rank >= 2 is needed",
            g.name(a)
        )),
    }
}

/// Checks the DequantizeLinear's constants and repacks them.
fn pack(model: &Model, dq: &crate::ir::Node, attrs: &DequantizeLinear) -> Result<Packed, String> {
    let g = &model.graph;
    let konst = |i: usize, what: &str| -> Result<Option<std::borrow::Cow<'_, Tensor>>, String> {
        match dq.input(i) {
            None => Ok(None),
            Some(v) => constant_value(model, v)
                .map(Some)
                .ok_or_else(|| format!("{what} '{}' is not a constant", g.name(v))),
        }
    };
    let wq = konst(0, "quantized weight")?.ok_or("DequantizeLinear has no input")?;
    let scale = konst(1, "scale")?.ok_or("DequantizeLinear has no scale")?;
    let zp = konst(2, "zero point")?;
    let (bits, signed) = match wq.dtype() {
        DType::I4 => (4, true),
        DType::U4 => (4, false),
        DType::I8 => (8, true),
        DType::U8 => (8, false),
        d => {
            return Err(format!(
                "quantized weight is {d}; MatMulNBits takes 4-bit (int4/uint4) or 8-bit (int8/uint8) codes"
            ))
        }
    };
    let &[k, n] = wq.shape() else {
        return Err(format!(
            "quantized weight has shape {:?}; want a matrix [K, N]",
            wq.shape()
        ));
    };
    if attrs.block_size == 0 {
        return Err(
            "DequantizeLinear is per-tensor or per-axis (block_size 0), not blocked along K: \
             MatMulNBits has one scale per block of K and this is not mapped to it"
                .to_string(),
        );
    }
    if attrs.axis != 0 && attrs.axis != -2 {
        return Err(format!(
            "DequantizeLinear blocks axis {}, not K (axis 0)",
            attrs.axis
        ));
    }
    let bs = attrs.block_size as usize;
    if bs < 16 || !bs.is_power_of_two() {
        return Err(format!(
            "block_size {bs} is not a power of two >= 16 (MatMulNBits' block sizes)"
        ));
    }
    if k == 0 || n == 0 {
        return Err(format!("quantized weight has an empty shape [{k}, {n}]"));
    }
    // MatMulNBits pads each column to whole blocks: a block far beyond K would make B mostly
    // padding (and a hostile block_size a huge allocation).
    if bs > k.next_power_of_two().max(16) {
        return Err(format!(
            "block_size {bs} is larger than K = {k} needs: B would be mostly padding"
        ));
    }
    let t = scale.dtype();
    if !matches!(t, DType::F32 | DType::F16) {
        return Err(format!(
            "scale is {t}; the fusion takes float32 and float16"
        ));
    }
    let nb = k.div_ceil(bs);
    if scale.shape() != [nb, n] {
        return Err(format!(
            "scale has shape {:?}; want [{nb}, {n}] (ceil(K / block_size), N)",
            scale.shape()
        ));
    }
    if let Some(z) = &zp {
        if z.dtype() != wq.dtype() || z.shape() != scale.shape() {
            return Err(format!(
                "zero point is {} {:?}; want {} {:?} (the weight's type, the scale's shape)",
                z.dtype(),
                z.shape(),
                wq.dtype(),
                scale.shape()
            ));
        }
    }
    let shift = if signed { 1u8 << (bits - 1) } else { 0 };
    let codes = unsigned_codes(&wq, shift)?;
    // The unsigned zero point of block `blk` of column `col`.
    let zf = zp.as_ref().map(|z| unsigned_codes(z, shift)).transpose()?;
    let zero = |blk: usize, col: usize| -> u8 {
        match &zf {
            Some(z) => z[blk * n + col],
            None => shift,
        }
    };
    let blob = bs * bits / 8;
    let mut b = vec![0u8; n * nb * blob];
    for col in 0..n {
        for blk in 0..nb {
            let z = zero(blk, col);
            let out = &mut b[(col * nb + blk) * blob..][..blob];
            for i in 0..bs {
                let kk = blk * bs + i;
                let c = if kk < k { codes[kk * n + col] } else { z };
                put(out, i, bits, c);
            }
        }
    }
    // Scales [N, k_blocks]: the transpose of DequantizeLinear's [k_blocks, N].
    let s = scale.to_f64_vec();
    let st: Vec<f32> = (0..n * nb)
        .map(|i| s[(i % nb) * n + i / nb] as f32)
        .collect();
    let scales =
        Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![n, nb], st).map_err(|e| e.to_string())?)
            .cast(t)
            .ok_or_else(|| format!("no {t} scales"))?;
    // Zero points: none for a signed weight without one (MatMulNBits' default is the shift),
    // else packed uint8 [N, ceil(k_blocks * bits / 8)].
    let zero_points = if zp.is_none() && signed {
        None
    } else {
        let row = (nb * bits).div_ceil(8);
        let mut z = vec![0u8; n * row];
        for col in 0..n {
            for blk in 0..nb {
                put(&mut z[col * row..][..row], blk, bits, zero(blk, col));
            }
        }
        Some(u8_tensor(vec![n, row], z)?)
    };
    Ok(Packed {
        k,
        n,
        bits,
        block: bs,
        b: u8_tensor(vec![n, nb, blob], b)?,
        scales,
        zero_points,
    })
}

/// The codes of an int4/uint4/int8/uint8 tensor as unsigned bytes, signed ones shifted by
/// `shift` (2^(bits-1)) in wrapping arithmetic: -8..=7 becomes 0..=15, -128..=127 0..=255.
fn unsigned_codes(t: &Tensor, shift: u8) -> Result<Vec<u8>, String> {
    Ok(match t {
        Tensor::I4(a) | Tensor::I8(a) => a.iter().map(|&q| (q as u8).wrapping_add(shift)).collect(),
        Tensor::U4(a) | Tensor::U8(a) => a.iter().copied().collect(),
        t => return Err(format!("{} is no 4- or 8-bit code type", t.dtype())),
    })
}

/// Writes code `c` as the `i`-th `bits`-bit code of `bytes`, low bits first.
fn put(bytes: &mut [u8], i: usize, bits: usize, c: u8) {
    if bits == 8 {
        bytes[i] = c;
    } else {
        bytes[i / 2] |= (c & 0xf) << (4 * (i % 2));
    }
}

fn u8_tensor(shape: Vec<usize>, v: Vec<u8>) -> Result<Tensor, String> {
    ndarray::ArrayD::from_shape_vec(shape, v)
        .map(Tensor::U8)
        .map_err(|e| e.to_string())
}
