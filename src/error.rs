//! One error type for the crate. Every message names the node, value or field at fault.

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are not a valid ONNX protobuf.
    #[error("cannot decode ONNX model: {0}")]
    Decode(String),
    /// The protobuf decoded but violates the ONNX spec or our limits.
    #[error("invalid model: {0}")]
    Invalid(String),
    /// A size or depth limit was exceeded (checked before allocating).
    #[error("limit exceeded: {0}")]
    Limit(String),
    /// The graph failed `verify()`.
    #[error("graph verification failed: {0}")]
    Verify(String),
    /// The reference backend has no kernel for this op (`also` lists the other missing ops).
    #[error("unsupported op {op_type} (domain '{domain}') at node '{node}'{also}")]
    UnsupportedOp {
        op_type: String,
        domain: String,
        node: String,
        also: String,
    },
    /// A kernel rejected its inputs or attributes.
    #[error("{op_type} node '{node}': {message}")]
    Kernel {
        op_type: String,
        node: String,
        message: String,
    },
    /// A caller-supplied input is missing or has the wrong type or shape.
    #[error("input '{name}': {message}")]
    Input { name: String, message: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Error::Invalid(msg.to_string())
    }
    pub fn limit(msg: impl fmt::Display) -> Self {
        Error::Limit(msg.to_string())
    }
    pub fn io(context: impl fmt::Display, source: std::io::Error) -> Self {
        Error::Io {
            context: context.to_string(),
            source,
        }
    }
}
