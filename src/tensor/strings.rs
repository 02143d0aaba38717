//! Cast to and from strings (ONNX Cast's string rules).
//!
//! Numbers become text as numpy's `astype(str)` writes them (the ONNX reference's Cast):
//! integers in decimal, bools "True"/"False", floats in the shortest digits that read back to
//! the same value of their type, positional between 1e-4 and a per-type bound ("0.1", "-2.0";
//! float16 below 1e3, float32 1e6, float64 1e16) and scientific outside it ("1e-05",
//! "1.5e+20"), the special values "inf", "-inf", "nan" (which read back, as the spec's "INF"
//! and "NaN" do). The spec asks only for a plain representation. Strings become numbers by parsing: surrounding whitespace is ignored, plain and
//! scientific forms are accepted ("3.14", "1e-5", "1E8"), and "INF", "+INF", "-INF", "NaN" in
//! any case (also "infinity"). A string that is no number is an error naming it (the spec leaves
//! it undefined). Integer targets read integers exactly and floats ("100.5") truncated toward
//! zero; bool targets read a number's `!= 0`, or "true"/"false" in any case.

use ndarray::ArrayD;

use super::{DType, Tensor};

/// numpy's text for a float (`astype(str)`, which the ONNX reference's Cast uses): the
/// shortest digits that read back to the same value of the type, positional when
/// 1e-4 <= |v| < `cutoff` (or v is 0) and at least one decimal ("2.0"), otherwise scientific
/// with a signed exponent of two or more digits ("1e-05", "1.5e+20"); "inf", "-inf", "nan".
/// `sci` is the shortest digits in Rust's `{:e}` form ("1.5e20").
fn float_text(v: f64, cutoff: f64, sci: &str) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let a = v.abs();
    if a == 0.0 || (1e-4..cutoff).contains(&a) {
        let body = if exp >= 0 {
            let int_len = exp as usize + 1;
            let mut int = digits.chars().take(int_len).collect::<String>();
            while int.len() < int_len {
                int.push('0');
            }
            let frac: String = digits.chars().skip(int_len).collect();
            let frac = if frac.is_empty() {
                "0".to_string()
            } else {
                frac
            };
            format!("{int}.{frac}")
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let dot = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{dot}e{esign}{:02}", exp.unsigned_abs())
    }
}

/// The shortest `{:e}` digits of a half-type value `v` (exactly `f`) that read back to it.
fn half_sci(f: f32, back: impl Fn(f32) -> f32) -> String {
    (0..9)
        .map(|p| format!("{:.*e}", p, f))
        .find(|s| s.parse::<f32>().is_ok_and(|r| back(r) == f))
        .unwrap_or_else(|| format!("{f:e}"))
}

/// Each element as text (see the module documentation).
pub(super) fn to_strings(t: &Tensor) -> ArrayD<String> {
    use half::{bf16, f16};
    match t {
        Tensor::F32(a) => a.map(|&v| float_text(v.into(), 1e6, &format!("{v:e}"))),
        Tensor::F64(a) => a.map(|&v| float_text(v, 1e16, &format!("{v:e}"))),
        Tensor::F16(a) => a.map(|&v| {
            let f = f32::from(v);
            let sci = half_sci(f, |r| f16::from_f32(r).to_f32());
            float_text(f.into(), 1e3, &sci)
        }),
        Tensor::BF16(a) => a.map(|&v| {
            let f = f32::from(v);
            let sci = half_sci(f, |r| bf16::from_f32(r).to_f32());
            float_text(f.into(), 1e3, &sci)
        }),
        Tensor::Bool(a) => a.map(|&v| if v { "True" } else { "False" }.to_string()),
        Tensor::I32(a) => a.map(|v| v.to_string()),
        Tensor::I64(a) => a.map(|v| v.to_string()),
        Tensor::I8(a) => a.map(|v| v.to_string()),
        Tensor::U8(a) => a.map(|v| v.to_string()),
        Tensor::I16(a) => a.map(|v| v.to_string()),
        Tensor::U16(a) => a.map(|v| v.to_string()),
        Tensor::U32(a) => a.map(|v| v.to_string()),
        Tensor::U64(a) => a.map(|v| v.to_string()),
        Tensor::I4(a) => a.map(|v| v.to_string()),
        Tensor::U4(a) => a.map(|v| v.to_string()),
        Tensor::Str(a) => a.clone(),
    }
}

fn parse_float(s: &str) -> Result<f64, String> {
    let t = s.trim();
    // Rust's parser takes "inf", "+infinity", "NaN" in any case, and plain and scientific forms.
    t.parse::<f64>()
        .map_err(|_| format!("Cast: string {s:?} is not a number"))
}

/// Strings read as numbers and cast to `to` (see the module documentation).
fn from_strings(a: &ArrayD<String>, to: DType) -> Result<Tensor, String> {
    if to == DType::BOOL {
        let mut out = Vec::with_capacity(a.len());
        for s in a.iter() {
            let t = s.trim();
            out.push(if t.eq_ignore_ascii_case("true") {
                true
            } else if t.eq_ignore_ascii_case("false") {
                false
            } else {
                parse_float(s)? != 0.0
            });
        }
        return Ok(Tensor::Bool(
            ArrayD::from_shape_vec(a.raw_dim(), out).map_err(|e| e.to_string())?,
        ));
    }
    let integer = !to.is_float();
    // Integer targets: exact when every string is an integer of int64 (or, for uint64, of
    // uint64); otherwise through float64, which the numeric Cast then truncates.
    if integer {
        if let Ok(v) = a.iter().map(|s| s.trim().parse::<i64>()).collect() {
            let wide =
                Tensor::I64(ArrayD::from_shape_vec(a.raw_dim(), v).map_err(|e| e.to_string())?);
            return wide.cast(to).ok_or_else(|| unheld(to));
        }
        if to == DType::U64 {
            if let Ok(v) = a.iter().map(|s| s.trim().parse::<u64>()).collect() {
                return Ok(Tensor::U64(
                    ArrayD::from_shape_vec(a.raw_dim(), v).map_err(|e| e.to_string())?,
                ));
            }
        }
    }
    let v = a
        .iter()
        .map(|s| parse_float(s))
        .collect::<Result<Vec<f64>, String>>()?;
    let wide = Tensor::F64(ArrayD::from_shape_vec(a.raw_dim(), v).map_err(|e| e.to_string())?);
    wide.cast(to).ok_or_else(|| unheld(to))
}

fn unheld(to: DType) -> String {
    format!("Cast: target type {to} is not supported by the reference backend")
}

/// Cast where the source or the target is a string.
pub(super) fn cast(t: &Tensor, to: DType) -> Result<Tensor, String> {
    match t {
        Tensor::Str(a) if to != DType::STRING => from_strings(a, to),
        t if to == DType::STRING => Ok(Tensor::Str(to_strings(t))),
        _ => Err(unheld(to)),
    }
}
