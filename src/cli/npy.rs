//! .npy files in and out (ndarray-npy), for every element type the reference backend holds.

use std::path::Path;

use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

use crate::tensor::Tensor;
use crate::{Error, Result};

mod unicode;

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
            // numpy has no 4-bit types: int4 as int8, uint4 as uint8 (exact).
            Tensor::I4($a) => $body,
            Tensor::U4($a) => $body,
            Tensor::F16(_) | Tensor::BF16(_) | Tensor::Str(_) => unreachable!("written above"),
        }
    };
}

/// Reads a .npy of any element type the backend holds: float16/32/64, signed and unsigned
/// integers of 8 to 64 bits, bool, and strings as numpy's fixed-width unicode ('<U', as
/// `np.array(x, dtype=str)` saves them). (numpy has no bfloat16; give such inputs as float32
/// and Cast. Object arrays are pickles and are refused.)
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
        d if d.starts_with("<U") => Tensor::Str(unicode::read(&bytes, d).map_err(fail)?),
        "|O" => {
            return Err(fail(
                "an object array (pickled) is not read; save strings as numpy's unicode type \
                 ('<U': np.array(values, dtype=str))"
                    .into(),
            ))
        }
        other => {
            return Err(fail(format!(
                "element type '{other}' is not one of float16/32/64, (u)int8/16/32/64, bool or \
                 unicode '<U' (little-endian)"
            )))
        }
    })
}

/// The `descr` of a .npy header (`'<f4'`, `'|b1'`, ...).
fn descr(bytes: &[u8]) -> Option<String> {
    // The header ends at its first newline; the magic string before it is not UTF-8.
    let end = bytes.iter().take(1 << 16).position(|&b| b == b'\n')?;
    let head = String::from_utf8_lossy(&bytes[..end]);
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
        Tensor::Str(a) => unicode::write(a),
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

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    fn arr<T: Clone>(v: &[T]) -> ArrayD<T> {
        ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap()
    }

    #[test]
    fn every_held_type_round_trips_and_the_header_names_it() {
        let dir = std::env::temp_dir().join(format!("fuselab-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            (Tensor::F32(arr(&[1.5, -2.0])), "<f4"),
            (Tensor::F64(arr(&[1e300])), "<f8"),
            (Tensor::I32(arr(&[i32::MIN])), "<i4"),
            (Tensor::I64(arr(&[i64::MAX])), "<i8"),
            (Tensor::Bool(arr(&[true, false])), "|b1"),
            (Tensor::I8(arr(&[-128i8])), "|i1"),
            (Tensor::U8(arr(&[255u8])), "|u1"),
            (Tensor::I16(arr(&[-300i16])), "<i2"),
            (Tensor::U16(arr(&[65535u16])), "<u2"),
            (Tensor::U32(arr(&[u32::MAX])), "<u4"),
            (Tensor::U64(arr(&[u64::MAX])), "<u8"),
            (
                Tensor::F16(arr(&[half::f16::from_f32(0.1), half::f16::NAN])),
                "<f2",
            ),
        ];
        for (i, (t, want)) in cases.iter().enumerate() {
            let p = dir.join(format!("{i}.npy"));
            write(&p, t).unwrap();
            let bytes = std::fs::read(&p).unwrap();
            assert_eq!(descr(&bytes).as_deref(), Some(*want));
            let back = read(&p).unwrap();
            assert_eq!(back.dtype(), t.dtype());
            assert_eq!(back.to_f64_vec().len(), t.len());
            let same = back
                .to_f64_vec()
                .iter()
                .zip(t.to_f64_vec())
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            assert!(same, "{want}: {back:?} != {t:?}");
        }
        // bfloat16 has no numpy type: written as its exact float32 values.
        let p = dir.join("bf16.npy");
        write(&p, &Tensor::BF16(arr(&[half::bf16::from_f32(3.0)]))).unwrap();
        assert_eq!(read(&p).unwrap(), Tensor::F32(arr(&[3.0])));
        // Not a .npy at all: named.
        std::fs::write(&p, b"hello").unwrap();
        assert!(read(&p)
            .unwrap_err()
            .to_string()
            .contains("not a .npy file"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn strings_are_numpy_unicode_and_object_arrays_are_refused() {
        let dir = std::env::temp_dir().join(format!("fuselab-npy-str-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.npy");
        let words: Vec<String> = ["a", "", "的的", "tab\t"].map(String::from).to_vec();
        let t = Tensor::Str(ArrayD::from_shape_vec(IxDyn(&[2, 2]), words).unwrap());
        write(&p, &t).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(descr(&bytes).as_deref(), Some("<U4"));
        // Header padded to a multiple of 64 bytes; 4 elements of 4 UTF-32 code units after it.
        assert_eq!(bytes.len(), 128 + 4 * 4 * 4);
        assert_eq!(read(&p).unwrap(), t);
        // A fortran-order '<U2' of shape (2, 2), as numpy writes np.asfortranarray(x):
        // column-major data "ab", "c", "d", "" is [["ab", "d"], ["c", ""]].
        let mut f = b"\x93NUMPY\x01\x00".to_vec();
        let mut head = "{'descr': '<U2', 'fortran_order': True, 'shape': (2, 2), }".to_string();
        while !(10 + head.len() + 1).is_multiple_of(64) {
            head.push(' ');
        }
        head.push('\n');
        f.extend_from_slice(&(head.len() as u16).to_le_bytes());
        f.extend_from_slice(head.as_bytes());
        for c in ['a', 'b', 'c', '\0', 'd', '\0', '\0', '\0'] {
            f.extend_from_slice(&(c as u32).to_le_bytes());
        }
        std::fs::write(&p, &f).unwrap();
        let want = ["ab", "d", "c", ""].map(String::from).to_vec();
        let want = ArrayD::from_shape_vec(IxDyn(&[2, 2]), want).unwrap();
        assert_eq!(read(&p).unwrap(), Tensor::Str(want));
        // Truncated data: named, not a panic.
        std::fs::write(&p, &f[..f.len() - 3]).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains("data bytes, but shape [2, 2] of '<U2' needs 32"),
            "{e}"
        );
        // An object array: refused with the fix.
        let at = f.windows(5).position(|w| w == b"'<U2'").unwrap();
        f[at..at + 5].copy_from_slice(b"'|O' ");
        std::fs::write(&p, &f).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("object array (pickled) is not read"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
