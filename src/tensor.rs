//! Element types and the dense tensor value every backend and pass exchanges.

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use crate::onnx::proto::data_type as dt;

mod strings;

/// ONNX element types (TensorProto.DataType). Every type can be stored and round-tripped; only
/// the ones `Tensor` holds can be computed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DType(pub i32);

impl DType {
    pub const F32: DType = DType(dt::FLOAT);
    pub const F64: DType = DType(dt::DOUBLE);
    pub const I32: DType = DType(dt::INT32);
    pub const I64: DType = DType(dt::INT64);
    pub const BOOL: DType = DType(dt::BOOL);
    pub const F16: DType = DType(dt::FLOAT16);
    pub const BF16: DType = DType(dt::BFLOAT16);
    pub const STRING: DType = DType(dt::STRING);
    pub const I8: DType = DType(dt::INT8);
    pub const U8: DType = DType(dt::UINT8);
    pub const I16: DType = DType(dt::INT16);
    pub const U16: DType = DType(dt::UINT16);
    pub const U32: DType = DType(dt::UINT32);
    pub const U64: DType = DType(dt::UINT64);
    pub const I4: DType = DType(dt::INT4);
    pub const U4: DType = DType(dt::UINT4);

    /// The type an op computes a value of this type in (see `Tensor`): itself for the compute
    /// types (strings are held and moved as themselves), `None` for types the backend does not
    /// hold (complex, float8, float4, 2-bit).
    pub fn compute(self) -> Option<DType> {
        Some(match self {
            DType::F32 | DType::F16 | DType::BF16 => DType::F32,
            DType::I32 | DType::I8 | DType::U8 | DType::I16 | DType::U16 => DType::I32,
            DType::I4 | DType::U4 => DType::I32,
            DType::I64 | DType::U32 | DType::U64 => DType::I64,
            DType::F64 | DType::BOOL | DType::STRING => self,
            _ => return None,
        })
    }

    /// True for the types kernels are written for; false for storage types and the rest.
    pub fn is_compute(self) -> bool {
        self.compute() == Some(self)
    }

    /// Storage size of one element in raw_data, in bits (sub-byte types are packed).
    pub fn bits(self) -> Option<u64> {
        Some(match self.0 {
            dt::FLOAT | dt::INT32 | dt::UINT32 => 32,
            dt::DOUBLE | dt::INT64 | dt::UINT64 | dt::COMPLEX64 => 64,
            dt::COMPLEX128 => 128,
            dt::UINT8 | dt::INT8 | dt::BOOL => 8,
            dt::FLOAT8E4M3FN | dt::FLOAT8E4M3FNUZ | dt::FLOAT8E5M2 | dt::FLOAT8E5M2FNUZ => 8,
            dt::FLOAT8E8M0 => 8,
            dt::UINT16 | dt::INT16 | dt::FLOAT16 | dt::BFLOAT16 => 16,
            dt::UINT4 | dt::INT4 | dt::FLOAT4E2M1 => 4,
            dt::UINT2 | dt::INT2 => 2,
            dt::FLOAT6E2M3 | dt::FLOAT6E3M2 => 6,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self.0 {
            dt::FLOAT => "float32",
            dt::UINT8 => "uint8",
            dt::INT8 => "int8",
            dt::UINT16 => "uint16",
            dt::INT16 => "int16",
            dt::INT32 => "int32",
            dt::INT64 => "int64",
            dt::STRING => "string",
            dt::BOOL => "bool",
            dt::FLOAT16 => "float16",
            dt::DOUBLE => "float64",
            dt::UINT32 => "uint32",
            dt::UINT64 => "uint64",
            dt::COMPLEX64 => "complex64",
            dt::COMPLEX128 => "complex128",
            dt::BFLOAT16 => "bfloat16",
            dt::FLOAT8E4M3FN => "float8e4m3fn",
            dt::FLOAT8E4M3FNUZ => "float8e4m3fnuz",
            dt::FLOAT8E5M2 => "float8e5m2",
            dt::FLOAT8E5M2FNUZ => "float8e5m2fnuz",
            dt::UINT4 => "uint4",
            dt::INT4 => "int4",
            dt::FLOAT4E2M1 => "float4e2m1",
            dt::FLOAT8E8M0 => "float8e8m0",
            dt::UINT2 => "uint2",
            dt::INT2 => "int2",
            dt::FLOAT6E2M3 => "float6e2m3",
            dt::FLOAT6E3M2 => "float6e3m2",
            _ => "undefined",
        }
    }

    /// The value range of int4 and uint4; `None` for other types.
    pub fn four_bit_range(self) -> Option<(f64, f64)> {
        match self {
            DType::I4 => Some((-8.0, 7.0)),
            DType::U4 => Some((0.0, 15.0)),
            _ => None,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self.0, dt::FLOAT | dt::DOUBLE | dt::FLOAT16 | dt::BFLOAT16)
    }
}

/// `v` as float32 rounded to odd (toward zero, then the last bit set if anything was lost).
/// Rounding that again to a type of at most 11 significant bits (float16, bfloat16) gives the
/// correctly rounded result of `v`, which rounding to nearest twice does not: half's own
/// `from_f64` goes through float32 (x86 F16C) or drops the low 32 bits, both wrong near ties.
fn f32_round_to_odd(v: f64) -> f32 {
    let f = v as f32;
    if !f.is_finite() || f as f64 == v {
        return f;
    }
    let mut bits = f.to_bits();
    if (f as f64).abs() > v.abs() {
        bits -= 1; // one step toward zero: same sign, smaller magnitude
    }
    f32::from_bits(bits | 1)
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A dense tensor of any element type the reference backend holds.
///
/// The first five variants are the *compute* types: the ones kernels are written for (and
/// `Str`, which kernels that take strings match as itself and the rest refuse). The others
/// are *storage* types: values of those types are held, moved, saved and cast as themselves, and
/// an op that computes on them sees them widened to their compute type (`DType::compute`:
/// float16 and bfloat16 to float32, small integers to int32, uint32 and uint64 to int64), with
/// its outputs narrowed back to the declared type (`Tensor::widen`, `Tensor::narrow`; the
/// executor applies both). That is "accumulate in f32, store in the type", as the ONNX
/// reference does for the half types.
#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    Bool(ArrayD<bool>),
    F16(ArrayD<f16>),
    BF16(ArrayD<bf16>),
    I8(ArrayD<i8>),
    U8(ArrayD<u8>),
    I16(ArrayD<i16>),
    U16(ArrayD<u16>),
    U32(ArrayD<u32>),
    U64(ArrayD<u64>),
    /// int4: values in [-8, 7], one per byte here (packed two per byte in raw_data).
    I4(ArrayD<i8>),
    /// uint4: values in [0, 15], one per byte here (packed two per byte in raw_data).
    U4(ArrayD<u8>),
    /// ONNX strings (UTF-8; see `onnx::tensor::to_tensor`). Only data movement, comparison,
    /// Cast and the string ops take them; numeric kernels refuse them by type.
    Str(ArrayD<String>),
}

/// Applies `$body` to the array inside a `Tensor`, whatever its element type.
#[macro_export]
macro_rules! with_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($a) => $body,
            $crate::tensor::Tensor::F64($a) => $body,
            $crate::tensor::Tensor::I32($a) => $body,
            $crate::tensor::Tensor::I64($a) => $body,
            $crate::tensor::Tensor::Bool($a) => $body,
            $crate::tensor::Tensor::F16($a) => $body,
            $crate::tensor::Tensor::BF16($a) => $body,
            $crate::tensor::Tensor::I8($a) => $body,
            $crate::tensor::Tensor::U8($a) => $body,
            $crate::tensor::Tensor::I16($a) => $body,
            $crate::tensor::Tensor::U16($a) => $body,
            $crate::tensor::Tensor::U32($a) => $body,
            $crate::tensor::Tensor::U64($a) => $body,
            $crate::tensor::Tensor::I4($a) => $body,
            $crate::tensor::Tensor::U4($a) => $body,
            $crate::tensor::Tensor::Str($a) => $body,
        }
    };
}

impl Tensor {
    pub fn dtype(&self) -> DType {
        match self {
            Tensor::F32(_) => DType::F32,
            Tensor::F64(_) => DType::F64,
            Tensor::I32(_) => DType::I32,
            Tensor::I64(_) => DType::I64,
            Tensor::Bool(_) => DType::BOOL,
            Tensor::F16(_) => DType::F16,
            Tensor::BF16(_) => DType::BF16,
            Tensor::I8(_) => DType::I8,
            Tensor::U8(_) => DType::U8,
            Tensor::I16(_) => DType::I16,
            Tensor::U16(_) => DType::U16,
            Tensor::U32(_) => DType::U32,
            Tensor::U64(_) => DType::U64,
            Tensor::I4(_) => DType::I4,
            Tensor::U4(_) => DType::U4,
            Tensor::Str(_) => DType::STRING,
        }
    }

    pub fn shape(&self) -> &[usize] {
        with_tensor!(self, a => a.shape())
    }

    pub fn len(&self) -> usize {
        with_tensor!(self, a => a.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn scalar_f32(v: f32) -> Tensor {
        Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v))
    }

    pub fn from_i64s(v: &[i64]) -> Tensor {
        Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).expect("1-D shape"))
    }

    pub fn as_f32(&self) -> Option<&ArrayD<f32>> {
        match self {
            Tensor::F32(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<&ArrayD<i64>> {
        match self {
            Tensor::I64(a) => Some(a),
            _ => None,
        }
    }

    /// Integer contents as i64 (shape inputs such as Reshape's `shape` or Unsqueeze's `axes`).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        match self {
            Tensor::I64(a) => Some(a.iter().copied().collect()),
            Tensor::I32(a) => Some(a.iter().map(|&v| v as i64).collect()),
            _ => None,
        }
    }

    /// Contents widened to f64, for comparisons and reports (strings: NaN each; compare them
    /// with `max_abs_diff` or `==`).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            Tensor::F32(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::F64(a) => a.iter().copied().collect(),
            Tensor::I32(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::I64(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::Bool(a) => a.iter().map(|&v| v as u8 as f64).collect(),
            Tensor::F16(a) => a.iter().map(|v| v.to_f64()).collect(),
            Tensor::BF16(a) => a.iter().map(|v| v.to_f64()).collect(),
            Tensor::I8(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::U8(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::I16(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::U16(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::U32(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::U64(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::I4(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::U4(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::Str(a) => vec![f64::NAN; a.len()],
        }
    }

    /// The value in its compute type (`DType::compute`): storage types widened exactly (uint64
    /// reinterpreted as int64, two's complement: sums and products stay right modulo 2^64,
    /// order and division above 2^63 do not); compute types borrowed as they are.
    pub fn widen(&self) -> std::borrow::Cow<'_, Tensor> {
        use std::borrow::Cow::Owned;
        match self {
            Tensor::F16(a) => Owned(Tensor::F32(a.mapv(f32::from))),
            Tensor::BF16(a) => Owned(Tensor::F32(a.mapv(f32::from))),
            Tensor::I8(a) => Owned(Tensor::I32(a.mapv(i32::from))),
            Tensor::U8(a) => Owned(Tensor::I32(a.mapv(i32::from))),
            Tensor::I16(a) => Owned(Tensor::I32(a.mapv(i32::from))),
            Tensor::U16(a) => Owned(Tensor::I32(a.mapv(i32::from))),
            Tensor::U32(a) => Owned(Tensor::I64(a.mapv(i64::from))),
            Tensor::U64(a) => Owned(Tensor::I64(a.mapv(|v| v as i64))),
            Tensor::I4(a) => Owned(Tensor::I32(a.mapv(i32::from))),
            Tensor::U4(a) => Owned(Tensor::I32(a.mapv(i32::from))),
            t => std::borrow::Cow::Borrowed(t),
        }
    }

    /// `cast`, with the reason when it cannot: `to` not held, or a string that is no number
    /// (`strings` has the string rules).
    pub fn try_cast(&self, to: DType) -> Result<Tensor, String> {
        if to == DType::STRING || self.dtype() == DType::STRING {
            return strings::cast(self, to);
        }
        self.cast(to).ok_or_else(|| {
            format!("Cast: target type {to} is not supported by the reference backend")
        })
    }

    /// ONNX Cast semantics, for every pair of held types; `None` when `to` is not held (or a
    /// string is no number: `try_cast` says which). Goes
    /// through the compute types: the source widened, converted (floats to integers truncate
    /// toward zero and saturate at the compute type, NaN to 0; numbers to bool test `!= 0`),
    /// then narrowed to `to`. A float64 source rounds to float16/bfloat16 once, from its own
    /// value; uint64 sources convert to floats by value. Floats to int4/uint4 give 0 outside
    /// the type's range (the ONNX reference's values); integers to them keep the low 4 bits.
    pub fn cast(&self, to: DType) -> Option<Tensor> {
        if to == DType::STRING || self.dtype() == DType::STRING {
            return strings::cast(self, to).ok();
        }
        let mut mid = to.compute()?;
        let wide = match self {
            Tensor::U64(a) if to.is_float() => {
                std::borrow::Cow::Owned(Tensor::F64(a.mapv(|v| v as f64)))
            }
            t => t.widen(),
        };
        if mid == DType::F32 && to != DType::F32 && wide.dtype() == DType::F64 {
            mid = DType::F64;
        }
        if let (Some((lo, hi)), true) = (to.four_bit_range(), wide.dtype().is_float()) {
            // Floats to int4/uint4: truncated toward zero; a value outside the type's range (or
            // NaN) is 0, as the ONNX reference (ml_dtypes) converts them.
            let fit = |v: f64| {
                let t = v.trunc();
                if (lo..=hi).contains(&t) {
                    t as i32
                } else {
                    0
                }
            };
            let ints = match &*wide {
                Tensor::F32(a) => a.mapv(|v| fit(v.into())),
                Tensor::F64(a) => a.mapv(fit),
                _ => unreachable!("a float type widens to float32 or float64"),
            };
            return Tensor::I32(ints).narrow(to);
        }
        macro_rules! num {
            ($t:ty) => {
                match &*wide {
                    Tensor::F32(a) => a.mapv(|v| v as $t),
                    Tensor::F64(a) => a.mapv(|v| v as $t),
                    Tensor::I32(a) => a.mapv(|v| v as $t),
                    Tensor::I64(a) => a.mapv(|v| v as $t),
                    Tensor::Bool(a) => a.mapv(|v| u8::from(v) as $t),
                    _ => unreachable!("widened"),
                }
            };
        }
        let computed = match mid {
            DType::F32 => Tensor::F32(num!(f32)),
            DType::F64 => Tensor::F64(num!(f64)),
            DType::I32 => Tensor::I32(num!(i32)),
            DType::I64 => Tensor::I64(num!(i64)),
            _ => Tensor::Bool(match &*wide {
                Tensor::F32(a) => a.mapv(|v| v != 0.0),
                Tensor::F64(a) => a.mapv(|v| v != 0.0),
                Tensor::I32(a) => a.mapv(|v| v != 0),
                Tensor::I64(a) => a.mapv(|v| v != 0),
                Tensor::Bool(a) => a.clone(),
                _ => unreachable!("widened"),
            }),
        };
        computed.narrow(to)
    }

    /// Stores a computed value as the storage type `to`: floats round to nearest even (float16,
    /// bfloat16; from float32 or float64), integers keep their low bits (two's complement
    /// wrapping, as a C cast of an in-range value, and numpy's `astype` of an out-of-range
    /// one). Floats narrowed to an integer type truncate toward zero first. `None` when `self`
    /// cannot become `to` this way (a bool, or `to` is a compute type of another kind).
    pub fn narrow(&self, to: DType) -> Option<Tensor> {
        macro_rules! ints {
            ($a:expr, $t:ty) => {
                match $a {
                    Tensor::I32(a) => a.mapv(|v| v as $t),
                    Tensor::I64(a) => a.mapv(|v| v as $t),
                    Tensor::F32(a) => a.mapv(|v| v as i64 as $t),
                    Tensor::F64(a) => a.mapv(|v| v as i64 as $t),
                    _ => return None,
                }
            };
        }
        macro_rules! floats {
            ($a:expr, $t:ty) => {
                match $a {
                    Tensor::F32(a) => a.mapv(<$t>::from_f32),
                    Tensor::F64(a) => a.mapv(|v| <$t>::from_f32(f32_round_to_odd(v))),
                    _ => return None,
                }
            };
        }
        Some(match to {
            DType::F16 => Tensor::F16(floats!(self, f16)),
            DType::BF16 => Tensor::BF16(floats!(self, bf16)),
            DType::I8 => Tensor::I8(ints!(self, i8)),
            DType::U8 => Tensor::U8(ints!(self, u8)),
            DType::I16 => Tensor::I16(ints!(self, i16)),
            DType::U16 => Tensor::U16(ints!(self, u16)),
            DType::U32 => Tensor::U32(ints!(self, u32)),
            DType::U64 => Tensor::U64(ints!(self, u64)),
            // 4-bit types keep the low four bits (int4 sign-extends them).
            DType::I4 => Tensor::I4(ints!(self, i8).mapv(|v| v.wrapping_shl(4) >> 4)),
            DType::U4 => Tensor::U4(ints!(self, u8).mapv(|v| v & 0xf)),
            d if d == self.dtype() => self.clone(),
            _ => return None,
        })
    }

    /// `narrow`, except that integer values outside an integer target's range clamp to it
    /// instead of wrapping (for ops whose results onnxruntime saturates, `Op::saturates`).
    pub fn narrow_saturating(&self, to: DType) -> Option<Tensor> {
        let (lo, hi): (i64, i64) = match to {
            DType::I8 => (i8::MIN.into(), i8::MAX.into()),
            DType::U8 => (0, u8::MAX.into()),
            DType::I16 => (i16::MIN.into(), i16::MAX.into()),
            DType::U16 => (0, u16::MAX.into()),
            DType::U32 => (0, u32::MAX.into()),
            DType::U64 => (0, i64::MAX),
            DType::I4 => (-8, 7),
            DType::U4 => (0, 15),
            _ => return self.narrow(to),
        };
        let clamped = match self {
            Tensor::I32(a) => Tensor::I64(a.mapv(|v| i64::from(v).clamp(lo, hi))),
            Tensor::I64(a) => Tensor::I64(a.mapv(|v| v.clamp(lo, hi))),
            _ => return self.narrow(to),
        };
        clamped.narrow(to)
    }

    /// Largest absolute difference between two tensors of the same shape; NaN where both are NaN
    /// counts as equal. Returns None when shapes or element types differ.
    pub fn max_abs_diff(&self, other: &Tensor) -> Option<f64> {
        if self.shape() != other.shape() || self.dtype() != other.dtype() {
            return None;
        }
        if let (Tensor::Str(a), Tensor::Str(b)) = (self, other) {
            return Some(if a == b { 0.0 } else { f64::INFINITY });
        }
        let a = self.to_f64_vec();
        let b = other.to_f64_vec();
        let mut worst = 0.0f64;
        for (x, y) in a.iter().zip(&b) {
            if x.is_nan() && y.is_nan() || x == y {
                continue;
            }
            let d = (x - y).abs();
            if d.is_nan() {
                return Some(f64::INFINITY);
            }
            worst = worst.max(d);
        }
        Some(worst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one<T: Clone>(v: T) -> ArrayD<T> {
        ArrayD::from_elem(IxDyn(&[1]), v)
    }

    #[test]
    fn narrowing_rounds_half_types_to_even_and_wraps_integers() {
        let ulp = 2f32.powi(-10); // float16's spacing just above 1
        let halfway_even = Tensor::F32(one(1.0 + ulp / 2.0))
            .narrow(DType::F16)
            .unwrap();
        assert_eq!(halfway_even, Tensor::F16(one(f16::ONE)));
        let halfway_odd = Tensor::F32(one(1.0 + 1.5 * ulp))
            .narrow(DType::F16)
            .unwrap();
        assert_eq!(
            halfway_odd,
            Tensor::F16(one(f16::from_f32(1.0 + 2.0 * ulp)))
        );
        assert_eq!(
            Tensor::I32(one(300)).narrow(DType::U8),
            Some(Tensor::U8(one(44)))
        );
        assert_eq!(
            Tensor::I32(one(-1)).narrow(DType::U16),
            Some(Tensor::U16(one(65535)))
        );
        assert_eq!(
            Tensor::I64(one(-1)).narrow(DType::U64),
            Some(Tensor::U64(one(u64::MAX)))
        );
        assert_eq!(Tensor::Bool(one(true)).narrow(DType::U8), None);
        assert_eq!(Tensor::I32(one(1)).narrow(DType::F16), None);
    }

    #[test]
    fn widening_is_exact_and_narrowing_undoes_it() {
        let all = [
            Tensor::F16(one(f16::from_f32(-0.333))),
            Tensor::BF16(one(bf16::from_f32(1e30))),
            Tensor::I8(one(i8::MIN)),
            Tensor::U8(one(u8::MAX)),
            Tensor::I16(one(i16::MIN)),
            Tensor::U16(one(u16::MAX)),
            Tensor::U32(one(u32::MAX)),
            Tensor::U64(one(u64::MAX)),
        ];
        for t in all {
            let wide = t.widen();
            assert!(wide.dtype().is_compute(), "{:?}", t.dtype());
            assert_eq!(Some(wide.dtype()), t.dtype().compute());
            assert_eq!(wide.narrow(t.dtype()), Some(t.clone()), "{:?}", t.dtype());
        }
    }

    #[test]
    fn four_bit_types_widen_wrap_and_cast_from_floats_as_the_reference() {
        let v =
            |x: &[i64]| Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[x.len()]), x.to_vec()).unwrap());
        // Narrowing keeps the low four bits; int4 sign-extends them.
        assert_eq!(
            v(&[7, 8, -9, 15]).narrow(DType::I4),
            Some(Tensor::I4(
                ArrayD::from_shape_vec(IxDyn(&[4]), vec![7, -8, 7, -1]).unwrap()
            ))
        );
        assert_eq!(
            v(&[16, -1]).narrow(DType::U4),
            Some(Tensor::U4(
                ArrayD::from_shape_vec(IxDyn(&[2]), vec![0, 15]).unwrap()
            ))
        );
        assert_eq!(
            v(&[9, -9]).narrow_saturating(DType::I4),
            Some(Tensor::I4(
                ArrayD::from_shape_vec(IxDyn(&[2]), vec![7, -8]).unwrap()
            ))
        );
        // Floats: truncated; outside the range (or NaN) 0.
        let f = Tensor::F32(
            ArrayD::from_shape_vec(IxDyn(&[5]), vec![-8.9, 7.5, 8.0, -9.0, f32::NAN]).unwrap(),
        );
        let want = vec![-8i8, 7, 0, 0, 0];
        assert_eq!(
            f.cast(DType::I4),
            Some(Tensor::I4(
                ArrayD::from_shape_vec(IxDyn(&[5]), want).unwrap()
            ))
        );
        let u = f.cast(DType::U4).unwrap();
        assert_eq!(u.to_f64_vec(), vec![0.0, 7.0, 8.0, 0.0, 0.0]);
        assert_eq!(u.widen().dtype(), DType::I32);
        assert_eq!(u.cast(DType::F32).unwrap().to_f64_vec(), u.to_f64_vec());
    }

    #[test]
    fn cast_rounds_once_and_converts_uint64_by_value() {
        // 1 + 2^-11 + 2^-40: just above a float16 tie. Through float32 it would first round to
        // the tie itself and then to even (1.0); rounded once it is 1 + 2^-10.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        let h = Tensor::F64(one(x)).cast(DType::F16).unwrap();
        assert_eq!(h, Tensor::F16(one(f16::from_f64(1.0 + 2f64.powi(-10)))));
        let big = Tensor::U64(one(u64::MAX)).cast(DType::F32).unwrap();
        assert_eq!(big, Tensor::F32(one(u64::MAX as f32)));
        assert_eq!(
            Tensor::F32(one(-2.7)).cast(DType::I8),
            Some(Tensor::I8(one(-2)))
        );
        assert_eq!(
            Tensor::U8(one(200)).cast(DType::I8),
            Some(Tensor::I8(one(-56)))
        );
        assert_eq!(
            Tensor::F16(one(f16::ZERO)).cast(DType::BOOL),
            Some(Tensor::Bool(one(false)))
        );
        assert_eq!(
            Tensor::Bool(one(true)).cast(DType::BF16),
            Some(Tensor::BF16(one(bf16::ONE)))
        );
        assert_eq!(
            Tensor::F32(one(1.0)).cast(DType::STRING),
            Some(Tensor::Str(one("1.0".to_string())))
        );
        assert_eq!(Tensor::F32(one(1.0)).cast(DType(dt::FLOAT8E5M2)), None);
    }
}
