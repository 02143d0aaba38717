//! The WebGPU backend (wgpu: the browser's WebGPU in wasm, Vulkan natively).
//!
//! A [`GpuSession`] is a model prepared for fixed input shapes: one traced run on the reference
//! backend gives every value's shape and the values of what does not depend on the input data
//! (shape arithmetic, folded weights); each remaining node is lowered to kernels generated with
//! its shapes baked in (each op's `Op::lower`, with `ops/wgsl.rs`), or to nothing when its output only relabels its
//! input. Fused ops are one dispatch each. The API is async because the browser cannot block.
//!
//! ```no_run
//! # async fn demo(model: &fuselab::ir::Model) -> fuselab::Result<()> {
//! use fuselab::runtime::webgpu::{Gpu, GpuSession};
//! let gpu = Gpu::new().await?;                      // no adapter: a clear error
//! let dims = [("seq".to_string(), 8)].into();
//! let session = GpuSession::new(&gpu, model, &dims, &Default::default()).await?;
//! # let inputs = Default::default();
//! let outputs = session.run(&inputs).await?;        // one submission, outputs read back
//! # Ok(()) }
//! ```

mod device;
mod session;
mod transfer;

pub use device::Gpu;
pub use session::GpuSession;
