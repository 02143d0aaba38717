//! Tensors to and from the bytes the GPU holds (the element types of `ops::wgsl`): 4 bytes an
//! element, int64 narrowed to int32 when it fits, float16 as its own two bytes where the device
//! has `shader-f16` (`half`), else widened to float32 on the way up and narrowed back (round to
//! nearest even) on the way down, so callers see the model's types;
//! uint8/int8 widened to int32, or, for static values an op reads packed
//! (`Op::packed_byte_inputs`), as their bytes, padded to a whole word.

use half::f16;
use ndarray::{ArrayD, IxDyn};

use super::device::gpu_err;
use crate::ops::wgsl::numel;
use crate::ops::Info;
use crate::tensor::{DType, Tensor};
use crate::Result;

/// uint8 or int8: held packed four to a word where an op reads them so
/// (`Op::packed_byte_inputs`), widened to int32 elsewhere.
pub(super) fn is_byte(d: DType) -> bool {
    d == DType::U8 || d == DType::I8
}

/// Whether a value of type `d` is held as f16: float16 on a device with `shader-f16`
/// (`device_half`). The one statement of that rule; sizes, uploads, readbacks and the session's
/// kernels all follow it.
pub(super) fn held_half(d: DType, device_half: bool) -> bool {
    device_half && d == DType::F16
}

/// Bytes of the buffer that holds a value of `info`; `half`: float16 held as f16 (two bytes an
/// element, padded to a whole word).
pub(super) fn bytes_of(info: &Info, packed: bool, half: bool) -> u64 {
    let n = numel(&info.shape) as u64;
    let bytes = if packed {
        n.div_ceil(4) * 4
    } else if held_half(info.dtype, half) {
        n.div_ceil(2) * 4
    } else {
        n * 4
    };
    bytes.max(4)
}

pub(super) fn to_gpu_bytes(name: &str, t: &Tensor, packed: bool, half: bool) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(t.len() * 4);
    match t {
        Tensor::F16(a) if held_half(t.dtype(), half) => {
            a.iter().for_each(|v| out.extend(v.to_le_bytes()));
            out.resize(out.len().div_ceil(4) * 4, 0);
        }
        Tensor::U8(a) if !packed => a.iter().for_each(|&v| out.extend((v as i32).to_le_bytes())),
        Tensor::I8(a) if !packed => a.iter().for_each(|&v| out.extend((v as i32).to_le_bytes())),
        Tensor::U8(a) => {
            out.extend(a.iter());
            out.resize(out.len().div_ceil(4) * 4, 0);
        }
        Tensor::I8(a) => {
            out.extend(a.iter().map(|&v| v as u8));
            out.resize(out.len().div_ceil(4) * 4, 0);
        }
        Tensor::F32(a) => a.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Tensor::F16(a) => a
            .iter()
            .for_each(|v| out.extend(f32::from(*v).to_le_bytes())),
        Tensor::I32(a) => a.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Tensor::Bool(a) => a.iter().for_each(|&v| out.extend((v as u32).to_le_bytes())),
        Tensor::I64(a) => {
            for &v in a.iter() {
                let n = i32::try_from(v).map_err(|_| {
                    gpu_err(format!(
                        "'{name}' holds {v}, outside the int32 range webgpu computes in"
                    ))
                })?;
                out.extend(n.to_le_bytes());
            }
        }
        other => {
            return Err(gpu_err(format!(
                "'{name}' is {}, which webgpu does not do",
                other.dtype()
            )))
        }
    }
    if out.is_empty() {
        out.extend([0; 4]);
    }
    Ok(out)
}

pub(super) fn from_gpu_bytes(info: &Info, bytes: &[u8], half: bool) -> Result<Tensor> {
    let n = numel(&info.shape);
    if held_half(info.dtype, half) {
        let v: Vec<f16> = bytes
            .chunks_exact(2)
            .take(n)
            .map(|c| f16::from_le_bytes([c[0], c[1]]))
            .collect();
        return ArrayD::from_shape_vec(IxDyn(&info.shape), v)
            .map(Tensor::F16)
            .map_err(|e| gpu_err(format!("reading back: {e}")));
    }
    let words = bytes
        .chunks_exact(4)
        .take(n)
        .map(|c| [c[0], c[1], c[2], c[3]]);
    let shape = IxDyn(&info.shape);
    let bad = |e: ndarray::ShapeError| gpu_err(format!("reading back: {e}"));
    Ok(match info.dtype {
        DType::F32 => Tensor::F32(
            ArrayD::from_shape_vec(shape, words.map(f32::from_le_bytes).collect()).map_err(bad)?,
        ),
        DType::F16 => Tensor::F16(
            ArrayD::from_shape_vec(
                shape,
                words
                    .map(|w| f16::from_f32(f32::from_le_bytes(w)))
                    .collect(),
            )
            .map_err(bad)?,
        ),
        DType::I32 => Tensor::I32(
            ArrayD::from_shape_vec(shape, words.map(i32::from_le_bytes).collect()).map_err(bad)?,
        ),
        DType::U8 => Tensor::U8(
            ArrayD::from_shape_vec(shape, words.map(|w| i32::from_le_bytes(w) as u8).collect())
                .map_err(bad)?,
        ),
        DType::I8 => Tensor::I8(
            ArrayD::from_shape_vec(shape, words.map(|w| i32::from_le_bytes(w) as i8).collect())
                .map_err(bad)?,
        ),
        DType::I64 => Tensor::I64(
            ArrayD::from_shape_vec(shape, words.map(|w| i32::from_le_bytes(w) as i64).collect())
                .map_err(bad)?,
        ),
        DType::BOOL => Tensor::Bool(
            ArrayD::from_shape_vec(shape, words.map(|w| u32::from_le_bytes(w) != 0).collect())
                .map_err(bad)?,
        ),
        other => return Err(gpu_err(format!("{} output", other.name()))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float16_widens_up_and_narrows_down_to_nearest_even() {
        let up =
            Tensor::F16(ArrayD::from_shape_vec(IxDyn(&[2]), vec![f16::ONE, f16::MAX]).unwrap());
        let bytes = to_gpu_bytes("x", &up, false, false).unwrap();
        assert_eq!(&bytes[..4], &1.0f32.to_le_bytes());
        let info = Info {
            dtype: DType::F16,
            shape: vec![2],
        };
        // 1 + 2^-11 is halfway between 1 and the next float16: it goes to the even one, 1.
        let mut down = (1.0f32 + 2f32.powi(-11)).to_le_bytes().to_vec();
        down.extend(1.5f32.to_le_bytes());
        assert_eq!(
            from_gpu_bytes(&info, &down, false).unwrap(),
            Tensor::F16(
                ArrayD::from_shape_vec(IxDyn(&[2]), vec![f16::ONE, f16::from_f32(1.5)]).unwrap()
            )
        );
    }

    #[test]
    fn float16_as_f16_is_its_own_two_bytes_padded_to_a_word() {
        let v = vec![f16::ONE, f16::MAX, f16::from_f32(-0.5)];
        let t = Tensor::F16(ArrayD::from_shape_vec(IxDyn(&[3]), v).unwrap());
        let bytes = to_gpu_bytes("x", &t, false, true).unwrap();
        assert_eq!(bytes.len(), 8);
        assert_eq!(&bytes[..2], &f16::ONE.to_le_bytes());
        let info = Info {
            dtype: DType::F16,
            shape: vec![3],
        };
        assert_eq!(bytes_of(&info, false, true), 8);
        assert_eq!(bytes_of(&info, false, false), 12);
        assert_eq!(from_gpu_bytes(&info, &bytes, true).unwrap(), t);
        // Other types are not affected by `half`.
        let f = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[1]), vec![2.0]).unwrap());
        assert_eq!(
            to_gpu_bytes("f", &f, false, true).unwrap(),
            2.0f32.to_le_bytes()
        );
    }

    #[test]
    fn bytes_pack_four_to_a_word() {
        let t = Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[5]), vec![-1, 2, -128, 127, 5]).unwrap());
        assert_eq!(
            to_gpu_bytes("b", &t, true, false).unwrap(),
            vec![255, 2, 128, 127, 5, 0, 0, 0]
        );
        let info = Info {
            dtype: DType::I8,
            shape: vec![5],
        };
        assert_eq!(bytes_of(&info, true, false), 8);
        // Elsewhere they are int32, one to a word.
        assert_eq!(bytes_of(&info, false, false), 20);
        assert_eq!(
            &to_gpu_bytes("b", &t, false, false).unwrap()[..4],
            &(-1i32).to_le_bytes()
        );
    }
}
