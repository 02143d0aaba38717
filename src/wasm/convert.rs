//! JS values ↔ Rust: options and results through JSON, tensors as typed arrays, the caller's
//! clock.

use std::collections::HashMap;

use ndarray::{ArrayD, IxDyn};
use serde::de::DeserializeOwned;
use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::{DType, Tensor};

/// Serializes through JSON: results are plain JS objects.
pub(super) fn to_js<T: Serialize>(v: &T) -> Result<JsValue, JsError> {
    let s = serde_json::to_string(v).map_err(super::err)?;
    js_sys::JSON::parse(&s).map_err(|_| JsError::new("result is not JSON"))
}

/// Reads an options object (undefined or null: the defaults).
pub(super) fn from_js<T: DeserializeOwned + Default>(
    v: &JsValue,
    what: &str,
) -> Result<T, JsError> {
    if v.is_undefined() || v.is_null() {
        return Ok(T::default());
    }
    let s: String = js_sys::JSON::stringify(v)
        .map_err(|_| JsError::new(&format!("{what}: not a plain object")))?
        .into();
    serde_json::from_str(&s).map_err(|e| JsError::new(&format!("{what}: {e}")))
}

/// The caller's clock (`() => performance.now()`), in milliseconds.
pub(super) fn clock(now: &js_sys::Function) -> impl Fn() -> Result<f64, JsError> + '_ {
    move || {
        now.call0(&JsValue::NULL)
            .ok()
            .and_then(|v| v.as_f64())
            .filter(|t| t.is_finite())
            .ok_or_else(|| JsError::new("bench clock did not return a finite number"))
    }
}

fn dims_of(v: &JsValue, name: &str) -> Result<Vec<usize>, JsError> {
    let shape = js_sys::Reflect::get(v, &"shape".into()).unwrap_or(JsValue::UNDEFINED);
    let arr: js_sys::Array = shape
        .dyn_into()
        .map_err(|_| JsError::new(&format!("input '{name}': shape is not an array")))?;
    arr.iter()
        .map(|d| {
            d.as_f64()
                .filter(|x| *x >= 0.0 && x.fract() == 0.0 && *x <= u32::MAX as f64)
                .map(|x| x as usize)
                .ok_or_else(|| JsError::new(&format!("input '{name}': bad dim in shape")))
        })
        .collect()
}

/// `{ name: TensorValue }` (undefined or null: none).
pub(super) fn tensors_from_js(v: &JsValue) -> Result<HashMap<String, Tensor>, JsError> {
    let mut out = HashMap::new();
    if v.is_undefined() || v.is_null() {
        return Ok(out);
    }
    let obj: &js_sys::Object = v
        .dyn_ref()
        .ok_or_else(|| JsError::new("inputs: not an object"))?;
    for entry in js_sys::Object::entries(obj).iter() {
        let pair: js_sys::Array = entry.into();
        let name = pair.get(0).as_string().unwrap_or_default();
        let t = pair.get(1);
        let dtype = js_sys::Reflect::get(&t, &"dtype".into())
            .ok()
            .and_then(|d| d.as_string())
            .ok_or_else(|| JsError::new(&format!("input '{name}': dtype is not a string")))?;
        let shape = dims_of(&t, &name)?;
        let data = js_sys::Reflect::get(&t, &"data".into()).unwrap_or(JsValue::UNDEFINED);
        let bad = || {
            JsError::new(&format!(
                "input '{name}': data is not a {dtype} typed array"
            ))
        };
        // One arm per dtype: the typed array it must be, and the Tensor variant it becomes.
        macro_rules! typed {
            ($js:ty, $variant:ident) => {
                Tensor::$variant(array(
                    &name,
                    &shape,
                    data.dyn_ref::<$js>().ok_or_else(bad)?.to_vec(),
                )?)
            };
        }
        let tensor = match dtype.as_str() {
            "float32" => typed!(js_sys::Float32Array, F32),
            "float64" => typed!(js_sys::Float64Array, F64),
            "int32" => typed!(js_sys::Int32Array, I32),
            "int64" => typed!(js_sys::BigInt64Array, I64),
            "int8" => typed!(js_sys::Int8Array, I8),
            "uint8" => typed!(js_sys::Uint8Array, U8),
            "int16" => typed!(js_sys::Int16Array, I16),
            "uint16" => typed!(js_sys::Uint16Array, U16),
            "uint32" => typed!(js_sys::Uint32Array, U32),
            "uint64" => typed!(js_sys::BigUint64Array, U64),
            // 4-bit types: one value per element of an Int8Array/Uint8Array, low bits kept.
            "int4" => typed!(js_sys::Int8Array, I8)
                .widen()
                .narrow(DType::I4)
                .expect("int8 narrows to int4"),
            "uint4" => typed!(js_sys::Uint8Array, U8)
                .widen()
                .narrow(DType::U4)
                .expect("uint8 narrows to uint4"),
            // The half types travel as float32 (exact one way, rounded to nearest even the other).
            "float16" | "bfloat16" => {
                let wide = typed!(js_sys::Float32Array, F32);
                let to = if dtype == "float16" {
                    DType::F16
                } else {
                    DType::BF16
                };
                wide.narrow(to).expect("float32 narrows to a half type")
            }
            "bool" => {
                let bytes = data.dyn_ref::<js_sys::Uint8Array>().ok_or_else(bad)?;
                Tensor::Bool(array(
                    &name,
                    &shape,
                    bytes.to_vec().into_iter().map(|b| b != 0).collect(),
                )?)
            }
            // Strings: a plain JS array of strings.
            "string" => {
                let items: &js_sys::Array = data.dyn_ref().ok_or_else(|| {
                    JsError::new(&format!("input '{name}': data is not an array of strings"))
                })?;
                let v = items
                    .iter()
                    .map(|s| s.as_string())
                    .collect::<Option<Vec<String>>>()
                    .ok_or_else(|| {
                        JsError::new(&format!("input '{name}': data holds a non-string"))
                    })?;
                Tensor::Str(array(&name, &shape, v)?)
            }
            d => {
                return Err(JsError::new(&format!(
                    "input '{name}': dtype '{d}' is not one of float32, float64, float16, \
                     bfloat16, int4/8/16/32/64, uint4/8/16/32/64, bool, string"
                )))
            }
        };
        out.insert(name, tensor);
    }
    Ok(out)
}

fn array<T>(name: &str, shape: &[usize], data: Vec<T>) -> Result<ArrayD<T>, JsError> {
    let len = data.len();
    ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|_| {
        JsError::new(&format!(
            "input '{name}': {len} values do not fill shape {shape:?}"
        ))
    })
}

/// Graph outputs as `{ name: TensorValue }`.
pub(super) fn outputs_to_js(outs: &[(String, Tensor)]) -> Result<JsValue, JsError> {
    let result = js_sys::Object::new();
    for (name, t) in outs {
        js_sys::Reflect::set(&result, &name.into(), &tensor_to_js(t)?)
            .map_err(|_| JsError::new("cannot build the result"))?;
    }
    Ok(result.into())
}

fn tensor_to_js(t: &Tensor) -> Result<JsValue, JsError> {
    // One copy into the JS typed array where the data is row-major (every kernel's output is);
    // otherwise gathered into a Vec first.
    macro_rules! typed {
        ($js:ty, $a:expr) => {{
            let a = &$a;
            match a.as_slice() {
                Some(s) => <$js>::from(s).into(),
                None => <$js>::from(a.iter().copied().collect::<Vec<_>>().as_slice()).into(),
            }
        }};
    }
    let data: JsValue = match t {
        Tensor::F32(a) => typed!(js_sys::Float32Array, a),
        Tensor::F64(a) => typed!(js_sys::Float64Array, a),
        Tensor::I32(a) => typed!(js_sys::Int32Array, a),
        Tensor::I64(a) => typed!(js_sys::BigInt64Array, a),
        Tensor::Bool(a) => typed!(js_sys::Uint8Array, a.mapv(|b| b as u8)),
        Tensor::I8(a) => typed!(js_sys::Int8Array, a),
        Tensor::U8(a) => typed!(js_sys::Uint8Array, a),
        Tensor::I16(a) => typed!(js_sys::Int16Array, a),
        Tensor::U16(a) => typed!(js_sys::Uint16Array, a),
        Tensor::U32(a) => typed!(js_sys::Uint32Array, a),
        Tensor::U64(a) => typed!(js_sys::BigUint64Array, a),
        // int4/uint4 as Int8Array/Uint8Array, one value per element.
        Tensor::I4(a) => typed!(js_sys::Int8Array, a),
        Tensor::U4(a) => typed!(js_sys::Uint8Array, a),
        // float16/bfloat16 as float32 values (exact); `dtype` still names the model's type.
        Tensor::F16(a) => typed!(js_sys::Float32Array, a.mapv(f32::from)),
        Tensor::BF16(a) => typed!(js_sys::Float32Array, a.mapv(f32::from)),
        // Strings as a plain array of JS strings.
        Tensor::Str(a) => a
            .iter()
            .map(|s| JsValue::from(s.as_str()))
            .collect::<js_sys::Array>()
            .into(),
    };
    let o = js_sys::Object::new();
    let shape = js_sys::Array::new();
    for &d in t.shape() {
        shape.push(&JsValue::from(d as f64));
    }
    let set = |k: &str, v: &JsValue| {
        js_sys::Reflect::set(&o, &k.into(), v).map_err(|_| JsError::new("cannot build a tensor"))
    };
    set("dtype", &JsValue::from(t.dtype().name()))?;
    set("shape", &shape)?;
    set("data", &data)?;
    Ok(o.into())
}
