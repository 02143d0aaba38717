//! Backends that execute a graph, and what both sides of a comparison need.

pub mod inputs;
pub mod parity;
pub mod partial;
pub mod reference;
pub mod webgpu;
