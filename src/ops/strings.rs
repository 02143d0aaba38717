//! ai.onnx string ops, and the broadcasting helpers the other families use for string inputs
//! (Equal, Where). Strings are `Tensor::Str` (UTF-8 text).
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | StringConcat | 20- | none | X, Y: string (broadcast) -> X + Y elementwise |
//! | StringNormalizer | 10- | `case_change_action` ("NONE"; "LOWER", "UPPER"), `is_case_sensitive` (0), `locale` (""), `stopwords` (none) | X: string [C] or [1, C] -> Y: string [C'] or [1, C'] |
//! | StringSplit | 20- | `delimiter` (absent or "": runs of whitespace), `maxsplit` (absent: no limit) | X: string -> Y: string [X's dims, most parts], Z: int64 X's dims |
//!
//! StringNormalizer drops the elements equal to a stopword (compared case-insensitively unless
//! `is_case_sensitive`), then changes case (Unicode's default case mapping); if nothing is left
//! the output is one empty string ([1] or [1, 1]). Its `locale` may be empty or an English or
//! "C"/"POSIX" locale (the default case mapping is theirs); any other locale is refused at
//! parse, naming it. StringSplit follows Python's `str.split`: with a delimiter, every
//! occurrence splits (empty parts kept); without one, runs of whitespace split and leading and
//! trailing whitespace make no parts. `maxsplit` caps the splits from the left (the rest stays
//! one part); a negative value is no limit. Rows with fewer parts are padded with "".

use ndarray::{ArrayD, IxDyn, Zip};

use super::broadcast::broadcast_shape;
use super::common::{bits, check_out, input};
use super::infer::broadcast_inputs;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

/// `f` applied to `a` and `b` broadcast together (numpy rules), any element types; the output
/// is checked against the limits before it is allocated.
pub fn zip2<A, B, O: Clone>(
    ctx: &KernelCtx,
    op: &str,
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    out_bits: u64,
    f: impl Fn(&A, &B) -> O,
) -> Result<ArrayD<O>, String> {
    let shape = broadcast_shape(op, a.shape(), b.shape())?;
    check_out(ctx, op, &shape, out_bits)?;
    let ix = IxDyn(&shape);
    let cant = || {
        format!(
            "{op}: shapes {:?} and {:?} do not broadcast",
            a.shape(),
            b.shape()
        )
    };
    let (av, bv) = (
        a.broadcast(ix.clone()).ok_or_else(cant)?,
        b.broadcast(ix).ok_or_else(cant)?,
    );
    Ok(Zip::from(&av).and(&bv).map_collect(f))
}

/// Where for strings: `x` where `c` holds, else `y`, all three broadcast together.
pub fn select_strings(
    ctx: &KernelCtx,
    op: &str,
    c: &ArrayD<bool>,
    x: &ArrayD<String>,
    y: &ArrayD<String>,
) -> Result<ArrayD<String>, String> {
    let shape = broadcast_shape(op, c.shape(), x.shape())
        .and_then(|s| broadcast_shape(op, &s, y.shape()))?;
    check_out(ctx, op, &shape, bits(DType::STRING))?;
    let ix = IxDyn(&shape);
    let cant = || format!("{op}: shapes do not broadcast to {shape:?}");
    let cv = c.broadcast(ix.clone()).ok_or_else(cant)?;
    let xv = x.broadcast(ix.clone()).ok_or_else(cant)?;
    let yv = y.broadcast(ix).ok_or_else(cant)?;
    Ok(Zip::from(&cv)
        .and(&xv)
        .and(&yv)
        .map_collect(|&c, x, y| if c { x.clone() } else { y.clone() }))
}

fn strings<'a>(op: &str, t: &'a Tensor) -> Result<&'a ArrayD<String>, String> {
    match t {
        Tensor::Str(a) => Ok(a),
        t => Err(format!("{op}: input must be string, got {}", t.dtype())),
    }
}

super::plain_ops!(StringConcat);

impl Op for StringConcat {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: Some(DType::STRING),
            shape: broadcast_inputs(cx, 2),
        }]
    }
    fn kernel(&self) -> Kernel {
        string_concat
    }
}

pub fn string_concat(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "StringConcat";
    let a = strings(OP, input(OP, inputs, 0)?)?;
    let b = strings(OP, input(OP, inputs, 1)?)?;
    let out = zip2(ctx, OP, a, b, bits(DType::STRING), |x, y| {
        let mut s = String::with_capacity(x.len() + y.len());
        s.push_str(x);
        s.push_str(y);
        s
    })?;
    Ok(vec![Tensor::Str(out)])
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CaseChange {
    None,
    Lower,
    Upper,
}

#[derive(Debug)]
pub struct StringNormalizer {
    pub case_change: CaseChange,
    pub case_sensitive: bool,
    pub stopwords: Vec<String>,
}

/// Locales whose case mapping is Unicode's default one (the one `str::to_lowercase` applies).
fn default_case_locale(l: &str) -> bool {
    let base = l.split(['.', '@']).next().unwrap_or("");
    l.is_empty()
        || matches!(base, "C" | "POSIX" | "en")
        || base.starts_with("en_")
        || base.starts_with("en-")
}

impl StringNormalizer {
    pub fn parse(a: &Attrs) -> P {
        let action = a
            .string("case_change_action")?
            .unwrap_or_else(|| "NONE".into());
        let case_change = match action.as_str() {
            "NONE" => CaseChange::None,
            "LOWER" => CaseChange::Lower,
            "UPPER" => CaseChange::Upper,
            other => {
                return Err(format!(
                    "attribute 'case_change_action' is {other:?}, not NONE, LOWER or UPPER"
                ))
            }
        };
        let locale = a.string("locale")?.unwrap_or_default();
        if !default_case_locale(&locale) {
            return Err(format!(
                "attribute 'locale' {locale:?} is not supported (only English, C and POSIX \
                 locales, whose case mapping is Unicode's default)"
            ));
        }
        Ok(Box::new(StringNormalizer {
            case_change,
            case_sensitive: a.flag("is_case_sensitive", false)?,
            stopwords: a.strings("stopwords")?.unwrap_or_default(),
        }))
    }
}

impl Op for StringNormalizer {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        // The kept count depends on the data unless there are no stopwords (and some element:
        // an empty input gives one empty string).
        let keeps_all = |s: &[Dim]| {
            self.stopwords.is_empty() && matches!(s.last(), Some(Dim::Known(c)) if *c > 0)
        };
        let shape = cx.input(0).shape.and_then(|s| match s.len() {
            1 | 2 if keeps_all(&s) => Some(s),
            1 => Some(vec![Dim::Unknown]),
            2 => Some(vec![Dim::Known(1), Dim::Unknown]),
            _ => None,
        });
        vec![TensorType {
            dtype: Some(DType::STRING),
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        string_normalizer
    }
}

pub fn string_normalizer(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "StringNormalizer";
    let x = strings(OP, input(OP, inputs, 0)?)?;
    let at = ctx.attrs::<StringNormalizer>()?;
    let two_d = match x.shape() {
        [_] => false,
        [1, _] => true,
        s => {
            return Err(format!(
                "{OP}: input must be [C] or [1, C], got shape {s:?}"
            ))
        }
    };
    let stops: Vec<String> = if at.case_sensitive {
        at.stopwords.clone()
    } else {
        at.stopwords.iter().map(|w| w.to_lowercase()).collect()
    };
    let is_stop = |s: &String| {
        if at.case_sensitive {
            stops.contains(s)
        } else {
            stops.contains(&s.to_lowercase())
        }
    };
    let mut kept: Vec<String> = x
        .iter()
        .filter(|s| stops.is_empty() || !is_stop(s))
        .map(|s| match at.case_change {
            CaseChange::None => s.clone(),
            CaseChange::Lower => s.to_lowercase(),
            CaseChange::Upper => s.to_uppercase(),
        })
        .collect();
    if kept.is_empty() {
        kept.push(String::new());
    }
    let n = kept.len();
    let shape: &[usize] = if two_d { &[1, n] } else { &[n] };
    let out = ArrayD::from_shape_vec(IxDyn(shape), kept).map_err(|e| format!("{OP}: {e}"))?;
    Ok(vec![Tensor::Str(out)])
}

#[derive(Debug)]
pub struct StringSplit {
    /// `None`: runs of whitespace.
    pub delimiter: Option<String>,
    /// `None`: no limit.
    pub maxsplit: Option<usize>,
}

impl StringSplit {
    pub fn parse(a: &Attrs) -> P {
        let delimiter = a.string("delimiter")?.filter(|d| !d.is_empty());
        let maxsplit = a.opt_int("maxsplit")?.and_then(|m| usize::try_from(m).ok());
        Ok(Box::new(StringSplit {
            delimiter,
            maxsplit,
        }))
    }
}

impl Op for StringSplit {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0).shape;
        let parts = x.clone().map(|mut s| {
            s.push(Dim::Unknown);
            s
        });
        vec![
            TensorType {
                dtype: Some(DType::STRING),
                shape: parts,
            },
            TensorType {
                dtype: Some(DType::I64),
                shape: x,
            },
        ]
    }
    fn kernel(&self) -> Kernel {
        string_split
    }
}

/// Python's `s.split(None, maxsplit)`: runs of whitespace separate parts; leading whitespace
/// makes none; after `maxsplit` splits the rest (leading whitespace dropped) is one part.
fn split_whitespace(s: &str, maxsplit: Option<usize>) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        if maxsplit.is_some_and(|m| out.len() >= m) {
            out.push(rest);
            break;
        }
        match rest.find(char::is_whitespace) {
            Some(end) => {
                out.push(&rest[..end]);
                rest = rest[end..].trim_start();
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

fn split_one<'a>(s: &'a str, delimiter: Option<&str>, maxsplit: Option<usize>) -> Vec<&'a str> {
    match (delimiter, maxsplit) {
        (None, m) => split_whitespace(s, m),
        (Some(d), None) => s.split(d).collect(),
        (Some(d), Some(m)) => s.splitn(m.saturating_add(1), d).collect(),
    }
}

pub fn string_split(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "StringSplit";
    let x = strings(OP, input(OP, inputs, 0)?)?;
    let at = ctx.attrs::<StringSplit>()?;
    let parts: Vec<Vec<&str>> = x
        .iter()
        .map(|s| split_one(s, at.delimiter.as_deref(), at.maxsplit))
        .collect();
    let most = parts.iter().map(Vec::len).max().unwrap_or(0);
    let mut shape = x.shape().to_vec();
    shape.push(most);
    check_out(ctx, OP, &shape, bits(DType::STRING))?;
    let mut flat = Vec::with_capacity(x.len() * most);
    for p in &parts {
        flat.extend(p.iter().map(|s| s.to_string()));
        flat.extend(std::iter::repeat_n(String::new(), most - p.len()));
    }
    let y = ArrayD::from_shape_vec(IxDyn(&shape), flat).map_err(|e| format!("{OP}: {e}"))?;
    let counts: Vec<i64> = parts.iter().map(|p| p.len() as i64).collect();
    let z = ArrayD::from_shape_vec(x.raw_dim(), counts).map_err(|e| format!("{OP}: {e}"))?;
    Ok(vec![Tensor::Str(y), Tensor::I64(z)])
}

#[cfg(test)]
#[path = "strings_tests.rs"]
mod tests;
