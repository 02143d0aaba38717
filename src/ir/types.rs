//! Static tensor types: element type plus a shape whose dims may be symbolic.

use std::fmt;

use serde::Serialize;

use crate::onnx::proto::{type_proto, Dim as ProtoDim, Dimension, TensorShapeProto, TypeProto};
use crate::tensor::DType;

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum Dim {
    Known(i64),
    /// A named symbolic dim (`dim_param`): equal names are equal sizes.
    Sym(String),
    /// Nothing is known.
    #[serde(serialize_with = "unknown_dim")]
    Unknown,
}

impl Dim {
    /// The symbol inference gives a dim it could not decide: the run-time size of axis `axis`
    /// of value `value`, spelled `?value[axis]`.
    pub fn undecided(value: &str, axis: usize) -> Dim {
        Dim::Sym(format!("?{value}[{axis}]"))
    }

    /// The size of `[0, s)` sliced from an axis of `d` elements: `min(s, d)`, for a symbol `s`
    /// (a Slice whose end is the value of symbolic dim `s`, BERT's position ids cut to the
    /// input's length). `d` ≥ 1.
    pub fn min_of(s: &str, d: i64) -> Dim {
        Dim::Sym(format!("min({s}, {d})"))
    }

    /// `(s, d)` for a symbol made by `min_of`.
    pub fn as_min(&self) -> Option<(&str, i64)> {
        let Dim::Sym(name) = self else { return None };
        let inner = name.strip_prefix("min(")?.strip_suffix(')')?;
        let (s, d) = inner.rsplit_once(", ")?;
        Some((s, d.parse().ok()?))
    }

    /// True when this dim is `min(s, d)` for the symbol `s` that `other` names: wherever the
    /// two meet in a broadcast that runs, they are equal (or both 1), so the result is `other`.
    pub fn is_min_of(&self, other: &Dim) -> bool {
        matches!((self.as_min(), other), (Some((s, _)), Dim::Sym(o)) if s == o)
    }

    /// `k` times the size of dim `d`, when that is a known number or a named size: `k*s` for a
    /// symbol `s` (BLOOM's attention reshapes its heads to `batch * heads` rows and divides that
    /// size by the head count again: `as_scaled` undoes it). `None` for an undecided or unknown
    /// dim, a non-positive `k` or an overflow.
    pub fn scaled(d: &Dim, k: i64) -> Option<Dim> {
        match d {
            _ if k < 1 => None,
            Dim::Known(v) => v.checked_mul(k).map(Dim::Known),
            _ if k == 1 => Some(d.clone()),
            Dim::Sym(_) if d.is_undecided() => None,
            Dim::Sym(name) => {
                let (j, base) = d.as_scaled().unwrap_or((1, name));
                let k = j.checked_mul(k)?;
                Some(Dim::Sym(format!("{k}*{base}")))
            }
            Dim::Unknown => None,
        }
    }

    /// `(k, s)` for a symbol made by `scaled` (`k` ≥ 2).
    pub fn as_scaled(&self) -> Option<(i64, &str)> {
        let Dim::Sym(name) = self else { return None };
        let (k, s) = name.split_once('*')?;
        let k: i64 = k.parse().ok()?;
        (k >= 2 && !s.is_empty() && k.to_string().len() == name.len() - s.len() - 1)
            .then_some((k, s))
    }

    /// This dim divided by `q`, where that is exact: a known multiple of `q`, or `k*s` with
    /// `q` dividing `k`.
    pub fn divided(&self, q: i64) -> Option<Dim> {
        match self {
            _ if q < 1 => None,
            _ if q == 1 => Some(self.clone()),
            Dim::Known(v) => (v % q == 0).then(|| Dim::Known(v / q)),
            Dim::Sym(_) => {
                let (k, s) = self.as_scaled()?;
                (k % q == 0).then(|| Dim::scaled(&Dim::Sym(s.to_string()), k / q))?
            }
            Dim::Unknown => None,
        }
    }

    /// True for a symbol made by `undecided`.
    pub fn is_undecided(&self) -> bool {
        matches!(self, Dim::Sym(s) if s.starts_with('?'))
    }

    /// True when both dims are the same number or the same name. `Unknown` is never provably
    /// equal to anything, itself included (the derived `==` says it is).
    pub fn provably_eq(&self, other: &Dim) -> bool {
        self == other && *self != Dim::Unknown
    }
}

/// `Dim::provably_eq` over two whole shapes (ranks must match).
pub fn dims_provably_eq(a: &[Dim], b: &[Dim]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.provably_eq(y))
}

fn unknown_dim<S: serde::Serializer>(s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str("?")
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(v) => write!(f, "{v}"),
            Dim::Sym(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// What is known statically about a value. `None` means unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: Option<DType>,
    pub shape: Option<Vec<Dim>>,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Vec<Dim>) -> TensorType {
        TensorType {
            dtype: Some(dtype),
            shape: Some(shape),
        }
    }

    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(|s| s.len())
    }

    /// Static dims when every one is a known number.
    pub fn static_shape(&self) -> Option<Vec<i64>> {
        self.shape
            .as_ref()?
            .iter()
            .map(|d| match d {
                Dim::Known(v) => Some(*v),
                _ => None,
            })
            .collect()
    }

    /// True when both shapes are fully described and provably equal (same numbers, same names).
    pub fn same_shape_as(&self, other: &TensorType) -> bool {
        match (&self.shape, &other.shape) {
            (Some(a), Some(b)) => dims_provably_eq(a, b),
            _ => false,
        }
    }

    /// The type of an initializer: its element type and (static) dims.
    pub fn from_tensor_proto(t: &crate::onnx::proto::TensorProto) -> TensorType {
        TensorType {
            dtype: Some(DType(t.data_type)),
            shape: Some(t.dims.iter().map(|&d| Dim::Known(d)).collect()),
        }
    }

    pub fn from_proto(tp: &TypeProto) -> TensorType {
        match &tp.value {
            Some(type_proto::Value::TensorType(t)) => TensorType {
                dtype: (t.elem_type != 0).then_some(DType(t.elem_type)),
                shape: t.shape.as_ref().map(|s| {
                    s.dim
                        .iter()
                        .map(|d| match &d.value {
                            // Exporters spell "any size" as dim_value -1 or dim_param "?"
                            // (paddle2onnx, on both H and W of one input): unknown, not a
                            // size or a name that binds equal dims (this crate prints
                            // Unknown as "?").
                            Some(ProtoDim::DimValue(v)) if *v >= 0 => Dim::Known(*v),
                            Some(ProtoDim::DimParam(p)) if !p.is_empty() && p != "?" => {
                                Dim::Sym(p.clone())
                            }
                            _ => Dim::Unknown,
                        })
                        .collect()
                }),
            },
            _ => TensorType::default(),
        }
    }

    pub fn to_proto(&self) -> TypeProto {
        TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: self.dtype.map(|d| d.0).unwrap_or(0),
                shape: self.shape.as_ref().map(|s| TensorShapeProto {
                    dim: s
                        .iter()
                        .map(|d| Dimension {
                            value: match d {
                                Dim::Known(v) => Some(ProtoDim::DimValue(*v)),
                                Dim::Sym(p) => Some(ProtoDim::DimParam(p.clone())),
                                Dim::Unknown => None,
                            },
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            })),
            denotation: String::new(),
        }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dtype {
            Some(d) => write!(f, "{d}")?,
            None => f.write_str("?")?,
        }
        match &self.shape {
            Some(s) => {
                let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
                write!(f, "[{}]", dims.join(", "))
            }
            None => f.write_str("[?]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_symbols_multiply_and_divide_back() {
        let batch = Dim::Sym("batch".into());
        let four = Dim::scaled(&batch, 4).unwrap();
        assert_eq!(four, Dim::Sym("4*batch".into()));
        assert_eq!(four.as_scaled(), Some((4, "batch")));
        assert_eq!(Dim::scaled(&four, 3), Some(Dim::Sym("12*batch".into())));
        assert_eq!(four.divided(4), Some(batch.clone()));
        assert_eq!(four.divided(2), Some(Dim::Sym("2*batch".into())));
        // Not exact, or nothing to divide: no answer.
        assert_eq!(four.divided(3), None);
        assert_eq!(batch.divided(2), None);
        assert_eq!(Dim::Known(12).divided(5), None);
        assert_eq!(Dim::Known(12).divided(4), Some(Dim::Known(3)));
        // An undecided or unknown size, or a factor below 1, stays unknown.
        assert_eq!(Dim::scaled(&Dim::undecided("v", 0), 2), None);
        assert_eq!(Dim::scaled(&Dim::Unknown, 2), None);
        assert_eq!(Dim::scaled(&batch, 0), None);
        assert_eq!(Dim::scaled(&batch, 1), Some(batch.clone()));
        // Only the canonical spelling parses as scaled.
        for name in ["04*batch", "1*batch", "+4*batch", "4*", "batch*4", "x"] {
            assert_eq!(Dim::Sym(name.into()).as_scaled(), None, "{name}");
        }
    }

    #[test]
    fn unknown_dims_are_never_provably_equal() {
        assert!(!Dim::Unknown.provably_eq(&Dim::Unknown));
        assert!(Dim::Known(3).provably_eq(&Dim::Known(3)));
        assert!(Dim::Sym("seq".into()).provably_eq(&Dim::Sym("seq".into())));
        assert!(!Dim::Sym("seq".into()).provably_eq(&Dim::Sym("batch".into())));
        let named = [Dim::Sym("batch".into()), Dim::Known(8)];
        assert!(dims_provably_eq(&named, &named));
        assert!(!dims_provably_eq(
            &[Dim::Unknown, Dim::Known(8)],
            &[Dim::Unknown, Dim::Known(8)]
        ));
        assert!(!dims_provably_eq(&named, &named[..1]));
    }
}
