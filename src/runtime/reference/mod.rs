//! The reference backend: the executor that runs a model through the ops layer's ndarray kernels
//! (`crate::ops`, one file per op family), planned once per model.

mod control;
pub mod executor;

pub use executor::{runs_node, Executor, NoObserver, StepObserver};
