//! Size limits, checked before anything is allocated from sizes a model declares.

/// Default cap on any one tensor (decoded initializer, kernel output, random input): 4 GiB
/// natively, 1 GiB on wasm32 (whose allocations cannot pass 2 GiB).
#[cfg(not(target_arch = "wasm32"))]
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 4 << 30;
#[cfg(target_arch = "wasm32")]
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 1 << 30;

/// wasm32's linear memory: 4 GiB of address space (65,536 pages of 64 KiB), all the wasm build
/// ever has, whatever the machine; a browser may grant less.
pub const WASM_MEMORY_CEILING: u64 = 4 << 30;

/// Largest model (the .onnx and its external data files together) the wasm build loads: the
/// file bytes, one decoded copy of the weights (a run decodes each initializer once) and the
/// saved optimized model must fit under [`WASM_MEMORY_CEILING`] at once, so a third of it
/// (1.33 GiB; GPT-2 small's 651 MB fits).
pub const WASM_MAX_MODEL_BYTES: u64 = WASM_MEMORY_CEILING / 3;

/// Refuses, before anything is copied into wasm memory, a model whose files total more than
/// [`WASM_MAX_MODEL_BYTES`]; `total` is their summed size.
pub fn check_wasm_model_bytes(total: u64) -> Result<(), crate::Error> {
    if total > WASM_MAX_MODEL_BYTES {
        return Err(crate::Error::limit(format!(
            "the model's files total {total} bytes, over the {WASM_MAX_MODEL_BYTES} bytes the \
             wasm build can hold: its 4 GiB memory must take the files, one decoded copy of the \
             weights and the optimized model at once (use the native CLI for this model)"
        )));
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest tensor, in bytes, that loading, a kernel or input generation may create.
    pub max_tensor_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tensor_bytes: DEFAULT_MAX_TENSOR_BYTES,
        }
    }
}

impl Limits {
    /// Element count of `dims`, or an error when a dim is negative, the product overflows, or the
    /// tensor (at `bits` per element) would exceed the limit. `what` names the tensor in the error.
    pub fn check_dims(&self, what: &str, dims: &[i64], bits: u64) -> Result<u64, crate::Error> {
        let mut n: u64 = 1;
        // ndarray also needs the product of the non-zero dims to fit in isize, even when a zero
        // dim makes the tensor empty.
        let mut nonzero: u64 = 1;
        let overflow =
            || crate::Error::limit(format!("{what}: element count of dims {dims:?} overflows"));
        for &d in dims {
            if d < 0 {
                return Err(crate::Error::invalid(format!(
                    "{what}: negative dimension {d} in {dims:?}"
                )));
            }
            n = n.checked_mul(d as u64).ok_or_else(overflow)?;
            if d > 0 {
                nonzero = nonzero
                    .checked_mul(d as u64)
                    .filter(|&p| p <= isize::MAX as u64)
                    .ok_or_else(overflow)?;
            }
        }
        let bytes = n.checked_mul(bits).map(|b| b.div_ceil(8)).ok_or_else(|| {
            crate::Error::limit(format!("{what}: byte size of {dims:?} overflows"))
        })?;
        // An allocation may not pass isize::MAX bytes (2 GiB on 32-bit targets).
        if bytes > self.max_tensor_bytes || bytes > isize::MAX as u64 {
            return Err(crate::Error::limit(format!(
                "{what}: dims {dims:?} need {bytes} bytes, over the {} byte limit",
                self.max_tensor_bytes
            )));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wasm_build_refuses_a_model_past_a_third_of_its_memory() {
        assert!(check_wasm_model_bytes(651_000_000).is_ok()); // GPT-2 small in float32
        assert!(check_wasm_model_bytes(WASM_MAX_MODEL_BYTES).is_ok());
        let err = check_wasm_model_bytes(WASM_MAX_MODEL_BYTES + 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1431655766 bytes"), "{err}");
        assert!(err.contains("over the 1431655765 bytes"), "{err}");
        assert!(err.contains("use the native CLI"), "{err}");
    }
}
