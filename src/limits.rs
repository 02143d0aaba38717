//! Size limits, checked before anything is allocated from sizes a model declares.

/// Default cap on any one tensor (decoded initializer, kernel output, random input): 4 GiB
/// natively, 1 GiB on wasm32 (whose allocations cannot pass 2 GiB).
#[cfg(not(target_arch = "wasm32"))]
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 4 << 30;
#[cfg(target_arch = "wasm32")]
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 1 << 30;

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
