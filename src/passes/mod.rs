//! Graph passes: cleanup rules and fusions, all run by one rewrite engine.

pub mod attention_mask;
pub mod const_fold;
pub mod cse;
pub mod dce;
pub mod fold_shapes;
pub mod fuse_add_eyelike;
pub mod fuse_attention;
pub mod fuse_bias_gelu;
pub mod fuse_conv_activation;
pub mod fuse_conv_affine;
pub mod fuse_conv_batchnorm;
pub mod fuse_dynamic_quant_matmul;
pub mod fuse_elementwise;
pub mod fuse_embed_layer_norm;
pub mod fuse_fast_gelu;
pub mod fuse_gelu;
pub mod fuse_gemm_activation;
pub mod fuse_hard_swish;
pub mod fuse_hard_swish_clip;
pub mod fuse_layer_norm;
pub mod fuse_matmul_nbits;
pub mod fuse_mha;
pub mod fuse_pad_conv;
pub mod fuse_quick_gelu;
pub mod fuse_rms_norm;
pub mod fuse_rotary;
mod fuse_rotary_interleaved;
pub mod fuse_skip_layer_norm;
pub mod gemm_to_matmul;
pub mod grouped_query;
pub mod head_split;
pub mod identity;
pub mod matchers;
pub mod mha_mask;
pub mod mha_query;
pub mod rewrite;
pub mod rotary_standard;
pub mod specialize;
pub mod target;

use std::sync::LazyLock;

use crate::ir::Model;
use crate::{Error, Result};
pub use rewrite::{
    Anchors, Engine, NewNode, NewValue, NodeRef, Patch, Proposal, Rejection, RewriteEvent, Rule,
    RuleKind, StopReason, Trace, ValueRef,
};

/// Every rule, in the order the engine runs them: the cleanup rules, then the fusions
/// (layer_norm and rms_norm before skip_layer_norm, gelu before bias_gelu: the later rule works on the
/// earlier one's output; embed_layer_norm before skip_layer_norm, which would otherwise take a
/// batch-1 embedding sum as a residual), then the backend lowering (deferred: it fuses what the
/// others leave at their fixed point). Each rule states its name, kind and anchors itself.
pub static REGISTRY: &[&(dyn Rule + Sync)] = &[
    &dce::DeadNodeElimination,
    &identity::IdentityElimination,
    &identity::ConcatEmpty,
    &const_fold::ConstantFolding,
    &fold_shapes::ShapeFold,
    &fold_shapes::ReshapeTarget,
    &fold_shapes::ReshapeNoop,
    &cse::CommonSubexpressions,
    &grouped_query::GroupedQueryHeads,
    &head_split::HeadSplit,
    &gemm_to_matmul::GemmToMatMul,
    &fuse_add_eyelike::FuseAddEyeLike,
    &fuse_matmul_nbits::FuseMatMulNBits,
    &fuse_dynamic_quant_matmul::FuseDynamicQuantMatMul,
    &fuse_layer_norm::FuseLayerNorm,
    &fuse_rms_norm::FuseRmsNorm,
    &fuse_embed_layer_norm::FuseEmbedLayerNorm,
    &fuse_skip_layer_norm::FuseSkipLayerNorm,
    &fuse_gelu::FuseGelu,
    &fuse_bias_gelu::FuseBiasGelu,
    &fuse_fast_gelu::FuseFastGelu,
    &fuse_quick_gelu::FuseQuickGelu,
    &fuse_hard_swish::FuseHardSwish,
    &fuse_hard_swish_clip::FuseHardSwishClip,
    &fuse_rotary::FuseRotary,
    &rotary_standard::RotaryStandard,
    &fuse_attention::FuseAttention,
    &fuse_mha::FuseMultiHeadAttention,
    &fuse_pad_conv::FusePadConv,
    &fuse_conv_batchnorm::FuseConvBatchNorm,
    &fuse_conv_affine::FuseConvAffine,
    &fuse_gemm_activation::FuseGemmActivation,
    &fuse_conv_activation::FuseConvActivation,
    &fuse_elementwise::FuseElementwise,
];

/// Names of the registered rules of `kind`, in run order.
pub fn names(kind: RuleKind) -> Vec<&'static str> {
    REGISTRY
        .iter()
        .filter(|r| r.kind() == kind)
        .map(|r| r.name())
        .collect()
}

/// Every default rule, in the order the engine runs them (the default of `optimize` and of the
/// CLI): the cleanups and fusions. Models they produce stay runnable by onnxruntime.
pub static ALL_RULES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    REGISTRY
        .iter()
        .filter(|r| r.kind() != RuleKind::BackendLowering)
        .map(|r| r.name())
        .collect()
});

/// Rules a backend applies to its own copy of a model at prepare time: they make `ai.fuselab` ops
/// that only fuselab's backends run (onnxruntime has none), so they are not in `ALL_RULES` and a
/// saved model never gets them unless asked for by name (`--rules ...,fused_elementwise`).
pub static BACKEND_LOWERING_RULES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| names(RuleKind::BackendLowering));

/// The rule called `name`.
pub fn rule(name: &str) -> Option<&'static (dyn Rule + Sync)> {
    REGISTRY.iter().copied().find(|r| r.name() == name)
}

/// Rules by name (the default ones and the opt-in `BACKEND_LOWERING_RULES`); an unknown name is
/// an error listing the known ones.
pub fn rules(names: &[&str]) -> Result<Vec<Box<dyn Rule>>> {
    names
        .iter()
        .map(|n| {
            let r = rule(n).ok_or_else(|| {
                Error::Other(format!(
                    "unknown rule '{n}'; known rules: {}; opt-in: {}",
                    ALL_RULES.join(", "),
                    BACKEND_LOWERING_RULES.join(", ")
                ))
            })?;
            Ok(Box::new(r) as Box<dyn Rule>)
        })
        .collect()
}

/// Runs `names` (the default `ALL_RULES` when empty) to a fixed point.
pub fn optimize(model: &mut Model, names: &[&str]) -> Result<Trace> {
    let names = if names.is_empty() {
        ALL_RULES.as_slice()
    } else {
        names
    };
    Engine::new(rules(names)?).run(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_rules_have_distinct_names_and_opt_in_rules_are_deferred() {
        for (i, r) in REGISTRY.iter().enumerate() {
            assert!(
                REGISTRY[..i].iter().all(|o| o.name() != r.name()),
                "two rules are called '{}'",
                r.name()
            );
            assert_eq!(rule(r.name()).map(|f| f.name()), Some(r.name()));
        }
        assert_eq!(
            ALL_RULES.len() + BACKEND_LOWERING_RULES.len(),
            REGISTRY.len()
        );
        for n in BACKEND_LOWERING_RULES.iter() {
            assert!(!ALL_RULES.contains(n), "{n} must stay opt-in");
            assert!(rule(n).unwrap().deferred(), "{n}");
        }
        let e = rules(&["nope"]).err().unwrap().to_string();
        assert!(e.contains("opt-in: fused_elementwise"), "{e}");
    }
}
