//! Loading and saving models: ONNX protobuf (the `onnx` codec) to the IR and back, external
//! data, limits checked before allocating. Loading also parses every node's attributes through
//! the ops layer, so a bad attribute is a load error naming the node and the attribute.

pub mod load;
#[cfg(not(target_arch = "wasm32"))]
mod mapped;
pub mod save;

/// Drops the pages of a memory-mapped external data file behind `bytes` from this process, once
/// they have been read (decoded, or written out); a no-op for any other buffer and in wasm.
/// See `mapped`.
pub fn release_pages(bytes: &[u8]) {
    #[cfg(not(target_arch = "wasm32"))]
    mapped::release(bytes);
    #[cfg(target_arch = "wasm32")]
    let _ = bytes;
}

pub use load::{load_buf, load_bytes, load_file, ExternalData, LoadOptions};
#[cfg(not(target_arch = "wasm32"))]
pub use save::{save_file, save_file_within, Saved};
pub use save::{to_bytes, to_model_proto, DEFAULT_EXTERNAL_THRESHOLD};
