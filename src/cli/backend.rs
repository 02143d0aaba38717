//! `--backend reference|webgpu` for `run` and `bench`: one prepared runner per graph.

use std::collections::HashMap;

use crate::ir::Model;
use crate::limits::Limits;
use crate::runtime::reference::Executor;
use crate::runtime::webgpu::{Gpu, GpuSession};
use crate::tensor::Tensor;
use crate::Result;

pub(crate) use crate::pipeline::Backend;

impl Backend {
    /// The device, for webgpu. No adapter is an error that names the way back.
    pub(crate) fn gpu(self) -> Result<Option<Gpu>> {
        match self {
            Backend::Reference => Ok(None),
            Backend::Webgpu => pollster::block_on(Gpu::new()).map(Some).map_err(|e| {
                crate::Error::Other(format!("{e}; `--backend reference` runs on the CPU"))
            }),
        }
    }
}

pub(crate) enum Runner<'m> {
    Reference(Executor<'m>),
    Webgpu(Box<GpuSession>),
}

impl<'m> Runner<'m> {
    /// Prepares `model` for `inputs` (their shapes, for webgpu).
    pub(crate) fn new(
        gpu: Option<&Gpu>,
        model: &'m Model,
        inputs: &HashMap<String, Tensor>,
        limits: &Limits,
    ) -> Result<Runner<'m>> {
        Ok(match gpu {
            None => Runner::Reference(Executor::new(model, limits)?),
            Some(gpu) => Runner::Webgpu(Box::new(pollster::block_on(GpuSession::for_inputs(
                gpu, model, inputs, limits,
            ))?)),
        })
    }

    pub(crate) fn run(&self, inputs: &HashMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        match self {
            Runner::Reference(ex) => ex.run(inputs),
            Runner::Webgpu(s) => pollster::block_on(s.run(inputs)),
        }
    }

    /// Compute dispatches per run (webgpu only).
    pub(crate) fn dispatches(&self) -> Option<usize> {
        match self {
            Runner::Reference(_) => None,
            Runner::Webgpu(s) => Some(s.dispatches()),
        }
    }

    pub(crate) fn executor(&self) -> Option<&Executor<'m>> {
        match self {
            Runner::Reference(ex) => Some(ex),
            Runner::Webgpu(_) => None,
        }
    }
}
