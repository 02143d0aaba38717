//! The protobuf codec and nothing above it: prost messages written from `onnx.proto`,
//! TensorProto <-> `Tensor` decoding with its limits, and the memory-mapped external data files
//! tensor bytes may live in. It knows no IR (`crate::io` loads and saves models).

#[cfg(not(target_arch = "wasm32"))]
pub mod mapped;
pub mod proto;
pub mod tensor;

/// Drops the pages of a memory-mapped external data file behind `bytes` from this process, once
/// they have been read (decoded, or written out); a no-op for any other buffer and in wasm.
/// See `mapped`.
pub fn release_pages(bytes: &[u8]) {
    #[cfg(not(target_arch = "wasm32"))]
    mapped::release(bytes);
    #[cfg(target_arch = "wasm32")]
    let _ = bytes;
}
