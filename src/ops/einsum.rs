//! Einsum: Einstein summation over any number of operands.
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | Einsum | 12- | `equation` (required) | Inputs: T (variadic) -> Output: T; T numeric (bfloat16 from 28) |
//!
//! The equation is `term1,term2,...` optionally followed by `->output`; a term is letters (`a`
//! and `A` distinct) and at most one `...`; spaces are ignored. Explicit form: the output term
//! names the output's dims, each label once, every label taken from the inputs. Implicit form
//! (no `->`): the output is the ellipsis dims, then the labels that occur exactly once in the
//! whole equation, in ASCII order (upper case first). A label repeated within one term takes
//! that operand's diagonal; every label not in the output is summed over. All occurrences of a
//! label must have the same size. Ellipsis dims broadcast as numpy's einsum has them: aligned
//! from the right, size 1 against any size. Integers wrap. Version 28 adds bfloat16 only.
//!
//! The kernel walks every (output, summed) index combination once, keeping each operand's offset
//! from per-label strides (a repeated label's strides add up: the diagonal), so the work is the
//! product of all label sizes; its count is overflow-checked.

use ndarray::{ArrayD, IxDyn};

use super::common::{check_out, input, type_mismatch, unsupported_type, Num};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

const OP: &str = "Einsum";

/// One symbol of a term: a letter (its ASCII code) or the ellipsis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    Letter(u8),
    Ellipsis,
}

#[derive(Debug)]
pub struct Einsum {
    pub equation: String,
    pub terms: Vec<Vec<Label>>,
    /// The explicit output term; `None` in implicit form.
    pub output: Option<Vec<Label>>,
}

fn parse_term(t: &str) -> Result<Vec<Label>, String> {
    let b = t.as_bytes();
    let (mut out, mut i, mut ell) = (Vec::new(), 0, false);
    while i < b.len() {
        match b[i] {
            c if c.is_ascii_alphabetic() => {
                out.push(Label::Letter(c));
                i += 1;
            }
            b'.' if b[i..].starts_with(b"...") => {
                if ell {
                    return Err(format!("{OP}: term '{t}' has more than one ellipsis"));
                }
                ell = true;
                out.push(Label::Ellipsis);
                i += 3;
            }
            c => {
                return Err(format!(
                    "{OP}: term '{t}' has '{}': only letters and '...' are allowed",
                    c as char
                ))
            }
        }
    }
    Ok(out)
}

impl Einsum {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        let equation = a
            .string("equation")?
            .ok_or_else(|| format!("{OP}: attribute 'equation' is required"))?;
        let eq: String = equation.chars().filter(|&c| c != ' ').collect();
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (eq.as_str(), None),
        };
        let terms = lhs
            .split(',')
            .map(parse_term)
            .collect::<Result<Vec<_>, _>>()?;
        let output = rhs.map(parse_term).transpose()?;
        if let Some(out) = &output {
            for (i, l) in out.iter().enumerate() {
                if out[..i].contains(l) {
                    return Err(format!("{OP}: output term repeats {l:?} in '{equation}'"));
                }
                if let Label::Letter(c) = l {
                    if !terms.iter().any(|t| t.contains(l)) {
                        return Err(format!(
                            "{OP}: output label '{}' is in no input term of '{equation}'",
                            *c as char
                        ));
                    }
                }
            }
            if out.contains(&Label::Ellipsis) && !terms.iter().any(|t| t.contains(&Label::Ellipsis))
            {
                return Err(format!(
                    "{OP}: the output has '...' but no input term does, in '{equation}'"
                ));
            }
        }
        Ok(Box::new(Einsum {
            equation,
            terms,
            output,
        }))
    }

    /// The output term with the ellipsis spelled out (implicit form: ellipsis, then the
    /// letters found once, in ASCII order).
    fn output_term(&self) -> Vec<Label> {
        if let Some(o) = &self.output {
            return o.clone();
        }
        let mut out = Vec::new();
        if self.terms.iter().any(|t| t.contains(&Label::Ellipsis)) {
            out.push(Label::Ellipsis);
        }
        let count = |c: u8| {
            self.terms
                .iter()
                .flatten()
                .filter(|&&l| l == Label::Letter(c))
                .count()
        };
        // Ascending already: the range is.
        let once: Vec<u8> = (b'A'..=b'z').filter(|&c| count(c) == 1).collect();
        out.extend(once.into_iter().map(Label::Letter));
        out
    }
}

/// The equation bound to shapes: every label's size and each operand's per-label strides.
struct Plan {
    /// Output dims.
    out_shape: Vec<usize>,
    /// Sizes of all labels: the output's first, then the summed ones.
    sizes: Vec<usize>,
    /// Per operand, the element stride of each label (0 where absent or broadcast).
    strides: Vec<Vec<usize>>,
}

/// Label ids: letters by ASCII code (< 128), ellipsis dim `k` (from the right) as 128 + k.
fn plan(e: &Einsum, shapes: &[&[usize]]) -> Result<Plan, String> {
    if shapes.len() != e.terms.len() {
        return Err(format!(
            "{OP}: '{}' has {} terms but the node has {} inputs",
            e.equation,
            e.terms.len(),
            shapes.len()
        ));
    }
    // Each operand's dims as label ids.
    let mut ell_rank = 0;
    let mut ids: Vec<Vec<usize>> = Vec::with_capacity(shapes.len());
    for (t, s) in e.terms.iter().zip(shapes) {
        let letters = t.iter().filter(|l| **l != Label::Ellipsis).count();
        let has_ell = t.contains(&Label::Ellipsis);
        if s.len() < letters || (!has_ell && s.len() != letters) {
            return Err(format!(
                "{OP}: an operand of rank {} does not fit term of {letters} letters{} in '{}'",
                s.len(),
                if has_ell { " and '...'" } else { "" },
                e.equation
            ));
        }
        let k = s.len() - letters;
        ell_rank = ell_rank.max(k);
        let mut v = Vec::with_capacity(s.len());
        for l in t {
            match *l {
                Label::Letter(c) => v.push(c as usize),
                Label::Ellipsis => v.extend((0..k).rev().map(|j| 128 + j)),
            }
        }
        ids.push(v);
    }
    let expand = |term: &[Label]| -> Vec<usize> {
        let mut v = Vec::new();
        for l in term {
            match *l {
                Label::Letter(c) => v.push(c as usize),
                Label::Ellipsis => v.extend((0..ell_rank).rev().map(|j| 128 + j)),
            }
        }
        v
    };
    let out_ids = expand(&e.output_term());
    // Sizes: letters must agree; ellipsis dims broadcast (1 against anything).
    let mut size: Vec<Option<usize>> = vec![None; 128 + ell_rank];
    for (v, s) in ids.iter().zip(shapes) {
        for (&id, &d) in v.iter().zip(s.iter()) {
            match size[id] {
                None => size[id] = Some(d),
                Some(have) if have == d => {}
                Some(have) if id >= 128 && (have == 1 || d == 1) => size[id] = Some(have.max(d)),
                Some(have) => {
                    return Err(format!(
                        "{OP}: {} has sizes {have} and {d} in '{}'",
                        label_name(id),
                        e.equation
                    ))
                }
            }
        }
    }
    let mut order = out_ids.clone();
    for v in &ids {
        for &id in v {
            if !order.contains(&id) {
                order.push(id);
            }
        }
    }
    let sizes: Vec<usize> = order.iter().map(|&id| size[id].unwrap_or(1)).collect();
    let strides = ids
        .iter()
        .zip(shapes)
        .map(|(v, s)| {
            let mut st = vec![0usize; order.len()];
            let mut step = 1usize;
            for (&id, &d) in v.iter().zip(s.iter()).rev() {
                let at = order.iter().position(|&o| o == id).unwrap_or(0);
                if d != 1 || sizes[at] == 1 {
                    st[at] += step;
                }
                step = step.saturating_mul(d);
            }
            st
        })
        .collect();
    Ok(Plan {
        out_shape: sizes[..out_ids.len()].to_vec(),
        sizes,
        strides,
    })
}

fn label_name(id: usize) -> String {
    if id < 128 {
        format!("label '{}'", id as u8 as char)
    } else {
        format!("ellipsis dim {} from the right", id - 128)
    }
}

/// Σ over the summed labels of the product of the operands, for every output element.
fn contract<T: Num>(p: &Plan, ops: &[&[T]]) -> Result<Vec<T>, String> {
    let n_out: usize = p.out_shape.iter().product();
    let n_all = p
        .sizes
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("{OP}: the label sizes {:?} overflow", p.sizes))?;
    let mut out = vec![T::ZERO; n_out];
    if n_all == 0 {
        return Ok(out);
    }
    let per_out = n_all / n_out.max(1);
    let mut idx = vec![0usize; p.sizes.len()];
    let mut off = vec![0usize; ops.len()];
    for slot in out.iter_mut() {
        let mut acc = T::ZERO;
        for _ in 0..per_out {
            let mut prod = T::ONE;
            for (o, a) in off.iter().zip(ops) {
                prod = prod.wmul(a[*o]);
            }
            acc = acc.wadd(prod);
            // Odometer step over all labels, last fastest.
            for k in (0..idx.len()).rev() {
                idx[k] += 1;
                for (o, st) in off.iter_mut().zip(&p.strides) {
                    *o += st[k];
                }
                if idx[k] < p.sizes[k] {
                    break;
                }
                for (o, st) in off.iter_mut().zip(&p.strides) {
                    *o -= st[k] * p.sizes[k];
                }
                idx[k] = 0;
            }
        }
        *slot = acc;
    }
    Ok(out)
}

impl Op for Einsum {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = cx.input_shapes().and_then(|s| {
            let known: Option<Vec<Vec<usize>>> = s
                .iter()
                .map(|d| {
                    d.iter()
                        .map(|d| match d {
                            Dim::Known(v) => usize::try_from(*v).ok(),
                            _ => None,
                        })
                        .collect()
                })
                .collect();
            let known = known?;
            let refs: Vec<&[usize]> = known.iter().map(|v| v.as_slice()).collect();
            let p = plan(self, &refs).ok()?;
            Some(p.out_shape.iter().map(|&d| Dim::Known(d as i64)).collect())
        });
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        einsum
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

fn einsum(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let e = ctx.attrs::<Einsum>()?;
    let ts: Vec<&Tensor> = (0..inputs.len())
        .map(|i| input(OP, inputs, i))
        .collect::<Result<_, _>>()?;
    let first = *ts.first().ok_or_else(|| format!("{OP}: no inputs"))?;
    if let Some(t) = ts.iter().find(|t| t.dtype() != first.dtype()) {
        return Err(type_mismatch(OP, first.dtype(), t.dtype()));
    }
    let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape()).collect();
    let p = plan(e, &shapes)?;
    check_out(ctx, OP, &p.out_shape, super::common::bits(first.dtype()))?;
    macro_rules! run {
        ($v:ident) => {{
            let owned: Vec<Vec<_>> = ts
                .iter()
                .map(|t| match t {
                    Tensor::$v(a) => a.iter().copied().collect(),
                    _ => Vec::new(),
                })
                .collect();
            let refs: Vec<&[_]> = owned.iter().map(|v| v.as_slice()).collect();
            let out = contract(&p, &refs)?;
            Tensor::$v(
                ArrayD::from_shape_vec(IxDyn(&p.out_shape), out)
                    .map_err(|e| format!("{OP}: {e}"))?,
            )
        }};
    }
    Ok(vec![match first {
        Tensor::F32(_) => run!(F32),
        Tensor::F64(_) => run!(F64),
        Tensor::I32(_) => run!(I32),
        Tensor::I64(_) => run!(I64),
        t => return Err(unsupported_type(OP, t.dtype())),
    }])
}

#[cfg(test)]
#[path = "einsum_tests.rs"]
mod tests;
