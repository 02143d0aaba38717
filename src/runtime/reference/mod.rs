//! The reference backend: the executor that runs a model through the ops layer's ndarray kernels
//! (`crate::ops`, one file per op family), planned once per model.

pub mod executor;

pub use executor::{Executor, NoObserver, StepObserver};

/// The registry entry of an op at the newest version the registry covers, if the reference
/// backend runs the op at all (whether the model's opset is covered is `Executor::new`'s check).
pub fn lookup(domain: &str, op_type: &str) -> Option<&'static crate::ops::OpDef> {
    crate::ops::lookup(domain, op_type, i64::MAX)
}
