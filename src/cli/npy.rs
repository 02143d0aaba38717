//! .npy files in and out (ndarray-npy), for the element types the reference backend computes on.

use std::fs::File;
use std::path::Path;

use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

use crate::tensor::Tensor;
use crate::{with_tensor, Error, Result};

pub fn read(path: &Path) -> Result<Tensor> {
    let open = || File::open(path).map_err(|e| Error::io(path.display(), e));
    if let Ok(a) = ArrayD::<f32>::read_npy(open()?) {
        return Ok(Tensor::F32(a));
    }
    if let Ok(a) = ArrayD::<i64>::read_npy(open()?) {
        return Ok(Tensor::I64(a));
    }
    if let Ok(a) = ArrayD::<f64>::read_npy(open()?) {
        return Ok(Tensor::F64(a));
    }
    if let Ok(a) = ArrayD::<i32>::read_npy(open()?) {
        return Ok(Tensor::I32(a));
    }
    match ArrayD::<bool>::read_npy(open()?) {
        Ok(a) => Ok(Tensor::Bool(a)),
        Err(e) => Err(Error::Other(format!(
            "{}: not a .npy of float32, float64, int32, int64 or bool: {e}",
            path.display()
        ))),
    }
}

pub fn write(path: &Path, t: &Tensor) -> Result<()> {
    let f = File::create(path).map_err(|e| Error::io(path.display(), e))?;
    with_tensor!(t, a => a.write_npy(f))
        .map_err(|e| Error::Other(format!("{}: {e}", path.display())))
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
