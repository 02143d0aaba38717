//! The only module that knows protobuf: messages, load, save, external data.

pub mod proto;
pub mod tensor;
