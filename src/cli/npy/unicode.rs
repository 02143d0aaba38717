//! numpy's fixed-width unicode arrays ('<U<n>': n UTF-32LE code points per element, padded
//! with NULs), which ndarray-npy does not read: header parsed here, sizes checked first.

use ndarray::{ArrayD, IxDyn, ShapeBuilder};

/// The header text and where the data starts.
fn header(bytes: &[u8]) -> Result<(&str, usize), String> {
    let bad = || "not a .npy file (bad magic or header length)".to_string();
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad());
    }
    let (len, start): (usize, usize) = if bytes[6] == 1 {
        (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
    } else {
        let b = bytes.get(8..12).ok_or_else(bad)?;
        (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
    };
    let end = start.checked_add(len).ok_or_else(bad)?;
    let text = bytes.get(start..end).ok_or_else(bad)?;
    let text = std::str::from_utf8(text).map_err(|_| "the .npy header is not text".to_string())?;
    Ok((text, end))
}

/// The `'shape': (a, b, ...)` entry of a header.
fn shape(head: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("cannot read the shape in the .npy header {head:?}");
    let rest = &head[head.find("'shape'").ok_or_else(bad)?..];
    let open = rest.find('(').ok_or_else(bad)? + 1;
    let close = rest.find(')').ok_or_else(bad)?;
    rest.get(open..close)
        .ok_or_else(bad)?
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().map_err(|_| bad()))
        .collect()
}

/// Reads a '<U<n>' array (`descr` is its type string).
pub(super) fn read(bytes: &[u8], descr: &str) -> Result<ArrayD<String>, String> {
    let width: usize = descr[2..]
        .parse()
        .map_err(|_| format!("bad unicode element type '{descr}'"))?;
    if width == 0 {
        // numpy writes '' as '<U1'; a zero width would let any shape pass the size check.
        return Err(format!("unicode element type '{descr}' has no width"));
    }
    let (head, start) = header(bytes)?;
    let dims = shape(head)?;
    let fortran = head.contains("'fortran_order': True");
    let count = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or("the shape's element count overflows")?;
    let need = count
        .checked_mul(width)
        .and_then(|n| n.checked_mul(4))
        .ok_or("the data size overflows")?;
    let data = &bytes[start..];
    if data.len() != need {
        return Err(format!(
            "{} data bytes, but shape {dims:?} of '{descr}' needs {need}",
            data.len()
        ));
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let mut s = String::new();
        for c in data[i * width * 4..(i + 1) * width * 4].chunks_exact(4) {
            let code = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if code == 0 {
                break;
            }
            s.push(char::from_u32(code).ok_or_else(|| {
                format!("element {i} holds {code:#x}, which is not a unicode code point")
            })?);
        }
        out.push(s);
    }
    let shape = IxDyn(&dims);
    let arr = if fortran {
        ArrayD::from_shape_vec(shape.f(), out)
    } else {
        ArrayD::from_shape_vec(shape, out)
    };
    arr.map_err(|e| e.to_string())
}

/// A .npy (version 1.0) of '<U<n>', n the longest element's code points (at least 1).
pub(super) fn write(a: &ArrayD<String>) -> Vec<u8> {
    let width = a
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max(1);
    let dims: Vec<String> = a.shape().iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut head = format!("{{'descr': '<U{width}', 'fortran_order': False, 'shape': {shape}, }}");
    // The header (with its newline) ends on a multiple of 64 bytes after the 10-byte preamble.
    while !(10 + head.len() + 1).is_multiple_of(64) {
        head.push(' ');
    }
    head.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(head.len() as u16).to_le_bytes());
    out.extend_from_slice(head.as_bytes());
    for s in a.iter() {
        let mut n = 0;
        for c in s.chars() {
            out.extend_from_slice(&(c as u32).to_le_bytes());
            n += 1;
        }
        out.resize(out.len() + (width - n) * 4, 0);
    }
    out
}
