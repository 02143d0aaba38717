//! The protobuf codec and nothing above it: prost messages written from `onnx.proto`, and
//! TensorProto <-> `Tensor` decoding with its limits. It knows no IR (`crate::io` loads and
//! saves models).

pub mod proto;
pub mod tensor;
