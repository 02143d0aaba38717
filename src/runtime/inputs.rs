//! Seeded random inputs for parity checks and benchmarks, sized from declared shapes.

use std::collections::HashMap;

use ndarray::{ArrayD, IxDyn};

use crate::ir::{Dim, Model};
use crate::limits::Limits;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// Size used for a symbolic or unknown dim that `--dim` does not set.
pub const DEFAULT_DIM: usize = 8;

/// SplitMix64: tiny, seedable, identical on every platform (native and wasm).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Concrete dims for input `input`: known dims as declared; a symbolic or unnamed dim at axis
/// `i` from `dims["input[i]"]` when given (one axis of one input), else a symbolic one from
/// `dims` by its name and an unnamed (unknown) one from `dims["?"]`, the way such dims print;
/// `DEFAULT_DIM` otherwise.
pub fn concrete_shape(input: &str, shape: &[Dim], dims: &HashMap<String, usize>) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let axis = || dims.get(&format!("{input}[{i}]")).copied();
            match d {
                Dim::Known(v) => (*v).max(0) as usize,
                Dim::Sym(s) => axis()
                    .or_else(|| dims.get(s).copied())
                    .unwrap_or(DEFAULT_DIM),
                Dim::Unknown => axis()
                    .or_else(|| dims.get("?").copied())
                    .unwrap_or(DEFAULT_DIM),
            }
        })
        .collect()
}

/// `dims` plus the sizes a model states as sums: a graph output declared with symbolic dim `T`
/// on an axis along which the graph computes it as a Concat (a decode step's
/// `present_key = Concat(past_key, new keys)`, declared `[batch, heads, total, head]`), or as
/// MultiHeadAttention's present_key/present_value (the fused step), either maybe through a Cast
/// (a float16 model with float32 outputs), makes `T` the sum of the
/// parts' sizes, so that the inputs sized by `T` (the step's attention_mask
/// `[batch, total]`) agree with it. A size given in `dims` is kept; parts of unknown size, or
/// outputs that disagree, state nothing.
pub fn with_stated_sums(model: &Model, dims: &HashMap<String, usize>) -> HashMap<String, usize> {
    let g = &model.graph;
    let mut out = dims.clone();
    let named_by_input = |t: &str| {
        g.inputs.iter().any(|&i| {
            (g.value(i).ty.shape.iter().flatten()).any(|d| matches!(d, Dim::Sym(s) if s == t))
        })
    };
    let mut stated: HashMap<String, Option<usize>> = HashMap::new();
    for &o in &g.outputs {
        // `v`: o, or what o is a Cast of (the float16 converter's keep_io_types casts each
        // output back to float32); its producer computes the sum.
        let v = g.stated_by_output(o);
        let Some(id) = g.producer(v) else {
            continue;
        };
        let node = g.node(id);
        let Some(shape) = g.value(o).ty.shape.as_ref() else {
            continue;
        };
        // (the output's axis, the parts: value and its axis) of a sum the graph computes.
        let (axis, parts) = if node.is("Concat") {
            let rank = shape.len().max(1) as i64;
            let axis = crate::ops::attrs_of::<crate::ops::concat::Concat>(model, node)
                .and_then(|c| c.axis)
                .and_then(|a| usize::try_from(a.rem_euclid(rank)).ok());
            let Some(axis) = axis else { continue };
            (axis, node.inputs.iter().map(|&v| (v, axis)).collect())
        } else if node.domain == crate::ir::model::MS_DOMAIN && node.op_type == "MultiHeadAttention"
        {
            // present_key/present_value (outputs 1, 2): the cache (inputs 6, 7) then the new
            // keys/values (inputs 1, 2: 3-D, their axis 1).
            let Some(k) = (1..3).find(|&k| node.output(k) == Some(v)) else {
                continue;
            };
            let new = node.input(k);
            let new_axis = match new.and_then(|v| g.value(v).ty.rank()) {
                Some(3) => 1,
                _ => continue,
            };
            (2, vec![(node.input(k + 5), 2), (new, new_axis)])
        } else {
            continue;
        };
        let Some(Dim::Sym(t)) = shape.get(axis) else {
            continue;
        };
        if dims.contains_key(t) || !named_by_input(t) {
            continue;
        }
        // A part's size as the inputs get it (`concrete_shape`); unknown, or `T` itself: none.
        let size = |(v, axis): (Option<crate::ir::ValueId>, usize)| -> Option<usize> {
            let v = v?;
            let shape = g.value(v).ty.shape.as_deref()?;
            match shape.get(axis)? {
                Dim::Unknown => None,
                Dim::Sym(s) if s == t => None,
                _ => concrete_shape(g.name(v), shape, dims).get(axis).copied(),
            }
        };
        let sum = parts
            .into_iter()
            .map(size)
            .try_fold(0usize, |acc, x| acc.checked_add(x?));
        let e = stated.entry(t.clone()).or_insert(sum);
        if *e != sum {
            *e = None;
        }
    }
    for (t, size) in stated {
        if let Some(n) = size {
            out.insert(t, n);
        }
    }
    out
}

/// Exclusive upper bound for random integers in `id`: 8, or less where `id` (directly or through
/// a Cast) is the indices of a Gather whose data axis has a smaller static size (a BERT token-type
/// table has 2 rows), or the ids of a com.microsoft EmbedLayerNormalization table.
fn int_bound(model: &Model, id: crate::ir::ValueId) -> u64 {
    let g = &model.graph;
    let mut readers: Vec<_> = g.consumers(id).iter().map(|&n| (n, id)).collect();
    for &n in g.consumers(id) {
        let node = g.node(n);
        if node.is_onnx_domain() && node.op_type == "Cast" {
            if let Some(out) = node.output(0) {
                readers.extend(g.consumers(out).iter().map(|&c| (c, out)));
            }
        }
    }
    readers
        .into_iter()
        .filter_map(|(n, v)| index_rows(g, g.node(n), v))
        .filter(|&d| d > 0)
        .fold(8, u64::min)
}

/// The number of rows `v` indexes when `node` reads it as indices.
fn index_rows(g: &crate::ir::Graph, node: &crate::ir::Node, v: crate::ir::ValueId) -> Option<u64> {
    let (data, axis) = if node.is_onnx_domain() && node.op_type == "Gather" {
        (node.input(1) == Some(v)).then_some(())?;
        let op = crate::ops::parse_any_version(node)?;
        (
            node.input(0)?,
            op.get::<crate::ops::index_ops::Gather>()?.axis,
        )
    } else if node.domain == crate::ir::model::MS_DOMAIN
        && node.op_type == "EmbedLayerNormalization"
    {
        // input_ids → word_embedding, segment_ids → segment_embedding, position_ids →
        // position_embedding.
        let slot = node.inputs.iter().position(|&i| i == Some(v))?;
        let table = [(0, 2), (1, 4), (8, 3)].iter().find(|p| p.0 == slot)?.1;
        (node.input(table)?, 0)
    } else {
        return None;
    };
    let dims = g.value(data).ty.static_shape()?;
    let r = dims.len() as i64;
    let axis = if axis < 0 { axis + r } else { axis };
    usize::try_from(axis)
        .ok()
        .and_then(|a| dims.get(a))
        .map(|&d| d as u64)
}

/// An input named as an attention mask is: `attention_mask`, `encoder_attention_mask`,
/// `mask`, `input_mask`... (case-insensitive).
fn is_mask_name(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with("mask")
}

/// 1 with probability 7/8, else 0.
fn mask_bit(rng: &mut Rng) -> i64 {
    i64::from(!rng.next_u64().is_multiple_of(8))
}

/// Random values for every graph input that has no initializer and is not in `given`.
/// Floats are uniform in [-1, 1); integers in [0, 8), or [0, n) as the indices of a Gather along
/// an axis of static size n < 8 (safe as indices), or 0/1 (mostly 1) in an integer input named
/// as a mask; bools fair coins; strings one to four lowercase letters.
pub fn random_inputs(
    model: &Model,
    given: &HashMap<String, Tensor>,
    dims: &HashMap<String, usize>,
    seed: u64,
    limits: &Limits,
) -> Result<HashMap<String, Tensor>> {
    let g = &model.graph;
    let dims = &with_stated_sums(model, dims);
    let mut rng = Rng::new(seed);
    let mut out = given.clone();
    for &id in &g.inputs {
        let v = g.value(id);
        if given.contains_key(&v.name) || g.initializer(id).is_some() {
            continue;
        }
        let shape = concrete_shape(&v.name, v.ty.shape.as_deref().unwrap_or(&[]), dims);
        let dtype = v.ty.dtype.ok_or_else(|| Error::Input {
            name: v.name.clone(),
            message: "has no declared element type; pass it with --input".into(),
        })?;
        let bits = dtype.bits().unwrap_or(8);
        let as_i64: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let n = limits.check_dims(&format!("input '{}'", v.name), &as_i64, bits)? as usize;
        let ix = IxDyn(&shape);
        // Generated in the compute type, then stored as the declared type (float16 rounds;
        // small integer types get values within their range).
        let span = 1u64 << (bits.clamp(1, 63) - 1);
        let t = match dtype.compute() {
            Some(DType::F32) => Tensor::F32(ArrayD::from_shape_simple_fn(ix, || rng.next_f32())),
            Some(DType::F64) => {
                Tensor::F64(ArrayD::from_shape_simple_fn(ix, || rng.next_f32() as f64))
            }
            // An integer attention mask holds 0 (padding) or 1 (a token), as transformers and
            // onnxruntime read it; mostly ones. Counts up to 7 broke models that derive
            // positions from its cumulative sum (OPT's ran past their table).
            Some(DType::I64) if is_mask_name(&v.name) => {
                Tensor::I64(ArrayD::from_shape_simple_fn(ix, || mask_bit(&mut rng)))
            }
            Some(DType::I32) if is_mask_name(&v.name) => {
                Tensor::I32(ArrayD::from_shape_simple_fn(ix, || {
                    mask_bit(&mut rng) as i32
                }))
            }
            Some(DType::I64) => {
                let m = int_bound(model, id).min(span);
                Tensor::I64(ArrayD::from_shape_simple_fn(ix, || {
                    (rng.next_u64() % m) as i64
                }))
            }
            Some(DType::I32) => {
                let m = int_bound(model, id).min(span);
                Tensor::I32(ArrayD::from_shape_simple_fn(ix, || {
                    (rng.next_u64() % m) as i32
                }))
            }
            Some(DType::BOOL) => {
                Tensor::Bool(ArrayD::from_shape_simple_fn(ix, || rng.next_u64() & 1 == 1))
            }
            // Strings: one to four lowercase ASCII letters.
            Some(DType::STRING) => Tensor::Str(ArrayD::from_shape_simple_fn(ix, || {
                let r = rng.next_u64();
                (0..1 + r % 4)
                    .map(|i| char::from(b'a' + ((r >> (8 + 5 * i)) % 26) as u8))
                    .collect()
            })),
            _ => None.ok_or_else(|| Error::Input {
                name: v.name.clone(),
                message: format!("cannot generate random {dtype} data"),
            })?,
        };
        let t = t.narrow(dtype).ok_or_else(|| Error::Input {
            name: v.name.clone(),
            message: format!("cannot generate random {dtype} data"),
        })?;
        debug_assert_eq!(t.len(), n);
        out.insert(v.name.clone(), t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_dims_take_the_question_mark_size() {
        let shape = [
            Dim::Unknown,
            Dim::Known(3),
            Dim::Sym("S".into()),
            Dim::Unknown,
        ];
        assert_eq!(
            concrete_shape("x", &shape, &HashMap::new()),
            vec![8, 3, 8, 8]
        );
        let mut dims: HashMap<String, usize> = [("?".to_string(), 48), ("S".to_string(), 5)].into();
        assert_eq!(concrete_shape("x", &shape, &dims), vec![48, 3, 5, 48]);
        // One axis of one input: before the name and before `?`; a known dim stays.
        dims.insert("x[0]".into(), 1);
        dims.insert("x[2]".into(), 9);
        dims.insert("x[1]".into(), 7);
        assert_eq!(concrete_shape("x", &shape, &dims), vec![1, 3, 9, 48]);
        assert_eq!(concrete_shape("y", &shape, &dims), vec![48, 3, 5, 48]);
    }
    use crate::builder::{dims, GraphBuilder};

    #[test]
    fn integer_masks_are_zeros_and_ones() {
        let mut b = GraphBuilder::new("g", 17);
        let mask = b.input("attention_mask", DType::I64, dims(&[2, 64]));
        let small = b.input("Input_Mask", DType::I32, dims(&[64]));
        let ids = b.input("input_ids", DType::I64, dims(&[64]));
        for (v, name) in [(mask, "A"), (small, "B"), (ids, "C")] {
            let y = b.op("Identity", &[v], vec![]);
            b.output(y, name);
        }
        let m = b.build();
        let got =
            random_inputs(&m, &HashMap::new(), &HashMap::new(), 0, &Limits::default()).unwrap();
        assert_eq!(got["Input_Mask"].dtype(), DType::I32);
        for name in ["attention_mask", "Input_Mask"] {
            let v = got[name].to_i64_vec().unwrap();
            let ones = v.iter().filter(|&&x| x == 1).count();
            assert!(v.iter().all(|&x| x == 0 || x == 1), "{name}: {v:?}");
            assert!(ones > v.len() / 2 && ones < v.len(), "{name}: {v:?}");
        }
        let ids = got["input_ids"].to_i64_vec().unwrap();
        assert!(ids.iter().any(|&v| v > 1), "{ids:?}");
    }

    #[test]
    fn gather_indices_stay_inside_a_small_table() {
        let mut b = GraphBuilder::new("g", 17);
        let table = b.initializer("types", &Tensor::F32(ArrayD::zeros(IxDyn(&[2, 4]))));
        let ids = b.input("token_type_ids", DType::I64, dims(&[64]));
        let other = b.input("other", DType::I32, dims(&[64]));
        let emb = b.op("Gather", &[table, ids], vec![]);
        b.output(emb, "E");
        // Marking it an output renames the input to "O".
        b.output(other, "O");
        let m = b.build();
        let lim = Limits::default();
        let got = random_inputs(&m, &HashMap::new(), &HashMap::new(), 0, &lim).unwrap();
        let ids = got["token_type_ids"].to_i64_vec().unwrap();
        assert!(ids.iter().all(|&v| (0..2).contains(&v)), "{ids:?}");
        assert!(ids.contains(&0) && ids.contains(&1), "{ids:?}");
        let other = got["O"].to_i64_vec().unwrap();
        assert!(other.iter().all(|&v| (0..8).contains(&v)), "{other:?}");
        assert!(other.iter().any(|&v| v >= 2), "{other:?}");
    }

    #[test]
    fn cast_ids_of_an_embed_layer_norm_stay_inside_its_tables() {
        let mut b = GraphBuilder::new("g", 17);
        b.import(crate::ir::model::MS_DOMAIN, 1);
        let f32s = |b: &mut GraphBuilder, name: &str, shape: &[usize]| {
            b.initializer(name, &Tensor::F32(ArrayD::zeros(IxDyn(shape))))
        };
        let (word, pos, seg) = (
            f32s(&mut b, "w", &[5, 4]),
            f32s(&mut b, "p", &[6, 4]),
            f32s(&mut b, "s", &[2, 4]),
        );
        let (gamma, beta) = (f32s(&mut b, "g", &[4]), f32s(&mut b, "b", &[4]));
        let ids = b.input("ids", DType::I64, dims(&[4, 16]));
        let seg_ids = b.input("seg_ids", DType::I64, dims(&[4, 16]));
        let to = vec![crate::ir::attr::int("to", 6)];
        let ids32 = b.op("Cast", &[ids], to.clone());
        let seg32 = b.op("Cast", &[seg_ids], to);
        let ins = [ids32, seg32, word, pos, seg, gamma, beta].map(Some);
        let y = b.node(
            crate::ir::model::MS_DOMAIN,
            "EmbedLayerNormalization",
            &ins,
            1,
            vec![],
        );
        b.output(y[0], "Y");
        let m = b.build();
        let lim = Limits::default();
        let got = random_inputs(&m, &HashMap::new(), &HashMap::new(), 0, &lim).unwrap();
        let ids = got["ids"].to_i64_vec().unwrap();
        assert!(
            ids.iter().all(|&v| (0..5).contains(&v)) && ids.contains(&4),
            "{ids:?}"
        );
        let seg = got["seg_ids"].to_i64_vec().unwrap();
        assert!(
            seg.iter().all(|&v| (0..2).contains(&v)) && seg.contains(&1),
            "{seg:?}"
        );
    }
}
