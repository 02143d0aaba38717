//! The abstract tensors of the mask interpretation (`super`): an element expression over index
//! variables and symbolic dims (`Elem`) with its shape (`Abs`), and what each interpreted op does
//! to them (casts, Unsqueeze/Squeeze, broadcasting arithmetic and comparisons, Reshape, Gather).
//! Every function is exact or returns None.

use super::poly::{broadcast_shapes, pin_unit_axes, product, ravel, Poly};
use crate::ir::ValueId;
use crate::tensor::{DType, Tensor};

/// The element at every index of an abstract tensor.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Elem {
    Int(Poly),
    Float(f64),
    Bool(bool),
    /// The element at row-major position `at` of graph input `v`.
    Input(ValueId, Poly),
    /// `x != 0` (Cast to bool).
    NonZero(Box<Elem>),
    And(Box<Elem>, Box<Elem>),
    /// `a <= b`, not decided statically (a causal mask compares key and query positions).
    Le(Poly, Poly),
    Select(Box<Elem>, Box<Elem>, Box<Elem>),
}

impl Elem {
    pub(super) fn subst(&self, f: &dyn Fn(usize) -> Option<Poly>) -> Option<Elem> {
        let b = |e: &Elem| e.subst(f).map(Box::new);
        Some(match self {
            Elem::Int(p) => Elem::Int(p.subst(f)?),
            Elem::Input(v, p) => Elem::Input(*v, p.subst(f)?),
            Elem::Float(_) | Elem::Bool(_) => self.clone(),
            Elem::NonZero(x) => Elem::NonZero(b(x)?),
            Elem::And(x, y) => Elem::And(b(x)?, b(y)?),
            Elem::Select(c, x, y) => Elem::Select(b(c)?, b(x)?, b(y)?),
            Elem::Le(x, y) => Elem::Le(x.subst(f)?, y.subst(f)?),
        })
    }

    /// This element read in a tensor of shape `to` holding the same row-major sequence as one of
    /// shape `from`. Known for constants and for elementwise functions of graph-input elements
    /// read in order, which is what Reshape and Flatten of a (cast) mask are.
    pub(super) fn relayout(&self, from: &[Poly], to: &[Poly]) -> Option<Elem> {
        let b = |e: &Elem| e.relayout(from, to).map(Box::new);
        Some(match self {
            Elem::Int(p) if !p.uses_indices() => self.clone(),
            Elem::Float(_) | Elem::Bool(_) => self.clone(),
            Elem::Input(v, p) if pin_unit_axes(p, from)? == ravel(from)? => {
                Elem::Input(*v, ravel(to)?)
            }
            Elem::NonZero(x) => Elem::NonZero(b(x)?),
            Elem::And(x, y) => Elem::And(b(x)?, b(y)?),
            Elem::Select(c, x, y) => Elem::Select(b(c)?, b(x)?, b(y)?),
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub(super) struct Abs {
    pub(super) dtype: DType,
    pub(super) shape: Vec<Poly>,
    pub(super) elem: Elem,
}

impl Abs {
    /// The element expression read at the index space of `out` (numpy broadcasting): an axis of
    /// size 1 reads index 0; any other axis must be the same size as `out`'s.
    pub(super) fn broadcast_to(&self, out: &[Poly]) -> Option<Elem> {
        let offset = out.len().checked_sub(self.shape.len())?;
        for (a, d) in self.shape.iter().enumerate() {
            if !d.is_one() && *d != out[a + offset] {
                return None;
            }
        }
        let shape = &self.shape;
        self.elem.subst(&|a| {
            Some(if shape[a].is_one() {
                Poly::default()
            } else {
                Poly::idx(a + offset)
            })
        })
    }
}

pub(super) fn uniform_constant(t: &Tensor) -> Option<Abs> {
    let shape = t
        .shape()
        .iter()
        .map(|&d| Poly::constant(d as i64))
        .collect();
    let elem = match t {
        Tensor::Bool(a) => {
            let first = *a.iter().next()?;
            a.iter().all(|&x| x == first).then_some(Elem::Bool(first))?
        }
        Tensor::I32(_) | Tensor::I64(_) => {
            let v = t.to_i64_vec()?;
            let first = *v.first()?;
            v.iter()
                .all(|&x| x == first)
                .then(|| Elem::Int(Poly::constant(first)))?
        }
        // Other storage types (int8, bfloat16, ...) are not mask material here.
        Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) => {
            let v = t.to_f64_vec();
            let first = *v.first()?;
            v.iter()
                .all(|&x| x.to_bits() == first.to_bits())
                .then_some(Elem::Float(first))?
        }
        _ => return None,
    };
    Some(Abs {
        dtype: t.dtype(),
        shape,
        elem,
    })
}

pub(super) fn cast(x: Abs, to: DType) -> Option<Abs> {
    let elem = match (x.dtype, to) {
        (a, b) if a == b => x.elem,
        (DType::I32, DType::I64) => x.elem,
        (DType::BOOL, _) => return None,
        (_, DType::BOOL) => match x.elem {
            Elem::Int(p) => Elem::Bool(p.as_constant()? != 0),
            Elem::Float(f) => Elem::Bool(f != 0.0),
            e => Elem::NonZero(Box::new(e)),
        },
        _ => return None,
    };
    Some(Abs {
        dtype: to,
        elem,
        ..x
    })
}

pub(super) fn squeeze_like(x: Abs, axes: &[i64], unsqueeze: bool) -> Option<Abs> {
    let out_rank = if unsqueeze {
        x.shape.len() + axes.len()
    } else {
        x.shape.len().checked_sub(axes.len())?
    };
    let axis_rank = if unsqueeze { out_rank } else { x.shape.len() };
    let mut marked = vec![false; axis_rank];
    for &a in axes {
        let a = if a < 0 { a + axis_rank as i64 } else { a };
        let slot = marked.get_mut(usize::try_from(a).ok()?)?;
        if *slot {
            return None;
        }
        *slot = true;
    }
    // Input axis → output axis.
    let mut map = Vec::new();
    let mut shape = Vec::new();
    if unsqueeze {
        let mut next = 0;
        for (o, &m) in marked.iter().enumerate() {
            if m {
                shape.push(Poly::constant(1));
            } else {
                shape.push(x.shape.get(next)?.clone());
                map.push(Some(o));
                next += 1;
            }
        }
    } else {
        for (i, &m) in marked.iter().enumerate() {
            if m {
                if !x.shape[i].is_one() {
                    return None;
                }
                map.push(None);
            } else {
                map.push(Some(shape.len()));
                shape.push(x.shape[i].clone());
            }
        }
    }
    let elem = x.elem.subst(&|a| {
        Some(match map.get(a).copied().flatten() {
            Some(o) => Poly::idx(o),
            None => Poly::default(),
        })
    })?;
    Some(Abs {
        dtype: x.dtype,
        shape,
        elem,
    })
}

pub(super) fn elementwise(op: &str, args: &[Abs], out_dtype: Option<DType>) -> Option<Abs> {
    let shapes: Vec<&[Poly]> = args.iter().map(|a| a.shape.as_slice()).collect();
    let shape = broadcast_shapes(&shapes)?;
    let e: Vec<Elem> = args
        .iter()
        .map(|a| a.broadcast_to(&shape))
        .collect::<Option<_>>()?;
    let int = |e: &Elem| match e {
        Elem::Int(p) => Some(p.clone()),
        _ => None,
    };
    let float = |e: &Elem| match e {
        Elem::Float(f) => Some(*f),
        _ => None,
    };
    let elem = match (op, e.as_slice()) {
        ("Add" | "Sub" | "Mul", [a, b]) if args[0].dtype.is_float() => {
            let (x, y) = (float(a)?, float(b)?);
            let exact = match op {
                "Add" => x + y,
                "Sub" => x - y,
                _ => x * y,
            };
            // Round as the graph does: (MIN * 2) * 0.5 is -inf in float32, not MIN.
            Elem::Float(match args[0].dtype {
                DType::F32 => exact as f32 as f64,
                DType::F16 => half::f16::from_f64(exact).to_f64(),
                _ => exact,
            })
        }
        ("Add", [a, b]) => Elem::Int(int(a)?.add(&int(b)?)?),
        ("Sub", [a, b]) => Elem::Int(int(a)?.sub(&int(b)?)?),
        ("Mul", [a, b]) => Elem::Int(int(a)?.mul(&int(b)?)?),
        ("GreaterOrEqual" | "LessOrEqual", [a, b]) => {
            let d = if op == "GreaterOrEqual" {
                int(a)?.sub(&int(b)?)?
            } else {
                int(b)?.sub(&int(a)?)?
            };
            if d.never_negative() {
                Elem::Bool(true)
            } else if op == "GreaterOrEqual" {
                Elem::Le(int(b)?, int(a)?)
            } else {
                Elem::Le(int(a)?, int(b)?)
            }
        }
        ("And", [a, b]) => match (a, b) {
            (Elem::Bool(true), x) | (x, Elem::Bool(true)) => x.clone(),
            (Elem::Bool(false), _) | (_, Elem::Bool(false)) => Elem::Bool(false),
            (x, y) => Elem::And(Box::new(x.clone()), Box::new(y.clone())),
        },
        ("Where", [c, a, b]) => match c {
            Elem::Bool(true) => a.clone(),
            Elem::Bool(false) => b.clone(),
            c => Elem::Select(
                Box::new(c.clone()),
                Box::new(a.clone()),
                Box::new(b.clone()),
            ),
        },
        _ => return None,
    };
    Some(Abs {
        dtype: out_dtype?,
        shape,
        elem,
    })
}

pub(super) fn relayout(x: Abs, shape: Vec<Poly>) -> Option<Abs> {
    if product(&shape)? != product(&x.shape)? {
        return None;
    }
    let elem = if shape == x.shape {
        x.elem
    } else {
        x.elem.relayout(&x.shape, &shape)?
    };
    Some(Abs {
        dtype: x.dtype,
        shape,
        elem,
    })
}

/// Gather along axis 0 with indices that are provably in `[0, len)` everywhere (so neither
/// negative wrap-around nor the out-of-range error can happen).
pub(super) fn gather(data: Abs, idx: Abs, axis: i64) -> Option<Abs> {
    let axis = if axis < 0 {
        axis + data.shape.len() as i64
    } else {
        axis
    };
    if axis != 0 || data.shape.is_empty() {
        return None;
    }
    let Elem::Int(at) = &idx.elem else {
        return None;
    };
    if !(at.as_constant() == Some(0) || at.never_negative()) {
        return None;
    }
    // The largest index: every index variable at its axis' last position (`at` only grows).
    let top = at.subst(&|a| idx.shape.get(a)?.sub(&Poly::constant(1)))?;
    let room = data.shape[0].sub(&Poly::constant(1))?.sub(&top)?;
    if !(room.as_constant() == Some(0) || room.never_negative()) {
        return None;
    }
    let r = idx.shape.len();
    let elem = data.elem.subst(&|a| {
        Some(if a == 0 {
            at.clone()
        } else {
            Poly::idx(r + a - 1)
        })
    })?;
    let mut shape = idx.shape.clone();
    shape.extend(data.shape[1..].iter().cloned());
    Some(Abs {
        dtype: data.dtype,
        shape,
        elem,
    })
}

/// GatherND (batch_dims 0) whose index tuples are the Concat of `pieces` along a last axis of
/// size 1 each (given here without it): `out[i..] = data[piece_0[i..], piece_1[i..], ..]`, each
/// piece provably within its data axis (transformers 5.x's dynamo masks read
/// `attention_mask[batch_idx, kv_idx]` this way).
pub(super) fn gather_nd(data: Abs, pieces: &[Abs]) -> Option<Abs> {
    let k = pieces.len();
    if k == 0 || k > data.shape.len() {
        return None;
    }
    let shapes: Vec<&[Poly]> = pieces.iter().map(|p| p.shape.as_slice()).collect();
    let shape = broadcast_shapes(&shapes)?;
    let mut at = Vec::with_capacity(k);
    for (j, p) in pieces.iter().enumerate() {
        let Elem::Int(e) = p.broadcast_to(&shape)? else {
            return None;
        };
        if !(e.as_constant() == Some(0) || e.never_negative()) {
            return None;
        }
        let top = e.subst(&|a| shape.get(a)?.sub(&Poly::constant(1)))?;
        let room = data.shape[j].sub(&Poly::constant(1))?.sub(&top)?;
        if !(room.as_constant() == Some(0) || room.never_negative()) {
            return None;
        }
        at.push(e);
    }
    let r = shape.len();
    let elem = data.elem.subst(&|a| {
        Some(if a < k {
            at[a].clone()
        } else {
            Poly::idx(r + a - k)
        })
    })?;
    let mut out = shape;
    out.extend(data.shape[k..].iter().cloned());
    Some(Abs {
        dtype: data.dtype,
        shape: out,
        elem,
    })
}
