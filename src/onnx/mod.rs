//! The only module that knows protobuf: messages, load, save, external data.

pub mod load;
pub mod proto;
pub mod save;
pub mod tensor;

pub use load::{load_bytes, load_file, ExternalData, LoadOptions};
#[cfg(not(target_arch = "wasm32"))]
pub use save::save_file;
pub use save::{to_bytes, to_model_proto};
