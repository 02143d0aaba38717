//! The runtime a saved model is for (`optimize --target`, the wasm API's `target`, the page's
//! selector). A target picks the default rules and refuses any fused node its runtime would not
//! run where it should: the rule's proposal is rejected with the reason, so the pattern stays as
//! it was or a later rule fuses it another way (multi_head_attention takes what attention may not).
//!
//! Without a target the default rules run and nothing is refused (the book's worked example,
//! `ai.fuselab.AddEyeLike`, comes from a default rule).
//!
//! - `ort-cpu`: onnxruntime's CPU execution provider; the default rules, no `ai.fuselab` op.
//! - `ort-webgpu`: onnxruntime-web's WebGPU execution provider. Only fused ops it has a GPU kernel
//!   for: its contrib kernels are Attention (without mask_index or past), BiasAdd, BiasGelu,
//!   FastGelu, FusedConv, Gelu, GroupQueryAttention, MatMulNBits, MultiHeadAttention, QuickGelu,
//!   RotaryEmbedding, SkipLayerNormalization, SimplifiedLayerNormalization and
//!   SkipSimplifiedLayerNormalization. EmbedLayerNormalization, FusedGemm and
//!   DynamicQuantizeMatMul have none, and an Attention with a mask_index runs on the CPU (checked
//!   in onnxruntime-web 1.31.1's placement log: `tests/js/ort_web.test.mjs`). Its WebGPU
//!   MultiHeadAttention refuses `unidirectional` when the kernel is created (onnxruntime's
//!   contrib_ops/webgpu/bert/multihead_attention.cc), so a causal one is refused here, and a
//!   `key_padding_mask` when it runs ("input `key_padding_mask` not implemented for webgpu",
//!   onnxruntime-web 1.31.1 on T5's encoder), so that one too. Its WebGPU FusedConv reads X, W
//!   and B only (core/providers/webgpu/nn/conv.cc): a residual `Z` would be dropped without an
//!   error (ResNet-18's output off by 3.0 in onnxruntime-web 1.31.1), so a FusedConv with Z is
//!   refused.
//! - `fuselab`: fuselab's own backends; also the backend lowering (`ai.fuselab.FusedElementwise`),
//!   which no other runtime runs.

use crate::ir::{Model, NodeId};
use crate::passes::{
    Anchors, NewNode, Proposal, Rule, RuleKind, ALL_RULES, BACKEND_LOWERING_RULES,
};

/// Where the saved model will run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// onnxruntime's CPU execution provider (the default rules; no ai.fuselab op)
    OrtCpu,
    /// onnxruntime-web's WebGPU execution provider (only fused ops it runs on the GPU)
    OrtWebgpu,
    /// fuselab's backends (adds the ai.fuselab lowering that only fuselab runs)
    Fuselab,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::OrtCpu => "ort-cpu",
            Target::OrtWebgpu => "ort-webgpu",
            Target::Fuselab => "fuselab",
        }
    }

    /// The rules run when none are named.
    pub fn default_rules(self) -> Vec<&'static str> {
        let mut names = ALL_RULES.to_vec();
        if self == Target::Fuselab {
            names.extend(BACKEND_LOWERING_RULES.iter());
        }
        names
    }

    /// Why this target's runtime would not run `node` where it should; `None`: it would.
    pub fn refuses(self, node: &NewNode) -> Option<String> {
        let op = node.op_type.as_str();
        let fuselab_op = node.domain == crate::ir::model::FUSELAB_DOMAIN;
        let why = match self {
            Target::Fuselab => return None,
            _ if fuselab_op => format!("{op} is an ai.fuselab op that only fuselab runs"),
            Target::OrtCpu => return None,
            Target::OrtWebgpu => {
                let ms = crate::ir::model::same_domain(&node.domain, crate::ir::model::MS_DOMAIN);
                let given = |i: usize| node.inputs.get(i).is_some_and(|s| s.is_some());
                match op {
                    "EmbedLayerNormalization" | "FusedGemm" | "DynamicQuantizeMatMul" if ms => {
                        format!("onnxruntime-web has no WebGPU kernel for {op}")
                    }
                    "Attention" if ms && (given(3) || given(4)) => {
                        "onnxruntime-web runs an Attention with mask_index or past on the CPU"
                            .into()
                    }
                    "MultiHeadAttention" if ms && causal_mha(node) => {
                        "onnxruntime-web's WebGPU MultiHeadAttention refuses unidirectional".into()
                    }
                    "FusedConv" if ms && given(3) => {
                        "onnxruntime-web's WebGPU FusedConv ignores the residual input Z".into()
                    }
                    "MultiHeadAttention" if ms && given(4) => {
                        "onnxruntime-web's WebGPU MultiHeadAttention has no key_padding_mask".into()
                    }
                    _ => return None,
                }
            }
        };
        Some(format!("target {}: {why}", self.name()))
    }
}

/// A com.microsoft MultiHeadAttention with `unidirectional = 1`, read through its typed attributes.
fn causal_mha(node: &NewNode) -> bool {
    let mut n = crate::ir::Node::new(&node.op_type, &node.domain);
    n.set_attributes(node.attributes.clone());
    crate::ops::resolve(&n, 1).is_ok_and(|op| {
        op.get::<crate::ops::ms_attention::MultiHeadAttention>()
            .is_some_and(|m| m.unidirectional == 1)
    })
}

/// `rule` as seen by `target`: a proposal adding a node the target refuses becomes a rejection.
pub struct ForTarget {
    pub rule: Box<dyn Rule>,
    pub target: Target,
}

impl Rule for ForTarget {
    fn name(&self) -> &'static str {
        self.rule.name()
    }
    fn kind(&self) -> RuleKind {
        self.rule.kind()
    }
    fn anchors(&self) -> Anchors {
        self.rule.anchors()
    }
    fn deferred(&self) -> bool {
        self.rule.deferred()
    }
    fn propose(&self, model: &Model, node: NodeId) -> Proposal {
        match self.rule.propose(model, node) {
            Proposal::Rewrite(p) => match p.add.iter().find_map(|n| self.target.refuses(n)) {
                Some(why) => Proposal::Reject(why),
                None => Proposal::Rewrite(p),
            },
            other => other,
        }
    }
}

/// `rules` as `target` sees them.
pub fn for_target(rules: Vec<Box<dyn Rule>>, target: Target) -> Vec<Box<dyn Rule>> {
    rules
        .into_iter()
        .map(|rule| Box::new(ForTarget { rule, target }) as Box<dyn Rule>)
        .collect()
}
