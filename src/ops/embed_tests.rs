//! Unit tests of embed.rs. Expected values come from a plain gather-sum and two-pass layer norm
//! in f64 written here, and from the LayerNormalization kernel run on the gathered sum.

use super::super::common::test_util::*;
use super::super::transformer::layer_norm;
use super::*;
use crate::ir::model::MS_DOMAIN;
use crate::ir::{attr, Node, ValueId};

const B: usize = 2;
const S: usize = 3;
const H: usize = 4;
const V: usize = 5;
const P: usize = 4;
const G: usize = 2;
const EPS: f32 = 1e-5;

/// A node naming `n_out` outputs; `omit` lists output slots left empty.
fn node(n_out: usize, omit: &[usize]) -> Node {
    let mut n = Node::new("EmbedLayerNormalization", MS_DOMAIN);
    n.set_attr(attr::float("epsilon", EPS));
    n.outputs = (0..n_out)
        .map(|i| (!omit.contains(&i)).then_some(ValueId(i as u32)))
        .collect();
    n
}

/// Deterministic, irregular values in about [-2, 2].
fn wave(n: usize, phase: f64) -> Vec<f32> {
    (0..n)
        .map(|i| (2.0 * ((i as f64) * 0.731 + phase).sin() + 0.1 * (i % 3) as f64) as f32)
        .collect()
}

struct Case {
    ids: Tensor,
    seg_ids: Option<Tensor>,
    word: Tensor,
    pos: Tensor,
    seg: Option<Tensor>,
    gamma: Tensor,
    beta: Tensor,
    mask: Option<Tensor>,
    position_ids: Option<Tensor>,
}

fn case() -> Case {
    Case {
        ids: i32s(&[B, S], &[4, 0, 2, 1, 1, 3]),
        seg_ids: Some(i32s(&[B, S], &[0, 1, 1, 0, 0, 1])),
        word: f32s(&[V, H], &wave(V * H, 0.1)),
        pos: f32s(&[P, H], &wave(P * H, 1.3)),
        seg: Some(f32s(&[G, H], &wave(G * H, 2.7))),
        gamma: f32s(&[H], &[1.0, 0.5, -1.5, 2.0]),
        beta: f32s(&[H], &[0.1, -0.2, 0.0, 0.3]),
        mask: None,
        position_ids: None,
    }
}

impl Case {
    fn inputs(&self) -> Vec<Option<&Tensor>> {
        vec![
            Some(&self.ids),
            self.seg_ids.as_ref(),
            Some(&self.word),
            Some(&self.pos),
            self.seg.as_ref(),
            Some(&self.gamma),
            Some(&self.beta),
            self.mask.as_ref(),
            self.position_ids.as_ref(),
        ]
    }

    fn run(&self, n: &Node) -> Result<Vec<Tensor>, String> {
        run_at(embed_layer_norm, n, 1, &self.inputs())
    }

    /// The gathered sum in f64, [B, S, H] row-major: word + segment + position.
    fn ref_sum(&self) -> Vec<f64> {
        let ids = self.ids.to_i64_vec().unwrap();
        let word = self.word.to_f64_vec();
        let pos = self.pos.to_f64_vec();
        let seg = self.seg.as_ref().map(|t| t.to_f64_vec());
        let seg_ids = self.seg_ids.as_ref().map(|t| t.to_i64_vec().unwrap());
        let pids = self.position_ids.as_ref().map(|t| t.to_i64_vec().unwrap());
        let mut out = Vec::new();
        for t in 0..B * S {
            let p = match &pids {
                None => t % S,
                Some(p) if p.len() == S => p[t % S] as usize,
                Some(p) => p[t] as usize,
            };
            for j in 0..H {
                let mut v = word[ids[t] as usize * H + j] + pos[p * H + j];
                if let (Some(seg), Some(sid)) = (&seg, &seg_ids) {
                    v += seg[sid[t] as usize * H + j];
                }
                out.push(v);
            }
        }
        out
    }

    /// Two-pass layer norm of `ref_sum` in f64.
    fn ref_output(&self) -> Vec<f64> {
        let (g, b) = (self.gamma.to_f64_vec(), self.beta.to_f64_vec());
        let mut y = Vec::new();
        for row in self.ref_sum().chunks(H) {
            let mean = row.iter().sum::<f64>() / H as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / H as f64;
            let inv = 1.0 / (var + EPS as f64).sqrt();
            y.extend(
                row.iter()
                    .enumerate()
                    .map(|(j, v)| (v - mean) * inv * g[j] + b[j]),
            );
        }
        y
    }
}

fn assert_vals(got: &Tensor, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape);
    let g = got.to_f64_vec();
    let worst = g
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(worst <= tol, "max diff {worst}: got {g:?}, want {want:?}");
}

fn err(c: &Case, n: &Node) -> String {
    match c.run(n) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn sums_normalizes_and_writes_every_output() {
    let c = case();
    let out = c.run(&node(3, &[])).unwrap();
    assert_eq!(out.len(), 3);
    assert_vals(&out[0], &[B, S, H], &c.ref_output(), 1e-5);
    assert_eq!(out[1], i32s(&[B], &[0, 0]));
    assert_vals(&out[2], &[B, S, H], &c.ref_sum(), 1e-6);
}

#[test]
fn normalization_is_the_layer_norm_kernels() {
    // The same row normalization as LayerNormalization: bit-identical on the same sum.
    let c = case();
    let out = c.run(&node(3, &[])).unwrap();
    let mut ln = Node::new("LayerNormalization", "");
    ln.set_attr(attr::float("epsilon", EPS));
    ln.outputs = vec![Some(ValueId(0))];
    let y = run_at(
        layer_norm,
        &ln,
        17,
        &[Some(&out[2]), Some(&c.gamma), Some(&c.beta)],
    )
    .unwrap();
    assert_eq!(y[0], out[0]);
}

#[test]
fn without_segment_inputs() {
    let mut c = case();
    c.seg_ids = None;
    c.seg = None;
    let out = c.run(&node(3, &[])).unwrap();
    assert_vals(&out[0], &[B, S, H], &c.ref_output(), 1e-5);
    assert_vals(&out[2], &[B, S, H], &c.ref_sum(), 1e-6);
}

#[test]
fn position_ids_of_one_row_or_per_batch() {
    let mut c = case();
    c.position_ids = Some(i32s(&[1, S], &[2, 0, 3]));
    let out = c.run(&node(3, &[])).unwrap();
    assert_vals(&out[2], &[B, S, H], &c.ref_sum(), 1e-6);
    c.position_ids = Some(i32s(&[B, S], &[3, 3, 0, 1, 2, 0]));
    let out = c.run(&node(3, &[])).unwrap();
    assert_vals(&out[2], &[B, S, H], &c.ref_sum(), 1e-6);
    assert_vals(&out[0], &[B, S, H], &c.ref_output(), 1e-5);
}

#[test]
fn position_ids_let_the_sequence_exceed_the_position_table() {
    let mut c = case();
    c.ids = i32s(&[1, 6], &[0, 1, 2, 3, 4, 0]);
    c.seg_ids = None;
    c.seg = None;
    let e = err(&c, &node(2, &[]));
    assert!(
        e.contains("sequence length 6 exceeds position_embedding's 4 rows"),
        "{e}"
    );
    c.position_ids = Some(i32s(&[1, 6], &[0, 1, 2, 3, 0, 1]));
    let out = c.run(&node(2, &[])).unwrap();
    assert_eq!(out[0].shape(), [1, 6, H]);
}

#[test]
fn mask_index_counts_ones_per_batch_row() {
    let mut c = case();
    c.mask = Some(i32s(&[B, S], &[1, 1, 0, 1, 0, 1]));
    let out = c.run(&node(2, &[])).unwrap();
    assert_eq!(out[1], i32s(&[B], &[2, 2]));
    // Only entries equal to 1 count (as onnxruntime's CPU kernel does).
    c.mask = Some(i32s(&[B, S], &[2, 1, 1, 0, 0, 0]));
    let out = c.run(&node(2, &[])).unwrap();
    assert_eq!(out[1], i32s(&[B], &[2, 0]));
}

#[test]
fn omitted_outputs_are_placeholders() {
    let c = case();
    let out = c.run(&node(1, &[])).unwrap();
    assert_eq!(out.len(), 1);
    assert_vals(&out[0], &[B, S, H], &c.ref_output(), 1e-5);
    let out = c.run(&node(3, &[1])).unwrap();
    assert_eq!(out[1].len(), 0);
    assert_vals(&out[2], &[B, S, H], &c.ref_sum(), 1e-6);
    let out = c.run(&node(3, &[2])).unwrap();
    assert_eq!(out[2].len(), 0);
    let e = err(&c, &node(4, &[]));
    assert!(e.contains("at most 3"), "{e}");
}

#[test]
fn empty_batch_and_empty_sequence() {
    let mut c = case();
    c.seg_ids = None;
    c.seg = None;
    c.ids = i32s(&[0, S], &[]);
    let out = c.run(&node(2, &[])).unwrap();
    assert_eq!(out[0].shape(), [0, S, H]);
    assert_eq!(out[1].shape(), [0]);
    c.ids = i32s(&[B, 0], &[]);
    c.mask = Some(i32s(&[B, 0], &[]));
    let out = c.run(&node(2, &[])).unwrap();
    assert_eq!(out[0].shape(), [B, 0, H]);
    assert_eq!(out[1], i32s(&[B], &[0, 0]));
}

#[test]
fn ids_outside_their_tables_are_errors() {
    let mut c = case();
    c.ids = i32s(&[B, S], &[4, 0, 2, 1, 5, 3]);
    let e = err(&c, &node(2, &[]));
    assert!(
        e.contains("input_ids[1, 1] = 5 is out of range: word_embedding has 5 rows"),
        "{e}"
    );
    c.ids = i32s(&[B, S], &[4, -1, 2, 1, 1, 3]);
    let e = err(&c, &node(2, &[]));
    assert!(e.contains("input_ids[0, 1] = -1 is out of range"), "{e}");
    c.ids = i32s(&[B, S], &[4, i32::MIN, 2, 1, 1, 3]);
    assert!(err(&c, &node(2, &[])).contains("is out of range"));
    let mut c = case();
    c.seg_ids = Some(i32s(&[B, S], &[0, 1, 2, 0, 0, 1]));
    let e = err(&c, &node(2, &[]));
    assert!(
        e.contains("segment_ids[0, 2] = 2 is out of range: segment_embedding has 2 rows"),
        "{e}"
    );
    let mut c = case();
    c.position_ids = Some(i32s(&[1, S], &[0, 4, 1]));
    let e = err(&c, &node(2, &[]));
    assert!(
        e.contains("position_ids[0, 1] = 4 is out of range: position_embedding has 4 rows"),
        "{e}"
    );
}

#[test]
fn wrong_types_are_errors() {
    let mut c = case();
    c.ids = i64s(&[B, S], &[4, 0, 2, 1, 1, 3]);
    assert!(err(&c, &node(2, &[])).contains("input_ids must be int32, got int64"));
    let mut c = case();
    c.word = f64s(&[V, H], &[0.5; V * H]);
    assert!(err(&c, &node(2, &[])).contains("word_embedding must be float32, got float64"));
    let mut c = case();
    c.gamma = f64s(&[H], &[1.0; H]);
    assert!(err(&c, &node(2, &[])).contains("gamma must be float32"));
    let mut c = case();
    c.mask = Some(f32s(&[B, S], &[1.0; B * S]));
    assert!(err(&c, &node(2, &[])).contains("mask must be int32"));
}

#[test]
fn bad_shapes_and_missing_inputs_are_errors() {
    let c = case();
    let mut ins = c.inputs();
    ins[5] = None;
    let e = run_at(embed_layer_norm, &node(2, &[]), 1, &ins).unwrap_err();
    assert!(e.contains("missing required input 5"), "{e}");
    let e = run_at(embed_layer_norm, &node(2, &[]), 1, &ins[..2]).unwrap_err();
    assert!(e.contains("missing required input 2"), "{e}");

    let mut c = case();
    c.ids = i32s(&[B * S], &[4, 0, 2, 1, 1, 3]);
    assert!(err(&c, &node(2, &[])).contains("input_ids must be 2-D"));
    let mut c = case();
    c.seg_ids = Some(i32s(&[1, S], &[0, 1, 1]));
    assert!(err(&c, &node(2, &[])).contains("segment_ids has shape [1, 3]"));
    let mut c = case();
    c.pos = f32s(&[P, H + 1], &wave(P * (H + 1), 0.0));
    assert!(err(&c, &node(2, &[])).contains("position_embedding has hidden size 5"));
    let mut c = case();
    c.word = f32s(&[V * H], &wave(V * H, 0.0));
    assert!(err(&c, &node(2, &[])).contains("word_embedding must be 2-D"));
    let mut c = case();
    c.gamma = f32s(&[H - 1], &[1.0; H - 1]);
    assert!(err(&c, &node(2, &[])).contains("'gamma' has length 3"));
    let mut c = case();
    c.mask = Some(i32s(&[1, S], &[1, 1, 1]));
    assert!(err(&c, &node(2, &[])).contains("mask has shape [1, 3]"));
    let mut c = case();
    c.seg = None;
    assert!(err(&c, &node(2, &[])).contains("segment_ids is given without segment_embedding"));
    let mut c = case();
    c.seg_ids = None;
    assert!(err(&c, &node(2, &[])).contains("segment_embedding is given without segment_ids"));
    let mut c = case();
    c.word = f32s(&[V, 0], &[]);
    assert!(err(&c, &node(2, &[])).contains("hidden size (word_embedding's dim 1) is 0"));
}
