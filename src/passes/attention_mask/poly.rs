//! Integer polynomials over index variables and symbolic dims: the arithmetic of shapes and
//! element positions in the mask interpretation (`super`). Every variable is never negative.

use std::collections::BTreeMap;

use crate::ir::types::Dim;

/// A variable of a polynomial: the index along an axis of the tensor the polynomial belongs to,
/// or a symbolic dim. Both are never negative.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Var {
    Idx(usize),
    Sym(String),
}

/// An integer polynomial: monomial (sorted variables) → coefficient, no zero coefficients.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Poly(BTreeMap<Vec<Var>, i64>);

/// `2·seq + 1`, `batch`, `0`: for messages.
impl std::fmt::Display for Poly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("0");
        }
        for (i, (vars, c)) in self.0.iter().enumerate() {
            let mut parts: Vec<String> = vars
                .iter()
                .map(|v| match v {
                    Var::Idx(a) => format!("i{a}"),
                    Var::Sym(s) => s.clone(),
                })
                .collect();
            if *c != 1 || parts.is_empty() {
                parts.insert(0, c.to_string());
            }
            write!(f, "{}{}", if i > 0 { " + " } else { "" }, parts.join("·"))?;
        }
        Ok(())
    }
}

/// `[batch, 1, seq, seq]`.
pub(super) fn show(dims: &[Poly]) -> String {
    let parts: Vec<String> = dims.iter().map(|p| p.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl Poly {
    pub(super) fn constant(c: i64) -> Poly {
        let mut p = Poly::default();
        if c != 0 {
            p.0.insert(vec![], c);
        }
        p
    }

    pub(super) fn var(v: Var) -> Poly {
        Poly(BTreeMap::from([(vec![v], 1)]))
    }

    pub(super) fn idx(axis: usize) -> Poly {
        Poly::var(Var::Idx(axis))
    }

    pub(super) fn from_dim(d: &Dim) -> Option<Poly> {
        match d {
            Dim::Known(k) => Some(Poly::constant(*k)),
            Dim::Sym(s) => Some(Poly::var(Var::Sym(s.clone()))),
            Dim::Unknown => None,
        }
    }

    pub(super) fn as_constant(&self) -> Option<i64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&vec![]).copied(),
            _ => None,
        }
    }

    pub(super) fn is_one(&self) -> bool {
        self.as_constant() == Some(1)
    }

    pub(super) fn add(&self, o: &Poly) -> Option<Poly> {
        let mut out = self.clone();
        for (m, c) in &o.0 {
            let e = out.0.entry(m.clone()).or_insert(0);
            *e = e.checked_add(*c)?;
            if *e == 0 {
                out.0.remove(m);
            }
        }
        Some(out)
    }

    pub(super) fn scale(&self, k: i64) -> Option<Poly> {
        let mut out = Poly::default();
        for (m, c) in &self.0 {
            out = out.add(&Poly(BTreeMap::from([(m.clone(), c.checked_mul(k)?)])))?;
        }
        Some(out)
    }

    pub(super) fn sub(&self, o: &Poly) -> Option<Poly> {
        self.add(&o.scale(-1)?)
    }

    pub(super) fn mul(&self, o: &Poly) -> Option<Poly> {
        let mut out = Poly::default();
        for (m1, c1) in &self.0 {
            for (m2, c2) in &o.0 {
                let mut m: Vec<Var> = m1.iter().chain(m2).cloned().collect();
                crate::ops::common::sort_by_dyn(&mut m, &|a, b| a.cmp(b));
                out = out.add(&Poly(BTreeMap::from([(m, c1.checked_mul(*c2)?)])))?;
            }
        }
        Some(out)
    }

    /// True when the value is ≥ 0 for every choice of the (non-negative) variables.
    pub(super) fn never_negative(&self) -> bool {
        self.0.values().all(|&c| c > 0)
    }

    pub(super) fn uses_indices(&self) -> bool {
        self.0.keys().flatten().any(|v| matches!(v, Var::Idx(_)))
    }

    /// Replaces every index variable `i_a` by `f(a)`.
    pub(super) fn subst(&self, f: &dyn Fn(usize) -> Option<Poly>) -> Option<Poly> {
        let mut out = Poly::default();
        for (m, c) in &self.0 {
            let mut term = Poly::constant(*c);
            for v in m {
                let p = match v {
                    Var::Idx(a) => f(*a)?,
                    Var::Sym(_) => Poly::var(v.clone()),
                };
                term = term.mul(&p)?;
            }
            out = out.add(&term)?;
        }
        Some(out)
    }
}

pub(super) fn product(dims: &[Poly]) -> Option<Poly> {
    dims.iter().try_fold(Poly::constant(1), |acc, d| acc.mul(d))
}

/// The row-major position of index `(i_0, …)` in a tensor of shape `dims` (the index along an
/// axis of size 1 is always 0, so it does not appear).
pub(super) fn ravel(dims: &[Poly]) -> Option<Poly> {
    let mut out = Poly::default();
    for a in 0..dims.len() {
        if !dims[a].is_one() {
            out = out.add(&Poly::idx(a).mul(&product(&dims[a + 1..])?)?)?;
        }
    }
    Some(out)
}

/// `p` with the index along every size-1 axis of `dims` set to its only value, 0.
pub(super) fn pin_unit_axes(p: &Poly, dims: &[Poly]) -> Option<Poly> {
    p.subst(&|a| {
        Some(match dims.get(a) {
            Some(d) if d.is_one() => Poly::default(),
            _ => Poly::idx(a),
        })
    })
}
/// numpy broadcasting of shapes whose dims are equal or 1 (a dim that might be 1 only at run
/// time, such as two different symbols, is not decided).
pub(super) fn broadcast_shapes(shapes: &[&[Poly]]) -> Option<Vec<Poly>> {
    let rank = shapes.iter().map(|s| s.len()).max()?;
    (0..rank)
        .map(|i| {
            let mut out = Poly::constant(1);
            for s in shapes {
                let Some(j) = (i + s.len()).checked_sub(rank) else {
                    continue;
                };
                let d = &s[j];
                if d.is_one() {
                    continue;
                }
                if out.is_one() {
                    out = d.clone();
                } else if out != *d {
                    return None;
                }
            }
            Some(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(s: &str) -> Poly {
        Poly::var(Var::Sym(s.into()))
    }

    #[test]
    fn ravel_skips_unit_axes_and_cancels_symbols() {
        let (b, t) = (sym("B"), sym("T"));
        let one = Poly::constant(1);
        // [B, 1, 1, T]: i0·T + i3.
        let r = ravel(&[b.clone(), one.clone(), one.clone(), t.clone()]).unwrap();
        let want = Poly::idx(0).mul(&t).unwrap().add(&Poly::idx(3)).unwrap();
        assert_eq!(r, want);
        // The largest b·T + k over [B, 1, 1, T] is B·T - 1: the room below B·T is exactly 0.
        let shape = [b.clone(), one.clone(), one, t.clone()];
        let top = r.subst(&|a| shape[a].sub(&Poly::constant(1))).unwrap();
        let room = b
            .mul(&t)
            .unwrap()
            .sub(&Poly::constant(1))
            .unwrap()
            .sub(&top)
            .unwrap();
        assert_eq!(room.as_constant(), Some(0));
    }

    #[test]
    fn sign_is_decided_only_when_every_coefficient_agrees() {
        let t = sym("T");
        assert!(Poly::idx(0).mul(&t).unwrap().never_negative());
        assert!(Poly::default().never_negative());
        assert!(!t.sub(&Poly::constant(1)).unwrap().never_negative());
        assert!(!Poly::idx(0).sub(&Poly::idx(1)).unwrap().never_negative());
    }

    #[test]
    fn broadcasting_needs_equal_dims_or_ones() {
        let (b, t, s) = (sym("B"), sym("T"), sym("S"));
        let one = Poly::constant(1);
        let out = broadcast_shapes(&[&[b.clone(), one], std::slice::from_ref(&t)]).unwrap();
        assert_eq!(out, vec![b.clone(), t.clone()]);
        // T and S could differ, or either be 1 at run time: not decided.
        assert!(broadcast_shapes(&[&[t], &[s]]).is_none());
    }
}
