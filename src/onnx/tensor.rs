//! TensorProto <-> Tensor, and validation of stored tensor data against its declared dims.

use ndarray::{ArrayD, IxDyn};

use crate::limits::Limits;
use crate::onnx::proto::{data_type as dt, TensorProto, DATA_LOCATION_EXTERNAL};
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};
use half::{bf16, f16};

fn tensor_label(t: &TensorProto) -> String {
    if t.name.is_empty() {
        "tensor".to_string()
    } else {
        format!("tensor '{}'", t.name)
    }
}

/// Checks that a tensor's stored data agrees with its dims and type, and that its size is within
/// the limits. Call after external data has been inlined. Returns the element count.
pub fn validate(t: &TensorProto, limits: &Limits) -> Result<u64> {
    let what = tensor_label(t);
    let ty = DType(t.data_type);
    if t.data_location == DATA_LOCATION_EXTERNAL {
        return Err(Error::invalid(format!(
            "{what}: external data was not resolved"
        )));
    }
    if t.segment.is_some() {
        return Err(Error::invalid(format!(
            "{what}: segmented tensors are not supported"
        )));
    }
    if ty.0 == dt::STRING {
        let n = limits.check_dims(&what, &t.dims, 8)?;
        if t.string_data.len() as u64 != n {
            return Err(Error::invalid(format!(
                "{what}: {} strings for dims {:?} ({n} elements)",
                t.string_data.len(),
                t.dims
            )));
        }
        return Ok(n);
    }
    let bits = ty
        .bits()
        .ok_or_else(|| Error::invalid(format!("{what}: unknown data_type {}", t.data_type)))?;
    let n = limits.check_dims(&what, &t.dims, bits)?;
    if !t.raw_data.is_empty() {
        let want = (n * bits).div_ceil(8);
        if t.raw_data.len() as u64 != want {
            return Err(Error::invalid(format!(
                "{what}: raw_data has {} bytes but dims {:?} of {} need {want}",
                t.raw_data.len(),
                t.dims,
                ty
            )));
        }
        return Ok(n);
    }
    // Typed fields: sub-32-bit types are stored one per int32 (4-bit/2-bit types packed, per spec).
    let (have, per) = match ty.0 {
        dt::FLOAT => (t.float_data.len(), 1),
        dt::COMPLEX64 => (t.float_data.len(), 2),
        dt::DOUBLE => (t.double_data.len(), 1),
        dt::COMPLEX128 => (t.double_data.len(), 2),
        dt::INT64 => (t.int64_data.len(), 1),
        dt::UINT32 | dt::UINT64 => (t.uint64_data.len(), 1),
        _ => (t.int32_data.len(), 1),
    };
    let expected = match bits {
        4 => n.div_ceil(2),
        2 => n.div_ceil(4),
        _ => n * per,
    };
    // An empty typed field with n > 0 is legal only when the tensor really has no data: reject.
    if have as u64 != expected {
        return Err(Error::invalid(format!(
            "{what}: {have} stored values for dims {:?} of {ty} (expected {expected})",
            t.dims
        )));
    }
    Ok(n)
}

fn shape_of(t: &TensorProto) -> Vec<usize> {
    t.dims.iter().map(|&d| d as usize).collect()
}

fn from_raw<T, const W: usize>(raw: &[u8], f: fn([u8; W]) -> T) -> Vec<T> {
    raw.chunks_exact(W)
        .map(|c| f(c.try_into().expect("chunk width")))
        .collect()
}

/// An 8- or 16-bit type: from raw_data, or one value per int32_data entry (low bits kept).
fn small<T, const W: usize>(
    t: &TensorProto,
    shape: IxDyn,
    raw: fn([u8; W]) -> T,
    typed: fn(i32) -> T,
) -> Result<ArrayD<T>> {
    let v = if t.raw_data.is_empty() {
        t.int32_data.iter().map(|&v| typed(v)).collect()
    } else {
        from_raw(&t.raw_data, raw)
    };
    ArrayD::from_shape_vec(shape, v)
        .map_err(|e| Error::invalid(format!("{}: {e}", tensor_label(t))))
}

/// The first `n` 4-bit values of a packed tensor, each in the low bits of a byte.
fn nibbles(t: &TensorProto, n: usize) -> impl Iterator<Item = u8> + '_ {
    let bytes: Box<dyn Iterator<Item = u8>> = if t.raw_data.is_empty() {
        Box::new(t.int32_data.iter().map(|&v| v as u8))
    } else {
        Box::new(t.raw_data.iter().copied())
    };
    bytes.flat_map(|b| [b & 0xf, b >> 4]).take(n)
}

/// Packs 4-bit values two per byte, the first in the low nibble.
fn pack_nibbles(v: impl Iterator<Item = u8>) -> Vec<u8> {
    let v: Vec<u8> = v.map(|x| x & 0xf).collect();
    v.chunks(2)
        .map(|p| p[0] | p.get(1).map_or(0, |h| h << 4))
        .collect()
}

/// Decodes a TensorProto into a Tensor. Errors name the tensor and say why (for
/// example an element type the reference backend does not compute on). Raw bytes in a mapped
/// external data file have their pages given back once copied (`release_pages`): the
/// decoded tensor is what stays in memory, not both.
pub fn to_tensor(t: &TensorProto, limits: &Limits) -> Result<Tensor> {
    let decoded = decode(t, limits);
    super::release_pages(&t.raw_data);
    decoded
}

fn decode(t: &TensorProto, limits: &Limits) -> Result<Tensor> {
    let n = validate(t, limits)? as usize;
    let shape = IxDyn(&shape_of(t));
    let raw = !t.raw_data.is_empty();
    let build = |e: ndarray::ShapeError| Error::invalid(format!("{}: {e}", tensor_label(t)));
    Ok(match t.data_type {
        dt::FLOAT => {
            let v = if raw {
                from_raw(&t.raw_data, f32::from_le_bytes)
            } else {
                t.float_data.clone()
            };
            Tensor::F32(ArrayD::from_shape_vec(shape, v).map_err(build)?)
        }
        dt::DOUBLE => {
            let v = if raw {
                from_raw(&t.raw_data, f64::from_le_bytes)
            } else {
                t.double_data.clone()
            };
            Tensor::F64(ArrayD::from_shape_vec(shape, v).map_err(build)?)
        }
        dt::INT32 => {
            let v = if raw {
                from_raw(&t.raw_data, i32::from_le_bytes)
            } else {
                t.int32_data.clone()
            };
            Tensor::I32(ArrayD::from_shape_vec(shape, v).map_err(build)?)
        }
        dt::INT64 => {
            let v = if raw {
                from_raw(&t.raw_data, i64::from_le_bytes)
            } else {
                t.int64_data.clone()
            };
            Tensor::I64(ArrayD::from_shape_vec(shape, v).map_err(build)?)
        }
        dt::BOOL => {
            let v: Vec<bool> = if raw {
                t.raw_data.iter().map(|&b| b != 0).collect()
            } else {
                t.int32_data.iter().map(|&b| b != 0).collect()
            };
            Tensor::Bool(ArrayD::from_shape_vec(shape, v).map_err(build)?)
        }
        // Typed fields: 8- and 16-bit types one per int32 (float16/bfloat16 as their bits, per
        // onnx.proto), uint32 and uint64 one per uint64.
        dt::INT8 => Tensor::I8(small(t, shape, i8::from_le_bytes, |v| v as i8)?),
        dt::UINT8 => Tensor::U8(small(t, shape, u8::from_le_bytes, |v| v as u8)?),
        dt::INT16 => Tensor::I16(small(t, shape, i16::from_le_bytes, |v| v as i16)?),
        dt::UINT16 => Tensor::U16(small(t, shape, u16::from_le_bytes, |v| v as u16)?),
        dt::FLOAT16 => Tensor::F16(small(t, shape, f16::from_le_bytes, |v| {
            f16::from_bits(v as u16)
        })?),
        dt::BFLOAT16 => Tensor::BF16(small(t, shape, bf16::from_le_bytes, |v| {
            bf16::from_bits(v as u16)
        })?),
        dt::UINT32 => {
            let v = if raw {
                from_raw(&t.raw_data, u32::from_le_bytes)
            } else {
                t.uint64_data.iter().map(|&v| v as u32).collect()
            };
            Tensor::U32(ArrayD::from_shape_vec(shape, v).map_err(build)?)
        }
        dt::UINT64 => {
            let v = if raw {
                from_raw(&t.raw_data, u64::from_le_bytes)
            } else {
                t.uint64_data.clone()
            };
            Tensor::U64(ArrayD::from_shape_vec(shape, v).map_err(build)?)
        }
        // 4-bit types: two per byte, the first in the low nibble (raw_data, or one byte per
        // int32_data entry); int4 sign-extends its nibble.
        dt::INT4 => Tensor::I4(
            ArrayD::from_shape_vec(shape, nibbles(t, n).map(|v| (v << 4) as i8 >> 4).collect())
                .map_err(build)?,
        ),
        dt::UINT4 => {
            Tensor::U4(ArrayD::from_shape_vec(shape, nibbles(t, n).collect()).map_err(build)?)
        }
        // ONNX strings are byte strings; the backend holds UTF-8 text, so a value that is not
        // UTF-8 is refused, naming the tensor and the element.
        dt::STRING => {
            let mut v = Vec::with_capacity(t.string_data.len());
            for (i, b) in t.string_data.iter().enumerate() {
                let s = std::str::from_utf8(b).map_err(|e| {
                    Error::invalid(format!(
                        "{}: string {i} is not UTF-8 ({e}); the reference backend holds \
                         strings as UTF-8 text",
                        tensor_label(t)
                    ))
                })?;
                v.push(s.to_string());
            }
            Tensor::Str(ArrayD::from_shape_vec(shape, v).map_err(build)?)
        }
        other => {
            return Err(Error::invalid(format!(
                "{}: element type {} is stored but not held by the reference backend",
                tensor_label(t),
                DType(other)
            )))
        }
    })
}

/// The elements' little-endian bytes, in logical order, written into one allocation (a
/// contiguous array as one slice walk).
fn le_bytes<T: Copy, const N: usize>(a: &ndarray::ArrayD<T>, f: fn(T) -> [u8; N]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len() * N);
    match a.as_slice() {
        Some(s) => s.iter().for_each(|&v| out.extend_from_slice(&f(v))),
        None => a.iter().for_each(|&v| out.extend_from_slice(&f(v))),
    }
    out
}

/// Encodes a Tensor as a TensorProto with little-endian raw_data (strings: string_data, as
/// onnx.proto requires).
pub fn from_tensor(name: &str, t: &Tensor) -> TensorProto {
    let raw: Vec<u8> = match t {
        Tensor::Str(a) => {
            return TensorProto {
                name: name.to_string(),
                dims: t.shape().iter().map(|&d| d as i64).collect(),
                data_type: t.dtype().0,
                string_data: a.iter().map(|s| s.as_bytes().to_vec()).collect(),
                ..Default::default()
            }
        }
        Tensor::F32(a) => le_bytes(a, f32::to_le_bytes),
        Tensor::F64(a) => le_bytes(a, f64::to_le_bytes),
        Tensor::I32(a) => le_bytes(a, i32::to_le_bytes),
        Tensor::I64(a) => le_bytes(a, i64::to_le_bytes),
        Tensor::Bool(a) => a.iter().map(|&v| v as u8).collect(),
        Tensor::F16(a) => le_bytes(a, f16::to_le_bytes),
        Tensor::BF16(a) => le_bytes(a, bf16::to_le_bytes),
        Tensor::I8(a) => a.iter().map(|&v| v as u8).collect(),
        Tensor::U8(a) => a.iter().copied().collect(),
        Tensor::I16(a) => le_bytes(a, i16::to_le_bytes),
        Tensor::U16(a) => le_bytes(a, u16::to_le_bytes),
        Tensor::U32(a) => le_bytes(a, u32::to_le_bytes),
        Tensor::U64(a) => le_bytes(a, u64::to_le_bytes),
        Tensor::I4(a) => pack_nibbles(a.iter().map(|&v| v as u8)),
        Tensor::U4(a) => pack_nibbles(a.iter().copied()),
    };
    TensorProto {
        name: name.to_string(),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: t.dtype().0,
        raw_data: raw.into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bit_values_pack_two_per_byte_low_nibble_first() {
        let i4 = Tensor::I4(ArrayD::from_shape_vec(IxDyn(&[3]), vec![-8i8, 7, -1]).unwrap());
        let p = from_tensor("q", &i4);
        // -8 = 0x8 low, 7 high: 0x78; -1 = 0xf alone in the low nibble.
        assert_eq!(p.raw_data, vec![0x78, 0x0f]);
        assert_eq!(to_tensor(&p, &Limits::default()).unwrap(), i4);
        let u4 = Tensor::U4(ArrayD::from_shape_vec(IxDyn(&[2]), vec![15u8, 1]).unwrap());
        assert_eq!(from_tensor("u", &u4).raw_data, vec![0x1f]);
        // Typed storage: one packed byte per int32_data entry.
        let typed = TensorProto {
            dims: vec![3],
            data_type: dt::UINT4,
            int32_data: vec![0x21, 0x03],
            ..Default::default()
        };
        let want = Tensor::U4(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1u8, 2, 3]).unwrap());
        assert_eq!(to_tensor(&typed, &Limits::default()).unwrap(), want);
        // Three values need two bytes, not one.
        let short = TensorProto {
            raw_data: vec![0x21].into(),
            int32_data: vec![],
            ..typed
        };
        let e = to_tensor(&short, &Limits::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("raw_data has 1 bytes but dims [3] of uint4 need 2"),
            "{e}"
        );
    }
}
