//! Graph passes: cleanup rules and fusions, all run by one rewrite engine.

pub mod attention_mask;
pub mod const_fold;
pub mod cse;
pub mod dce;
pub mod fold_shapes;
pub mod fuse_add_eyelike;
pub mod fuse_attention;
pub mod fuse_bias_gelu;
pub mod fuse_elementwise;
pub mod fuse_embed_layer_norm;
pub mod fuse_fast_gelu;
pub mod fuse_gelu;
pub mod fuse_gemm_activation;
pub mod fuse_layer_norm;
pub mod fuse_skip_layer_norm;
pub mod gemm_to_matmul;
pub mod identity;
pub mod matchers;
pub mod rewrite;
pub mod specialize;

use crate::ir::Model;
use crate::{Error, Result};
pub use rewrite::{
    Engine, NodeRef, Patch, Proposal, Rejection, RewriteEvent, Rule, StopReason, Trace,
};

/// Rules that clean up or canonicalize rather than fuse, in the order the engine runs them.
pub const CLEANUP_RULES: &[&str] = &[
    "dce",
    "identity",
    "const_fold",
    "shape_fold",
    "reshape_target",
    "reshape_noop",
    "cse",
    "gemm_to_matmul",
];

/// Fusion rules, run after the cleanup rules in each sweep (layer_norm before skip_layer_norm,
/// gelu before bias_gelu: the later rule works on the earlier one's output; embed_layer_norm
/// before skip_layer_norm, which would otherwise take a batch-1 embedding sum as a residual).
pub const FUSION_RULES: &[&str] = &[
    "add_eyelike",
    "layer_norm",
    "embed_layer_norm",
    "skip_layer_norm",
    "gelu",
    "bias_gelu",
    "fast_gelu",
    "attention",
    "gemm_activation",
];

/// Rules a backend applies to its own copy of a model at prepare time: they make `ai.fuselab` ops
/// that only fuselab's backends run (onnxruntime has none), so they are not in `ALL_RULES` and a
/// saved model never gets them unless asked for by name (`--rules ...,fused_elementwise`).
/// `fused_elementwise` is deferred: it fuses what the other rules leave at their fixed point.
pub const BACKEND_LOWERING_RULES: &[&str] = &["fused_elementwise"];

/// Every default rule, in the order the engine runs them (the default of `optimize` and of the
/// CLI). Models they produce stay runnable by onnxruntime.
pub const ALL_RULES: &[&str] = &{
    const N: usize = CLEANUP_RULES.len() + FUSION_RULES.len();
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < CLEANUP_RULES.len() {
            CLEANUP_RULES[i]
        } else {
            FUSION_RULES[i - CLEANUP_RULES.len()]
        };
        i += 1;
    }
    out
};

/// The rule called `name`.
pub fn rule(name: &str) -> Option<Box<dyn Rule>> {
    Some(match name {
        "dce" => Box::new(dce::DeadNodeElimination),
        "identity" => Box::new(identity::IdentityElimination),
        "const_fold" => Box::new(const_fold::ConstantFolding),
        "shape_fold" => Box::new(fold_shapes::ShapeFold),
        "reshape_target" => Box::new(fold_shapes::ReshapeTarget),
        "reshape_noop" => Box::new(fold_shapes::ReshapeNoop),
        "cse" => Box::new(cse::CommonSubexpressions),
        "gemm_to_matmul" => Box::new(gemm_to_matmul::GemmToMatMul),
        "add_eyelike" => Box::new(fuse_add_eyelike::FuseAddEyeLike),
        "layer_norm" => Box::new(fuse_layer_norm::FuseLayerNorm),
        "skip_layer_norm" => Box::new(fuse_skip_layer_norm::FuseSkipLayerNorm),
        "embed_layer_norm" => Box::new(fuse_embed_layer_norm::FuseEmbedLayerNorm),
        "gelu" => Box::new(fuse_gelu::FuseGelu),
        "bias_gelu" => Box::new(fuse_bias_gelu::FuseBiasGelu),
        "fast_gelu" => Box::new(fuse_fast_gelu::FuseFastGelu),
        "attention" => Box::new(fuse_attention::FuseAttention),
        "gemm_activation" => Box::new(fuse_gemm_activation::FuseGemmActivation),
        "fused_elementwise" => Box::new(fuse_elementwise::FuseElementwise),
        _ => return None,
    })
}

/// Rules by name (the default ones and the opt-in `BACKEND_LOWERING_RULES`); an unknown name is
/// an error listing the known ones.
pub fn rules(names: &[&str]) -> Result<Vec<Box<dyn Rule>>> {
    names
        .iter()
        .map(|n| {
            rule(n).ok_or_else(|| {
                Error::Other(format!(
                    "unknown rule '{n}'; known rules: {}; opt-in: {}",
                    ALL_RULES.join(", "),
                    BACKEND_LOWERING_RULES.join(", ")
                ))
            })
        })
        .collect()
}

/// Runs `names` (the default `ALL_RULES` when empty) to a fixed point.
pub fn optimize(model: &mut Model, names: &[&str]) -> Result<Trace> {
    let names = if names.is_empty() { ALL_RULES } else { names };
    Engine::new(rules(names)?).run(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_rule_exists_under_its_own_name() {
        for &n in ALL_RULES.iter().chain(BACKEND_LOWERING_RULES) {
            assert_eq!(rule(n).map(|r| r.name()), Some(n));
        }
        for n in BACKEND_LOWERING_RULES {
            assert!(!ALL_RULES.contains(n), "{n} must stay opt-in");
            assert!(rule(n).unwrap().deferred(), "{n}");
        }
        let e = rules(&["nope"]).err().unwrap().to_string();
        assert!(e.contains("opt-in: fused_elementwise"), "{e}");
    }
}
