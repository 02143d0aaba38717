//! Conv and FusedConv on WebGPU: one direct-convolution dispatch per node (`wgsl::conv`), the
//! geometry checked by the reference kernel's own [`Spec::geometry`].

use super::*;
use crate::ops::lowering::{NodeCtx, Ty};
use crate::ops::wgsl;
use crate::ops::Lowered;

impl Conv {
    /// The dispatch of this Conv with FusedConv's Z (input 3) and activation (`act`, a WGSL
    /// expression of `v0`), errors naming `op`.
    pub(super) fn lower_with(&self, c: &NodeCtx, op: &'static str, act: &str) -> R<Lowered> {
        for i in (0..4).filter(|&i| c.has_input(i)) {
            if c.ty(i)? != Ty::F32 {
                return Err(format!(
                    "{op} of {} is not on webgpu (float32 and float16 are)",
                    c.input(i)?.dtype
                ));
            }
        }
        let spec = Spec {
            op,
            window: &self.window,
            group: self.group as usize,
            transpose: None,
        };
        let (xs, ws) = (&c.input(0)?.shape, &c.input(1)?.shape);
        let b = c.has_input(2).then(|| c.input(2)).transpose()?;
        let g = spec.geometry(xs, ws, b.map(|b| &b.shape[..]))?;
        let z = c.has_input(3);
        if z && c.input(3)?.shape != g.shape {
            return Err(format!(
                "{op}: Z must have Y's shape {:?}, got {:?}",
                g.shape,
                c.input(3)?.shape
            ));
        }
        if g.shape.iter().product::<usize>() == 0 {
            return Ok(Lowered::Run {
                dispatches: vec![],
                scratch: vec![],
            });
        }
        crate::ops::lowering::run(wgsl::conv(&wgsl::Conv {
            n: xs[0],
            c: xs[1],
            m: g.m,
            cg: g.w_in,
            group: spec.group,
            axes: &g.axes,
            bias: b.is_some(),
            z,
            act,
        }))
    }
}

impl ConvAct {
    /// The activation as a WGSL expression of `v0`.
    pub fn wgsl(self) -> R<String> {
        Ok(match self {
            ConvAct::Identity => "v0".into(),
            ConvAct::Relu => crate::ops::lowering::RELU.into(),
            ConvAct::Tanh => crate::ops::lowering::TANH.into(),
            ConvAct::Sigmoid => crate::ops::lowering::SIGMOID.into(),
            ConvAct::Param(a) => a
                .wgsl()?
                .ok_or("FusedConv: the activation has no webgpu form")?,
        })
    }
}
