//! Element types and the dense tensor value every backend and pass exchanges.

use ndarray::{ArrayD, IxDyn};

use crate::onnx::proto::data_type as dt;

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

    pub fn is_float(self) -> bool {
        matches!(self.0, dt::FLOAT | dt::DOUBLE | dt::FLOAT16 | dt::BFLOAT16)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A dense tensor of one of the element types the reference backend computes on.
#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    Bool(ArrayD<bool>),
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

    /// Contents widened to f64, for comparisons and reports.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            Tensor::F32(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::F64(a) => a.iter().copied().collect(),
            Tensor::I32(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::I64(a) => a.iter().map(|&v| v as f64).collect(),
            Tensor::Bool(a) => a.iter().map(|&v| v as u8 as f64).collect(),
        }
    }

    /// Largest absolute difference between two tensors of the same shape; NaN where both are NaN
    /// counts as equal. Returns None when shapes or element types differ.
    pub fn max_abs_diff(&self, other: &Tensor) -> Option<f64> {
        if self.shape() != other.shape() || self.dtype() != other.dtype() {
            return None;
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
