//! com.microsoft FusedConv: Conv, then Z added, then one activation of onnxruntime's list.

#[allow(unused_imports)]
use super::*;
use crate::ops::activation::{act_in_place, map_elems_in_place};

/// FusedConv's activation: `activation` with its `activation_params`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConvAct {
    /// No `activation` attribute.
    Identity,
    Relu,
    Tanh,
    Sigmoid,
    /// LeakyRelu (alpha), Clip (min, max) and HardSigmoid (alpha, beta) as activation.rs has them.
    Param(Act),
}

impl ConvAct {
    fn read(a: &Attrs) -> R<ConvAct> {
        let Some(name) = a.string("activation")? else {
            return Ok(ConvAct::Identity);
        };
        let params = a.floats("activation_params")?.unwrap_or_default();
        let want = |n: usize| -> R<&[f32]> {
            if params.len() == n {
                Ok(&params)
            } else {
                Err(format!(
                    "activation {name} takes {n} 'activation_params', got {}",
                    params.len()
                ))
            }
        };
        Ok(match name.as_str() {
            "Relu" => ConvAct::Relu,
            "Tanh" => ConvAct::Tanh,
            "Sigmoid" => ConvAct::Sigmoid,
            "LeakyRelu" => ConvAct::Param(Act::LeakyRelu { alpha: want(1)?[0] }),
            "Clip" => {
                let p = want(2)?;
                ConvAct::Param(Act::Clip {
                    lo: p[0] as f64,
                    hi: p[1] as f64,
                })
            }
            "HardSigmoid" => {
                let p = want(2)?;
                ConvAct::Param(Act::HardSigmoid {
                    alpha: p[0],
                    beta: p[1],
                })
            }
            _ => {
                return Err(format!(
                    "attribute 'activation' {name:?} is not supported (Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid)"
                ))
            }
        })
    }

    #[cfg_attr(target_arch = "x86_64", inline(always))]
    fn eval<T: Fp>(self, x: T) -> T {
        match self {
            ConvAct::Identity => x,
            ConvAct::Relu => max_nan(x, T::ZERO),
            ConvAct::Tanh => x.tanh(),
            ConvAct::Sigmoid => T::ONE / (T::ONE + (-x).exp()),
            ConvAct::Param(a) => a.eval(x),
        }
    }
}

#[derive(Debug)]
pub struct FusedConv {
    pub conv: Conv,
    pub activation: ConvAct,
}

impl FusedConv {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(FusedConv {
            conv: Conv::read(a)?,
            activation: ConvAct::read(a)?,
        }))
    }
}

impl Op for FusedConv {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: cx.input(0).dtype,
            shape: self.conv.infer_shape(cx, 0, 1),
        }]
    }
    fn kernel(&self) -> Kernel {
        fused_conv
    }
    /// Conv's dispatch with Z and the activation in its epilogue.
    fn lower(&self, c: &crate::ops::NodeCtx) -> R<crate::ops::Lowered> {
        self.conv
            .lower_with(c, "FusedConv", &self.activation.wgsl()?)
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

pub(super) fn fused_conv(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "FusedConv";
    let p = ctx.attrs::<FusedConv>()?;
    let y = p
        .conv
        .run(ctx, OP, &inputs[..inputs.len().min(3)])?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{OP}: internal: Conv gave no output"))?;
    fn finish<T: Fp>(mut y: ArrayD<T>, z: Option<&Tensor>, act: ConvAct) -> R<ArrayD<T>> {
        if let Some(z) = z {
            let z =
                <T as MathElem>::view(z).ok_or_else(|| type_mismatch(OP, T::DTYPE, z.dtype()))?;
            if z.shape() != y.shape() {
                return Err(format!(
                    "{OP}: Z must have Y's shape {:?}, got {:?}",
                    y.shape(),
                    z.shape()
                ));
            }
            y.zip_mut_with(z, |v, &z| *v = *v + z);
        }
        // One loop per activation (no branch on it per element).
        match act {
            ConvAct::Identity => {}
            ConvAct::Relu => map_elems_in_place(&mut y, |v| ConvAct::Relu.eval(v)),
            ConvAct::Tanh => map_elems_in_place(&mut y, |v| ConvAct::Tanh.eval(v)),
            ConvAct::Sigmoid => map_elems_in_place(&mut y, |v| ConvAct::Sigmoid.eval(v)),
            ConvAct::Param(a) => act_in_place(&mut y, a),
        }
        Ok(y)
    }
    let z = opt_input(inputs, 3);
    Ok(vec![match y {
        Tensor::F32(y) => Tensor::F32(finish(y, z, p.activation)?),
        Tensor::F64(y) => Tensor::F64(finish(y, z, p.activation)?),
        y => return Err(unsupported_type(OP, y.dtype())),
    }])
}
