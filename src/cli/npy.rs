//! .npy files in and out (ndarray-npy), for every element type the reference backend holds.

use std::path::Path;

use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

use crate::tensor::Tensor;
use crate::{Error, Result};

/// `with_tensor!` over the types ndarray-npy writes (all but the half types).
macro_rules! with_npy {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            Tensor::F32($a) => $body,
            Tensor::F64($a) => $body,
            Tensor::I32($a) => $body,
            Tensor::I64($a) => $body,
            Tensor::Bool($a) => $body,
            Tensor::I8($a) => $body,
            Tensor::U8($a) => $body,
            Tensor::I16($a) => $body,
            Tensor::U16($a) => $body,
            Tensor::U32($a) => $body,
            Tensor::U64($a) => $body,
            Tensor::F16(_) | Tensor::BF16(_) => unreachable!("written above"),
        }
    };
}

/// Reads a .npy of any element type the backend holds: float16/32/64, signed and unsigned
/// integers of 8 to 64 bits, bool. (numpy has no bfloat16; give such inputs as float32 and Cast.)
pub fn read(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path.display(), e))?;
    let fail = |e: String| Error::Other(format!("{}: {e}", path.display()));
    let descr =
        descr(&bytes).ok_or_else(|| fail("not a .npy file (no 'descr' in its header)".into()))?;
    macro_rules! arr {
        ($t:ty, $v:ident) => {
            Tensor::$v(ArrayD::<$t>::read_npy(&bytes[..]).map_err(|e| fail(e.to_string()))?)
        };
    }
    Ok(match descr.as_str() {
        "<f4" => arr!(f32, F32),
        "<f8" => arr!(f64, F64),
        "<i4" => arr!(i32, I32),
        "<i8" => arr!(i64, I64),
        "|b1" => arr!(bool, Bool),
        "|i1" => arr!(i8, I8),
        "|u1" => arr!(u8, U8),
        "<i2" => arr!(i16, I16),
        "<u2" => arr!(u16, U16),
        "<u4" => arr!(u32, U32),
        "<u8" => arr!(u64, U64),
        // ndarray-npy has no float16: read the bits as uint16 (same width and byte order).
        "<f2" => {
            let patched = patch_descr(&bytes, "<f2", "<u2");
            let bits = ArrayD::<u16>::read_npy(&patched[..]).map_err(|e| fail(e.to_string()))?;
            Tensor::F16(bits.mapv(half::f16::from_bits))
        }
        other => {
            return Err(fail(format!(
                "element type '{other}' is not one of float16/32/64, (u)int8/16/32/64 or bool \
                 (little-endian)"
            )))
        }
    })
}

/// The `descr` of a .npy header (`'<f4'`, `'|b1'`, ...).
fn descr(bytes: &[u8]) -> Option<String> {
    let head = std::str::from_utf8(bytes.get(..bytes.len().min(4096))?)
        .ok()
        .or_else(|| {
            // The data after the header need not be UTF-8: cut at the header's newline.
            let end = bytes.iter().position(|&b| b == b'\n')?;
            std::str::from_utf8(&bytes[..end]).ok()
        })?;
    let rest = &head[head.find("'descr'")? + "'descr'".len()..];
    let open = rest.find('\'')? + 1;
    let len = rest[open..].find('\'')?;
    Some(rest[open..open + len].to_string())
}

fn patch_descr(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let end = bytes.iter().position(|&b| b == b'\n').unwrap_or(0);
    let needle = format!("'{from}'");
    if let Some(at) = bytes[..end]
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
    {
        out[at..at + needle.len()].copy_from_slice(format!("'{to}'").as_bytes());
    }
    out
}

/// Writes a tensor as .npy; float16 as numpy's float16, bfloat16 (which numpy lacks) widened
/// exactly to float32.
pub fn write(path: &Path, t: &Tensor) -> Result<()> {
    let err = |e: ndarray_npy::WriteNpyError| Error::Other(format!("{}: {e}", path.display()));
    let bytes = match t {
        Tensor::F16(a) => {
            let mut buf = Vec::new();
            a.mapv(|v| v.to_bits()).write_npy(&mut buf).map_err(err)?;
            patch_descr(&buf, "<u2", "<f2")
        }
        Tensor::BF16(a) => {
            let mut buf = Vec::new();
            a.mapv(f32::from).write_npy(&mut buf).map_err(err)?;
            buf
        }
        t => {
            let mut buf = Vec::new();
            with_npy!(t, a => a.write_npy(&mut buf)).map_err(err)?;
            buf
        }
    };
    std::fs::write(path, bytes).map_err(|e| Error::io(path.display(), e))
}

/// An output name made safe as a file name (exporters use '/', ':' and '.').
pub fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
