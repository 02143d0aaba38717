//! The graph IR: values and nodes in stable-id arenas, with producer/consumer indices.

pub mod node;

pub use node::{attr, Node, NodeId, ValueId};
