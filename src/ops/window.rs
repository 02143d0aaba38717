//! The window geometry Conv, ConvTranspose (conv.rs) and the pools (pool.rs) share: the
//! attributes `auto_pad`, `kernel_shape`, `strides`, `dilations`, `pads` (and the pools'
//! `ceil_mode`), output sizes for known and symbolic dims, and the loops over windows.
//!
//! Per spatial axis, with the kernel's extent `ek = d·(k - 1) + 1`: `out = floor((in + pb + pe -
//! ek) / s) + 1` under NOTSET (pads) or VALID (no pads); SAME_UPPER and SAME_LOWER give `out =
//! ceil(in / s)` and pad `max(0, (out - 1)·s + ek - in)`, the odd one at the end (UPPER) or the
//! beginning (LOWER). `ceil_mode` (NOTSET only: the auto_pad sizes come out the same either
//! way) rounds up instead and drops a last window that would start in the end padding. A
//! symbolic input dim keeps its symbol where the arithmetic is the identity, else gets a
//! derived `?(...)` symbol spelling the arithmetic (same input and attributes, same name).
//! Attribute values are checked at parse: strides, dilations, kernel >= 1, pads >= 0, all at
//! most i32::MAX, and the lists' lengths consistent (against the input's rank at run time).

use ndarray::ArrayD;

use super::common::{type_mismatch, Num};
use super::Attrs;
use crate::ir::Dim;
use crate::tensor::Tensor;

mod padded;
pub(super) use padded::Padded;

type R<T> = Result<T, String>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// The window attributes the convolutions and the pools share, validated on their own (their
/// lengths against the input's rank by the kernel).
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub auto_pad: AutoPad,
    /// Required by the pools; Conv falls back on W's dims.
    pub kernel_shape: Option<Vec<i64>>,
    pub strides: Option<Vec<i64>>,
    pub dilations: Option<Vec<i64>>,
    /// `[begin..., end...]`.
    pub pads: Option<Vec<i64>>,
    pub ceil_mode: bool,
}

/// One spatial axis of a window in effect: input, output and kernel lengths, stride, dilation
/// and pads (negative only for a ConvTranspose output_shape smaller than its full output).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Axis {
    pub inp: usize,
    pub out: usize,
    pub k: usize,
    pub s: usize,
    pub d: usize,
    pub pb: i64,
    pub pe: i64,
}

const UNIT: Axis = Axis {
    inp: 1,
    out: 1,
    k: 1,
    s: 1,
    d: 1,
    pb: 0,
    pe: 0,
};

/// The indices `t` in `0..count` with `0 <= p0 + t·step < limit`, as a range.
pub(super) fn span(p0: i64, step: usize, count: usize, limit: i64) -> (usize, usize) {
    let st = step as i64;
    let hi = if limit > p0 {
        ((limit - p0 + st - 1) / st).min(count as i64)
    } else {
        0
    };
    let lo = if p0 >= 0 { 0 } else { (-p0 + st - 1) / st }.min(hi);
    (lo as usize, hi as usize)
}

impl Axis {
    /// Input position of output `o`, tap `k` (Conv; the output position of input `o` for
    /// ConvTranspose). Only for `o` in the matching `span`.
    #[inline(always)]
    pub fn pos(&self, o: usize, k: usize) -> usize {
        ((o * self.s + k * self.d) as i64 - self.pb) as usize
    }
    /// The outputs whose tap `k` reads inside the input.
    pub fn outs_of_tap(&self, k: usize) -> (usize, usize) {
        span(
            (k * self.d) as i64 - self.pb,
            self.s,
            self.out,
            self.inp as i64,
        )
    }
    /// The taps of output `o`'s window that read inside the input.
    pub fn taps(&self, o: usize) -> (usize, usize) {
        span(
            (o * self.s) as i64 - self.pb,
            self.d,
            self.k,
            self.inp as i64,
        )
    }
    /// How many taps of output `o`'s window lie inside the padded input.
    pub fn padded_taps(&self, o: usize) -> usize {
        let (lo, hi) = span(
            (o * self.s) as i64,
            self.d,
            self.k,
            self.inp as i64 + self.pb + self.pe,
        );
        hi - lo
    }
}

/// 1 to 3 spatial axes as three (unit axes in front), so every kernel loops over (z, y, x).
pub(super) fn to3(axes: &[Axis]) -> [Axis; 3] {
    let mut a = [UNIT; 3];
    a[3 - axes.len()..].copy_from_slice(axes);
    a
}

/// Attribute values must lie in `[min, i32::MAX]` (larger ones only overflow the arithmetic).
pub(super) fn in_range(name: &str, v: &Option<Vec<i64>>, min: i64) -> R<()> {
    match v {
        Some(v) if v.iter().any(|&x| x < min || x > i32::MAX as i64) => Err(format!(
            "attribute '{name}' must be {} (at most {}), got {v:?}",
            if min > 0 { "positive" } else { "non-negative" },
            i32::MAX
        )),
        _ => Ok(()),
    }
}

impl Window {
    /// `dilations` and `ceil_mode` are read only where the op's version has them.
    pub(super) fn read(a: &Attrs, dilations: bool, ceil_mode: bool) -> R<Window> {
        let auto_pad = match a.string("auto_pad")?.as_deref() {
            None | Some("NOTSET") => AutoPad::NotSet,
            Some("SAME_UPPER") => AutoPad::SameUpper,
            Some("SAME_LOWER") => AutoPad::SameLower,
            Some("VALID") => AutoPad::Valid,
            Some(o) => {
                return Err(format!(
                    "attribute 'auto_pad' is '{o}', not NOTSET, SAME_UPPER, SAME_LOWER or VALID"
                ))
            }
        };
        let w = Window {
            auto_pad,
            kernel_shape: a.ints("kernel_shape")?,
            strides: a.ints("strides")?,
            dilations: if dilations {
                a.ints("dilations")?
            } else {
                None
            },
            pads: a.ints("pads")?,
            ceil_mode: ceil_mode && a.flag("ceil_mode", false)?,
        };
        in_range("kernel_shape", &w.kernel_shape, 1)?;
        in_range("strides", &w.strides, 1)?;
        in_range("dilations", &w.dilations, 1)?;
        in_range("pads", &w.pads, 0)?;
        let lens = [
            ("kernel_shape", w.kernel_shape.as_ref().map(Vec::len)),
            ("strides", w.strides.as_ref().map(Vec::len)),
            ("dilations", w.dilations.as_ref().map(Vec::len)),
            ("pads", w.pads.as_ref().map(|p| p.len() / 2)),
        ];
        let mut given = lens.iter().filter_map(|(n, l)| l.map(|l| (n, l)));
        if let Some((n0, l0)) = given.next() {
            if let Some((n, l)) = given.find(|(_, l)| *l != l0) {
                return Err(format!(
                    "attributes '{n0}' and '{n}' are for different numbers of spatial axes ({l0} and {l})"
                ));
            }
        }
        if w.pads.as_ref().is_some_and(|p| p.len() % 2 == 1) {
            return Err("attribute 'pads' must have an even length (begins, then ends)".into());
        }
        Ok(w)
    }

    pub(super) fn stride(&self, i: usize) -> i64 {
        self.strides
            .as_ref()
            .and_then(|v| v.get(i).copied())
            .unwrap_or(1)
    }
    pub(super) fn dilation(&self, i: usize) -> i64 {
        self.dilations
            .as_ref()
            .and_then(|v| v.get(i).copied())
            .unwrap_or(1)
    }
    pub(super) fn pad(&self, i: usize, n: usize) -> (i64, i64) {
        let at = |j: usize| {
            self.pads
                .as_ref()
                .and_then(|p| p.get(j).copied())
                .unwrap_or(0)
        };
        (at(i), at(i + n))
    }
    pub(super) fn kernel(&self, i: usize) -> Option<i64> {
        self.kernel_shape.as_ref().and_then(|k| k.get(i).copied())
    }

    /// Output length and pads of spatial axis `i` of `n` (Conv and the pools), for input
    /// length `inp` and kernel `k`.
    fn out_len(&self, i: usize, n: usize, inp: i64, k: i64) -> R<(i64, i64, i64)> {
        let (s, d) = (self.stride(i), self.dilation(i));
        let ek = d.saturating_mul(k.saturating_sub(1)).saturating_add(1);
        if matches!(self.auto_pad, AutoPad::SameUpper | AutoPad::SameLower) {
            let out = inp.saturating_add(s - 1) / s;
            let total = out
                .saturating_sub(1)
                .saturating_mul(s)
                .saturating_add(ek)
                .saturating_sub(inp)
                .max(0);
            let small = total / 2;
            let pads = if self.auto_pad == AutoPad::SameUpper {
                (small, total.saturating_sub(small))
            } else {
                (total.saturating_sub(small), small)
            };
            return Ok((out, pads.0, pads.1));
        }
        let (pb, pe) = if self.auto_pad == AutoPad::Valid {
            (0, 0)
        } else {
            self.pad(i, n)
        };
        // Hostile pads or dims must not overflow: checked, and an overflow is an error.
        let span = inp
            .checked_add(pb)
            .and_then(|v| v.checked_add(pe))
            .and_then(|v| v.checked_sub(ek))
            .ok_or_else(|| format!("spatial axis {i}: input {inp} + pads {pb}, {pe} overflows"))?;
        if span < 0 {
            return Err(format!(
                "the kernel's extent {ek} (kernel {k}, dilation {d}) is larger than the padded \
                 input {inp} + {pb} + {pe} on spatial axis {i}"
            ));
        }
        let mut out = span / s + 1;
        if self.ceil_mode && self.auto_pad == AutoPad::NotSet {
            out = span.saturating_add(s - 1) / s + 1;
            if out.saturating_sub(1).saturating_mul(s) >= inp.saturating_add(pb) {
                out -= 1;
            }
        }
        Ok((out, pb, pe))
    }

    /// The axes in effect for input spatial dims `x` and kernel dims `k` (from W or the
    /// attribute), after checking the attributes' lengths against them.
    pub(super) fn axes(&self, op: &str, x: &[usize], k: &[usize]) -> R<Vec<Axis>> {
        let n = x.len();
        let lens = [
            ("kernel_shape", self.kernel_shape.as_ref().map(Vec::len)),
            ("strides", self.strides.as_ref().map(Vec::len)),
            ("dilations", self.dilations.as_ref().map(Vec::len)),
            ("pads", self.pads.as_ref().map(|p| p.len() / 2)),
        ];
        if let Some((name, Some(l))) = lens.iter().find(|(_, l)| l.is_some_and(|l| l != n)) {
            return Err(format!(
                "{op}: attribute '{name}' is for {l} spatial axes, the input has {n}"
            ));
        }
        (0..n)
            .map(|i| {
                let (out, pb, pe) = self
                    .out_len(i, n, x[i] as i64, k[i] as i64)
                    .map_err(|e| format!("{op}: {e}"))?;
                Ok(Axis {
                    inp: x[i],
                    out: out as usize,
                    k: k[i],
                    s: self.stride(i) as usize,
                    d: self.dilation(i) as usize,
                    pb,
                    pe,
                })
            })
            .collect()
    }

    /// The output dim of spatial axis `i` of `n` for input dim `inp` and kernel `k`: computed when
    /// known; the same symbol when the arithmetic is the identity; else a symbol derived from the
    /// input's and the attributes (equal inputs and attributes, equal names), or unknown.
    pub(super) fn infer_dim(&self, i: usize, n: usize, inp: &Dim, k: Option<i64>) -> Dim {
        let Some(k) = k.filter(|&k| k > 0) else {
            return Dim::Unknown;
        };
        let name = match inp {
            Dim::Known(v) => {
                return self
                    .out_len(i, n, *v, k)
                    .map_or(Dim::Unknown, |o| Dim::Known(o.0))
            }
            Dim::Sym(name) => name,
            Dim::Unknown => return Dim::Unknown,
        };
        let s = self.stride(i);
        let ek = self.dilation(i).saturating_mul(k - 1).saturating_add(1);
        let (pb, pe) = match self.auto_pad {
            AutoPad::Valid => (0, 0),
            _ => self.pad(i, n),
        };
        let a = pb + pe - ek;
        let ceil = self.ceil_mode && self.auto_pad == AutoPad::NotSet;
        match self.auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower if s == 1 => Dim::Sym(name.clone()),
            AutoPad::SameUpper | AutoPad::SameLower => derived(format!("ceil({name}/{s})")),
            _ if s == 1 => {
                // Rounding up changes nothing at stride 1, but a last window starting in the
                // end padding (pe >= ek) is dropped.
                let c = a + 1 - i64::from(ceil && pe >= ek);
                if c == 0 {
                    Dim::Sym(name.clone())
                } else {
                    derived(format!("{name}{}", offset(c)))
                }
            }
            _ if ceil => derived(format!("ceil_window({name}{},{s},{pb})", offset(a))),
            _ => derived(format!("({name}{})/{s}+1", offset(a))),
        }
    }
}

/// A symbol derived by inference: `?` like the undecided dims, so a re-inference replaces it.
pub(super) fn derived(body: String) -> Dim {
    Dim::Sym(format!("?({body})"))
}

pub(super) fn offset(c: i64) -> String {
    if c == 0 {
        String::new()
    } else {
        format!("{c:+}")
    }
}

/// Element types of the convolution and pool kernels.
pub(super) trait Elem: Num {
    /// Below every value (-inf for floats): a max's start.
    const LOWEST: Self;
    fn of(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn wrap(a: ArrayD<Self>) -> Tensor;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

macro_rules! elem {
    ($t:ty, $v:ident, $lowest:expr) => {
        impl Elem for $t {
            const LOWEST: Self = $lowest;
            fn of(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$v(a) => Some(a),
                    _ => None,
                }
            }
            fn wrap(a: ArrayD<Self>) -> Tensor {
                Tensor::$v(a)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
elem!(f32, F32, f32::NEG_INFINITY);
elem!(f64, F64, f64::NEG_INFINITY);
elem!(i32, I32, i32::MIN);
elem!(i64, I64, i64::MIN);

/// `t` as X's element type `T`.
pub(super) fn same<'a, T: Elem>(op: &str, x: &Tensor, t: &'a Tensor) -> R<&'a ArrayD<T>> {
    T::of(t).ok_or_else(|| type_mismatch(op, x.dtype(), t.dtype()))
}

/// A contiguous copy-free slice of `a` (standard layout), or an owned one.
pub(super) fn data<T: Clone>(a: &ArrayD<T>) -> std::borrow::Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(a.iter().cloned().collect()),
    }
}

/// The number of spatial dims of an input of shape `xs` (1 to 3).
pub(super) fn spatial(op: &str, xs: &[usize]) -> R<usize> {
    match xs.len() {
        3..=5 => Ok(xs.len() - 2),
        r if r > 5 => Err(format!(
            "{op}: {} spatial dims are not supported (1 to 3 are)",
            r - 2
        )),
        _ => Err(format!(
            "{op}: X must be [N, C, spatial...] with 1 to 3 spatial dims, got shape {xs:?}"
        )),
    }
}

/// `y[o] = f(y[o], x[input position of o's tap t], t)` for every output `o` and tap `t` whose
/// position lies inside the input, tap by tap: each tap a run along an output row, contiguous
/// at stride 1 (a depthwise Conv channel, the pools without indices).
#[inline(always)]
pub(super) fn tap_major<T: Copy>(
    x: &[T],
    y: &mut [T],
    a: &[Axis; 3],
    f: impl Fn(T, T, usize) -> T,
) {
    let [az, ay, ax] = a;
    let mut t = 0;
    for kz in 0..az.k {
        let (z0, z1) = az.outs_of_tap(kz);
        for ky in 0..ay.k {
            let (y0, y1) = ay.outs_of_tap(ky);
            for kx in 0..ax.k {
                let (x0, x1) = ax.outs_of_tap(kx);
                t += 1;
                if x0 >= x1 {
                    continue;
                }
                for oz in z0..z1 {
                    for oy in y0..y1 {
                        let dst = &mut y[(oz * ay.out + oy) * ax.out..][x0..x1];
                        let src = (az.pos(oz, kz) * ay.inp + ay.pos(oy, ky)) * ax.inp;
                        let from = &x[src..][..ax.inp][ax.pos(x0, kx)..];
                        if ax.s == 1 {
                            for (v, &xv) in dst.iter_mut().zip(from) {
                                *v = f(*v, xv, t - 1);
                            }
                        } else {
                            for (v, &xv) in dst.iter_mut().zip(from.iter().step_by(ax.s)) {
                                *v = f(*v, xv, t - 1);
                            }
                        }
                    }
                }
            }
        }
    }
}
