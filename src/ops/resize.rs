//! ai.onnx Resize and Upsample: N-D interpolation, computed separably (one axis at a time, each
//! output position a weighted sum of input positions along that axis). Scales and sizes are
//! validated and the output (and every intermediate) is checked against the limits before it is
//! allocated.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | Upsample | 7 | `mode` ("nearest"), `scales` (required, each >= 1) | X -> Y |
//! | Upsample | 9 | `mode` ("nearest") | X, scales (float, each >= 1) -> Y |
//! | Resize | 10 | `mode` ("nearest") | X, scales (float, > 0) -> Y |
//! | Resize | 11 | `mode` ("nearest"), `coordinate_transformation_mode` ("half_pixel"), `nearest_mode` ("round_prefer_floor"), `cubic_coeff_a` (-0.75), `exclude_outside` (0), `extrapolation_value` (0.0) | X, roi, scales, optional sizes (int64) -> Y |
//! | Resize | 13 | as 11 | X, optional roi, optional scales, optional sizes -> Y |
//! | Resize | 18 | as 13, plus `antialias` (0), `axes` (all), `keep_aspect_ratio_policy` ("stretch") | as 13 |
//! | Resize | 19 | as 18 | as 13 |
//!
//! Modes: `nearest` (any element type), `linear` and `cubic` (numbers; integers are computed in
//! float64, then rounded half to even and saturated: to the compute type here, and to a
//! storage type such as uint8 by the executor's narrowing, which `Op::saturates` makes clamp
//! rather than wrap, as onnxruntime does). Output size per resized axis:
//! floor(in * scale) from scales (roi does not change it, as in onnxruntime and the ONNX
//! reference), or sizes, adjusted by `keep_aspect_ratio_policy` (one scale for all axes, the
//! min or max of sizes/in; size = round-half-up(scale * in)). An empty scales or sizes tensor
//! counts as absent; exactly one must be given. Coordinate transformations as in the spec;
//! align_corners and tf_crop_and_resize divide by the fractional output length scale * in, and
//! pytorch_half_pixel maps to 0 when the output length is 1 (spec and onnxruntime; the ONNX
//! reference uses -0.5). Versions 7 to 10 (no such attribute) are asymmetric, and their nearest
//! mode rounds down when upsampling and up when downsampling (onnxruntime's reading).
//! Version changes: 11 added roi, sizes and the attributes above (cubic,
//! tf_half_pixel_for_nn), 13 made roi/scales optional and dropped tf_half_pixel_for_nn, 18 added
//! antialias/axes/keep_aspect_ratio_policy, 19 half_pixel_symmetric. Upsample is deprecated
//! from 10 (an error there).

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input, int_list, norm_axes, opt_input, Num};
use super::infer::norm_axis as infer_axis;
use super::pad::{each_elem, gather_axis, Elem};
use super::shape_value::constant_tensor;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

/// An attribute's string values as an enum, with `named` reading one.
macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum $name { $($(#[$vm])* $v),* }
        impl $name {
            fn named(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$v),)* _ => None }
            }
        }
    };
}

named_enum!(Mode { Nearest = "nearest", Linear = "linear", Cubic = "cubic" });

named_enum!(Coord {
    HalfPixel = "half_pixel",
    HalfPixelSymmetric = "half_pixel_symmetric",
    PytorchHalfPixel = "pytorch_half_pixel",
    AlignCorners = "align_corners",
    Asymmetric = "asymmetric",
    TfHalfPixelForNn = "tf_half_pixel_for_nn",
    TfCropAndResize = "tf_crop_and_resize",
});

named_enum!(Nearest {
    RoundPreferFloor = "round_prefer_floor",
    RoundPreferCeil = "round_prefer_ceil",
    Floor = "floor",
    Ceil = "ceil",
    /// Versions before 11 (no nearest_mode): down when upsampling, up when downsampling.
    Simple = "",
});

named_enum!(Policy { Stretch = "stretch", NotLarger = "not_larger", NotSmaller = "not_smaller" });

/// Where the resize arguments come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Args {
    /// Upsample 7: the `scales` attribute.
    ScalesAttr(Vec<f32>),
    /// Upsample 9, Resize 10: scales is input 1.
    Scales,
    /// Resize 11+: roi, scales, sizes are inputs 1 to 3.
    RoiScalesSizes,
}

#[derive(Debug)]
pub struct Resize {
    /// "Resize" or "Upsample", for messages.
    pub name: &'static str,
    pub args: Args,
    pub mode: Mode,
    pub coord: Coord,
    pub nearest: Nearest,
    pub cubic_a: f64,
    pub exclude_outside: bool,
    pub extrapolation: f64,
    pub antialias: bool,
    pub axes: Option<Vec<i64>>,
    pub policy: Policy,
}

/// Upsample (7, 9): a Resize with scales >= 1 and the pre-11 semantics.
#[derive(Debug)]
pub struct Upsample;

impl Upsample {
    pub fn parse(a: &Attrs) -> P {
        if a.opset >= 10 {
            return Err("Upsample is deprecated from opset 10: use Resize".into());
        }
        let args = if a.opset >= 9 {
            Args::Scales
        } else {
            Args::ScalesAttr(
                a.floats("scales")?
                    .ok_or("Upsample: attribute 'scales' is required")?,
            )
        };
        Resize::parse_as(a, "Upsample", args)
    }
}

impl Resize {
    pub fn parse(a: &Attrs) -> P {
        let args = if a.opset >= 11 {
            Args::RoiScalesSizes
        } else {
            Args::Scales
        };
        Resize::parse_as(a, "Resize", args)
    }

    fn parse_as(a: &Attrs, name: &'static str, args: Args) -> P {
        let (v11, v18) = (a.opset >= 11, a.opset >= 18);
        let float =
            |k: &str, d: f32| Ok::<_, String>(f64::from(if v11 { a.float(k, d)? } else { d }));
        // A string attribute read through `named` (None: not a value this opset defines).
        macro_rules! get {
            ($key:literal, $default:literal, $named:expr) => {{
                let v = a.string($key)?.unwrap_or_else(|| $default.into());
                let e = || {
                    format!(
                        "{name}: {} '{v}' is not supported at opset {}",
                        $key, a.opset
                    )
                };
                $named(v.as_str()).ok_or_else(e)
            }};
        }
        let mode = get!("mode", "nearest", |s| Mode::named(s)
            .filter(|&m| v11 || m != Mode::Cubic))?;
        let coord = get!("coordinate_transformation_mode", "half_pixel", |s| {
            Coord::named(s).filter(|&c| match c {
                Coord::HalfPixelSymmetric => a.opset >= 19,
                Coord::TfHalfPixelForNn => a.opset < 13,
                _ => true,
            })
        });
        let nearest = get!("nearest_mode", "round_prefer_floor", |s| {
            Nearest::named(s).filter(|&n| n != Nearest::Simple)
        });
        let policy = get!("keep_aspect_ratio_policy", "stretch", Policy::named);
        Ok(Box::new(Resize {
            name,
            args,
            mode,
            // Before 11 neither attribute exists: asymmetric, and onnxruntime's rounding.
            coord: if v11 { coord? } else { Coord::Asymmetric },
            nearest: if v11 { nearest? } else { Nearest::Simple },
            cubic_a: float("cubic_coeff_a", -0.75)?,
            exclude_outside: v11 && a.flag("exclude_outside", false)?,
            extrapolation: float("extrapolation_value", 0.0)?,
            antialias: v18 && a.flag("antialias", false)?,
            axes: if v18 { a.ints("axes")? } else { None },
            policy: if v18 { policy? } else { Policy::Stretch },
        }))
    }

    /// Input indices of (roi, scales, sizes) in this version.
    fn slots(&self) -> (Option<usize>, Option<usize>, Option<usize>) {
        match self.args {
            Args::ScalesAttr(_) => (None, None, None),
            Args::Scales => (None, Some(1), None),
            Args::RoiScalesSizes => (Some(1), Some(2), Some(3)),
        }
    }
}

/// A resize argument as far as it is statically known.
enum Known<T> {
    Absent,
    Value(Vec<T>),
    Unknown,
}

impl Op for Resize {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = self.out_shape(cx, x.shape.as_deref());
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        resize
    }
    fn saturates(&self) -> bool {
        true
    }
}

impl Resize {
    fn static_arg<T>(
        &self,
        cx: &InferCx,
        slot: Option<usize>,
        f: impl Fn(&Tensor) -> Vec<T>,
    ) -> Known<T> {
        let Some(v) = slot.and_then(|i| cx.node.input(i)) else {
            return Known::Absent;
        };
        match constant_tensor(cx.graph, v) {
            Some(t) if t.is_empty() => Known::Absent,
            Some(t) => Known::Value(f(&t)),
            None => Known::Unknown,
        }
    }

    /// The output dims: resized axes from constant scales or sizes (a symbolic dim survives a
    /// scale of 1); otherwise the rank, with the resized axes unknown.
    fn out_shape(&self, cx: &InferCx, s: Option<&[Dim]>) -> Option<Vec<Dim>> {
        let (_, sc, sz) = self.slots();
        let scales = match &self.args {
            Args::ScalesAttr(v) => Known::Value(v.iter().map(|&x| f64::from(x)).collect()),
            _ => self.static_arg(cx, sc, Tensor::to_f64_vec),
        };
        let sizes = match self.static_arg(cx, sz, |t| t.to_i64_vec().unwrap_or_default()) {
            Known::Unknown => cx.ints(sz?).map_or(Known::Unknown, Known::Value),
            k => k,
        };
        let Some(s) = s else {
            // Rank from the arguments when they cover every axis.
            return match (&scales, &sizes, &self.axes) {
                (_, Known::Value(v), None) if self.policy == Policy::Stretch => {
                    Some(v.iter().map(|&d| Dim::Known(d)).collect())
                }
                (Known::Value(v), _, None) => Some(vec![Dim::Unknown; v.len()]),
                _ => None,
            };
        };
        let rank = s.len();
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a
                .iter()
                .map(|&x| infer_axis(x, rank))
                .collect::<Option<_>>()?,
            None => (0..rank).collect(),
        };
        let mut out = s.to_vec();
        for &a in &axes {
            out[a] = Dim::Unknown;
        }
        let known = |a: usize| match s[a] {
            Dim::Known(d) => Some(d),
            _ => None,
        };
        match (scales, sizes) {
            (Known::Value(v), _) if v.len() == axes.len() => {
                for (&a, &f) in axes.iter().zip(&v) {
                    out[a] = match known(a) {
                        _ if f == 1.0 => s[a].clone(),
                        Some(d) if f > 0.0 && f.is_finite() => Dim::Known((d as f64 * f) as i64),
                        _ => Dim::Unknown,
                    };
                }
            }
            (_, Known::Value(v)) if v.len() == axes.len() => {
                if self.policy == Policy::Stretch {
                    for (&a, &d) in axes.iter().zip(&v) {
                        out[a] = if d >= 0 { Dim::Known(d) } else { Dim::Unknown };
                    }
                } else if let Some(ins) = axes.iter().map(|&a| known(a)).collect::<Option<Vec<_>>>()
                {
                    let ins: Vec<usize> = ins.iter().map(|&d| d.max(0) as usize).collect();
                    if let Ok((sizes, _)) = self.aspect(&ins, &v) {
                        for (&a, d) in axes.iter().zip(sizes) {
                            out[a] = Dim::Known(d as i64);
                        }
                    }
                }
            }
            _ => {}
        }
        Some(out)
    }

    /// keep_aspect_ratio_policy not_larger/not_smaller: one scale for every resized axis (the
    /// min or max of sizes/in) and the sizes it gives, rounded half up.
    fn aspect(&self, ins: &[usize], sizes: &[i64]) -> Result<(Vec<usize>, f64), String> {
        let ratios = ins.iter().zip(sizes).map(|(&d, &s)| s as f64 / d as f64);
        let scale = match self.policy {
            Policy::NotLarger => ratios.fold(f64::INFINITY, f64::min),
            _ => ratios.fold(f64::NEG_INFINITY, f64::max),
        };
        if !(scale.is_finite() && scale >= 0.0) {
            return Err(format!(
                "{}: sizes {sizes:?} for axes of sizes {ins:?} give no aspect-preserving scale",
                self.name
            ));
        }
        let out = ins
            .iter()
            .map(|&d| out_len(self.name, (scale * d as f64 + 0.5).floor()));
        Ok((out.collect::<Result<_, _>>()?, scale))
    }
}

/// An output length computed in floating point, checked to be a plausible size.
fn out_len(op: &str, v: f64) -> Result<usize, String> {
    if (0.0..=(1u64 << 53) as f64).contains(&v) {
        Ok(v as usize)
    } else {
        Err(format!("{op}: output size {v} is out of range"))
    }
}

/// One resized axis: its output length and the scale the coordinate mapping uses.
struct AxisPlan {
    axis: usize,
    out: usize,
    scale: f64,
    roi: (f64, f64),
}

/// The taps of one axis pass: output position y reads `n` input positions `idx[y * n + k]`
/// with weights `w[y * n + k]`, or is `extrapolated` (tf_crop_and_resize outside the input).
struct Taps {
    n: usize,
    idx: Vec<usize>,
    w: Vec<f64>,
    extrapolated: Vec<bool>,
}

impl Resize {
    /// Source coordinate of output position `y` on an axis of `n_in` elements.
    fn source(&self, p: &AxisPlan, n_in: f64, y: f64) -> f64 {
        let (s, width) = (p.scale, p.scale * n_in);
        match self.coord {
            Coord::HalfPixel => (y + 0.5) / s - 0.5,
            Coord::HalfPixelSymmetric => {
                let offset = n_in / 2.0 * (1.0 - p.out as f64 / width);
                offset + (y + 0.5) / s - 0.5
            }
            Coord::PytorchHalfPixel if p.out <= 1 => 0.0,
            Coord::PytorchHalfPixel => (y + 0.5) / s - 0.5,
            Coord::AlignCorners if width == 1.0 => 0.0,
            Coord::AlignCorners => y * (n_in - 1.0) / (width - 1.0),
            Coord::Asymmetric => y / s,
            Coord::TfHalfPixelForNn => (y + 0.5) / s,
            Coord::TfCropAndResize => {
                let (a, b) = p.roi;
                let rel = if width == 1.0 {
                    (b - a) * (n_in - 1.0) / 2.0
                } else {
                    y * (b - a) * (n_in - 1.0) / (width - 1.0)
                };
                rel + a * (n_in - 1.0)
            }
        }
    }

    /// Nearest mode: the source index of each output position (`None`: the fill value).
    fn nearest_map(&self, p: &AxisPlan, n_in: usize) -> Vec<Option<usize>> {
        let last = n_in as f64 - 1.0;
        (0..p.out)
            .map(|y| {
                let x = self.source(p, n_in as f64, y as f64);
                if self.coord == Coord::TfCropAndResize && !(0.0..=last).contains(&x) {
                    return None;
                }
                let (fl, r) = (x.floor(), x - x.floor());
                let up = r > 0.0
                    && match self.nearest {
                        Nearest::RoundPreferFloor => r > 0.5,
                        Nearest::RoundPreferCeil => r >= 0.5,
                        Nearest::Floor => false,
                        Nearest::Ceil => true,
                        Nearest::Simple => p.scale < 1.0,
                    };
                let i = fl + f64::from(u8::from(up));
                if self.exclude_outside && !(0.0..=last).contains(&i) {
                    return None;
                }
                Some(i.clamp(0.0, last) as usize)
            })
            .collect()
    }

    /// Linear and cubic: the weights of every output position's neighbours. The kernel is
    /// stretched by 1/scale when antialiasing a downscale, which widens the window.
    fn taps(&self, ctx: &KernelCtx, p: &AxisPlan, n_in: usize) -> Result<Taps, String> {
        let support = if self.mode == Mode::Cubic { 2.0 } else { 1.0 };
        let s = if self.antialias {
            p.scale.min(1.0)
        } else {
            1.0
        };
        // Window [start, start + n) around the left neighbour; n = 2 - 2 * start.
        let start = (-support / s).floor() + 1.0;
        let n = out_len(self.name, 2.0 - 2.0 * start)?;
        let a = self.cubic_a;
        let kernel = |d: f64| {
            let d = d.abs();
            match self.mode {
                Mode::Cubic if d <= 1.0 => ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0,
                Mode::Cubic if d < 2.0 => ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a,
                Mode::Cubic => 0.0,
                _ => (1.0 - d).clamp(0.0, 1.0),
            }
        };
        // An index and a weight per tap.
        check_out(ctx, self.name, &[p.out, n], 128)?;
        let len = p.out * n;
        let mut t = Taps {
            n,
            idx: Vec::with_capacity(len),
            w: Vec::with_capacity(len),
            extrapolated: Vec::with_capacity(p.out),
        };
        let last = n_in as f64 - 1.0;
        for y in 0..p.out {
            let x = self.source(p, n_in as f64, y as f64);
            t.extrapolated
                .push(self.coord == Coord::TfCropAndResize && !(0.0..=last).contains(&x));
            // The left neighbour: floor(x), or x - 1 when x is whole (ratio 1).
            let ratio = if x.fract() == 0.0 { 1.0 } else { x - x.floor() };
            let left = x - ratio;
            let row = t.w.len();
            for k in 0..n {
                let i = start + k as f64;
                t.w.push(kernel((i - ratio) * s));
                let pos = left + i;
                let inside = (0.0..=last).contains(&pos);
                if self.exclude_outside && !inside {
                    t.w[row + k] = 0.0;
                }
                t.idx.push(pos.clamp(0.0, last.max(0.0)) as usize);
            }
            let ws = &mut t.w[row..];
            let sum: f64 = ws.iter().sum();
            if (self.antialias || self.exclude_outside) && sum != 0.0 {
                ws.iter_mut().for_each(|w| *w /= sum);
            }
        }
        Ok(t)
    }
}

/// One interpolation pass along `axis` of `src` (row-major, `dims`).
fn interp_axis<F: Num + Elem>(src: &[F], dims: &[usize], axis: usize, t: &Taps, fill: F) -> Vec<F> {
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let (n_in, n_out) = (dims[axis], t.extrapolated.len());
    let mut out = vec![F::ZERO; outer * n_out * inner];
    for o in 0..outer {
        for y in 0..n_out {
            let dst = &mut out[(o * n_out + y) * inner..][..inner];
            if t.extrapolated[y] {
                dst.fill(fill);
                continue;
            }
            for k in 0..t.n {
                let w = t.w[y * t.n + k];
                if w == 0.0 {
                    continue;
                }
                let (w, start) = (F::of_f64(w), (o * n_in + t.idx[y * t.n + k]) * inner);
                for (d, &v) in dst.iter_mut().zip(&src[start..start + inner]) {
                    *d = d.wadd(w.wmul(v));
                }
            }
        }
    }
    out
}

impl Resize {
    /// Every resized axis's plan, from scales or sizes (validated), and the output dims.
    fn plan(
        &self,
        x: &[usize],
        inputs: &[Option<&Tensor>],
    ) -> Result<(Vec<AxisPlan>, Vec<usize>), String> {
        let op = self.name;
        let (roi_i, sc_i, sz_i) = self.slots();
        let given = |i: Option<usize>| {
            i.and_then(|i| opt_input(inputs, i))
                .filter(|t| !t.is_empty())
        };
        let scales: Option<Vec<f64>> = match &self.args {
            Args::ScalesAttr(v) => Some(v.iter().map(|&s| f64::from(s)).collect()),
            _ => given(sc_i).map(Tensor::to_f64_vec),
        };
        let sizes = given(sz_i).map(|t| int_list(op, "sizes", t)).transpose()?;
        let rank = x.len();
        let axes = match &self.axes {
            Some(a) => norm_axes(op, a, rank)?,
            None => (0..rank).collect(),
        };
        let k = axes.len();
        let ins: Vec<usize> = axes.iter().map(|&a| x[a]).collect();
        let roi = match given(roi_i) {
            Some(t) if self.coord == Coord::TfCropAndResize => {
                let r = t.to_f64_vec();
                if r.len() != 2 * k {
                    return Err(format!(
                        "{op}: roi has {} values; {} expected",
                        r.len(),
                        2 * k
                    ));
                }
                r
            }
            None if self.coord == Coord::TfCropAndResize => {
                return Err(format!("{op}: tf_crop_and_resize needs the roi input"))
            }
            _ => [vec![0.0; k], vec![1.0; k]].concat(),
        };
        let count = |n: usize, what: &str| {
            if n == k {
                Ok(())
            } else {
                Err(format!(
                    "{op}: {what} has {n} values; {k} expected (one per resized axis)"
                ))
            }
        };
        let (outs, scales): (Vec<usize>, Vec<f64>) = match (scales, sizes) {
            (Some(_), Some(_)) => return Err(format!("{op}: give scales or sizes, not both")),
            (None, None) => return Err(format!("{op}: one of scales and sizes is required")),
            (Some(sc), None) => {
                count(sc.len(), "scales")?;
                let up = op == "Upsample";
                if let Some(bad) = sc
                    .iter()
                    .find(|&&s| !(s.is_finite() && s > 0.0 && (s >= 1.0 || !up)))
                {
                    let want = if up { ">= 1" } else { "positive" };
                    return Err(format!("{op}: scale {bad} must be finite and {want}"));
                }
                let outs = ins
                    .iter()
                    .zip(&sc)
                    .map(|(&d, &s)| out_len(op, (d as f64 * s).floor()));
                (outs.collect::<Result<_, _>>()?, sc)
            }
            (None, Some(sz)) => {
                count(sz.len(), "sizes")?;
                if let Some(bad) = sz.iter().find(|&&s| s < 0) {
                    return Err(format!("{op}: negative size {bad}"));
                }
                if self.policy == Policy::Stretch {
                    let outs: Vec<usize> = sz.iter().map(|&s| s as usize).collect();
                    let sc =
                        outs.iter()
                            .zip(&ins)
                            .map(|(&o, &d)| if d == 0 { 1.0 } else { o as f64 / d as f64 });
                    let sc = sc.collect();
                    (outs, sc)
                } else {
                    let (outs, s) = self.aspect(&ins, &sz)?;
                    (outs, vec![s; k])
                }
            }
        };
        let mut dims = x.to_vec();
        let mut plans = Vec::with_capacity(k);
        for (i, &axis) in axes.iter().enumerate() {
            let (out, scale, r) = (outs[i], scales[i], (roi[i], roi[i + k]));
            if x[axis] == 0 && out > 0 {
                return Err(format!(
                    "{op}: axis {axis} is empty but its output size is {out}"
                ));
            }
            dims[axis] = out;
            let same = (scale - 1.0).abs() <= 1e-9 && out == x[axis];
            let whole = self.coord != Coord::TfCropAndResize
                || (r.0.abs() <= 1e-9 && (r.1 - 1.0).abs() <= 1e-9);
            if !(same && whole) {
                plans.push(AxisPlan {
                    axis,
                    out,
                    scale,
                    roi: r,
                });
            }
        }
        // Shrinking axes first: no intermediate is larger than both the input and the output.
        crate::ops::common::sort_by_dyn(&mut plans, &|a, b| {
            (a.out as f64 / x[a.axis] as f64).total_cmp(&(b.out as f64 / x[b.axis] as f64))
        });
        Ok((plans, dims))
    }

    /// Runs the passes on `a`: nearest gathers `T` directly; linear and cubic interpolate in
    /// `T::Acc` (float32 for float32 data, float64 otherwise).
    fn run<T: Elem>(
        &self,
        ctx: &KernelCtx,
        a: &ArrayD<T>,
        plans: &[AxisPlan],
        out_dims: &[usize],
    ) -> Result<ArrayD<T>, String> {
        let mut dims = a.shape().to_vec();
        if out_dims.contains(&0) {
            return ArrayD::from_shape_vec(IxDyn(out_dims), vec![]).map_err(|e| e.to_string());
        }
        let fill = if self.coord == Coord::TfCropAndResize {
            self.extrapolation
        } else {
            0.0
        };
        // Each intermediate (of `bytes`-sized elements) is checked before it is allocated.
        let next = |dims: &[usize], p: &AxisPlan, bytes: usize| {
            let mut d = dims.to_vec();
            d[p.axis] = p.out;
            check_out(ctx, self.name, &d, 8 * bytes as u64).map(|_| d)
        };
        let data: Vec<T> = if self.mode == Mode::Nearest {
            let mut data: Vec<T> = a.iter().copied().collect();
            for p in plans {
                let map = self.nearest_map(p, dims[p.axis]);
                let d = next(&dims, p, size_of::<T>())?;
                data = gather_axis(&data, &dims, p.axis, &map, &T::of_f64(fill));
                dims = d;
            }
            data
        } else if T::NUMBER {
            let mut data: Vec<T::Acc> = a.iter().map(|&v| T::Acc::of_f64(v.to_f64())).collect();
            for p in plans {
                let d = next(&dims, p, size_of::<T::Acc>())?;
                let taps = self.taps(ctx, p, dims[p.axis])?;
                data = interp_axis(&data, &dims, p.axis, &taps, T::Acc::of_f64(fill));
                dims = d;
            }
            data.into_iter().map(|v| T::of_f64(v.to_f64())).collect()
        } else {
            return Err(format!(
                "{}: mode {:?} needs numbers, not bool",
                self.name, self.mode
            ));
        };
        ArrayD::from_shape_vec(IxDyn(&dims), data).map_err(|e| e.to_string())
    }
}

/// Resize (10 to 19) and Upsample (7, 9): see the table above.
pub fn resize(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let r = ctx.attrs::<Resize>()?;
    let x = input(r.name, inputs, 0)?;
    let (plans, out_dims) = r.plan(x.shape(), inputs)?;
    check_out(ctx, r.name, &out_dims, bits(x.dtype()))?;
    Ok(vec![
        each_elem!(r.name, x, a => r.run(ctx, a, &plans, &out_dims)),
    ])
}

#[cfg(test)]
#[path = "resize_tests.rs"]
mod tests;
