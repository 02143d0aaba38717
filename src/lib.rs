//! fuselab: parse ONNX models, fuse adjacent operators into semantics-preserving fused nodes,
//! and execute graphs on a reference backend (native and wasm).

pub mod bench;
pub mod builder;
pub mod error;
pub mod io;
pub mod ir;
pub mod limits;
pub mod onnx;
pub mod ops;
pub mod passes;
pub mod pipeline;
pub mod profile;
pub mod report;
pub mod runtime;
pub mod tensor;
pub mod threads;
pub mod view;

pub use error::{Error, Result};
pub use limits::Limits;
pub use tensor::{DType, Tensor};

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;

#[cfg(target_arch = "wasm32")]
pub mod wasm;
