//! Backends that execute a graph.

pub mod reference;
