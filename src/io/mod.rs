//! Loading and saving models: ONNX protobuf (the `onnx` codec) to the IR and back, external
//! data, limits checked before allocating. Loading also parses every node's attributes through
//! the ops layer, so a bad attribute is a load error naming the node and the attribute.

pub mod load;
pub mod save;

pub use load::{load_buf, load_bytes, load_file, ExternalData, LoadOptions};
#[cfg(not(target_arch = "wasm32"))]
pub use save::{save_file, save_file_within, Saved};
pub use save::{to_bytes, to_model_proto, DEFAULT_EXTERNAL_THRESHOLD};
