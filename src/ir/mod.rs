//! The graph IR: values and nodes in stable-id arenas, with producer/consumer indices.

pub mod expr;
pub mod graph;
pub mod model;
pub mod node;
pub mod types;
pub mod verify;

pub use graph::{Graph, GraphExtra, InitializerInputs, Value};
pub use model::Model;
pub use node::{attr, Node, NodeId, ValueId};
pub use types::{Dim, TensorType};
