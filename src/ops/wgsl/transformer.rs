//! Transformer-block kernels: layer norms (plain and with skip/bias), the attention core
//! (scores, masks, softmax and context in one dispatch), and EmbedLayerNormalization.

use super::*;
/// What a layer norm reads besides its input: the row sum is `x + skip + bias` when those are
/// set (SkipLayerNormalization), and it may write that sum out (`input_skip_bias_sum`).
pub struct LayerNorm {
    pub rows: usize,
    pub len: usize,
    pub epsilon: f32,
    /// RMS norm (SimplifiedLayerNormalization): no centering, the mean is 0.
    pub rms: bool,
    /// Elements of the skip input: it repeats every `skip_len` elements (a multiple of `len`).
    pub skip_len: Option<usize>,
    /// Which of (mean, inv_std_dev, sum) outputs are written, as output positions.
    pub mean_out: Option<usize>,
    pub inv_std_out: Option<usize>,
    pub sum_out: Option<usize>,
    /// Positions of the node inputs: x, gamma, beta, skip, bias.
    pub x_in: usize,
    pub gamma_in: usize,
    pub beta_in: Option<usize>,
    pub skip_in: Option<usize>,
    pub bias_in: Option<usize>,
}

pub fn layer_norm(p: &LayerNorm) -> Result<Dispatch, String> {
    let mut reads = vec![Bind::In(p.x_in), Bind::In(p.gamma_in)];
    let mut names = vec!["x", "gamma"];
    if let Some(b) = p.beta_in {
        reads.push(Bind::In(b));
        names.push("beta");
    }
    if let Some(sk) = p.skip_in {
        reads.push(Bind::In(sk));
        names.push("skip");
    }
    if let Some(b) = p.bias_in {
        reads.push(Bind::In(b));
        names.push("bias");
    }
    let mut writes = vec![Bind::Out(0)];
    let mut wnames = vec!["y"];
    for (o, name) in [
        (p.mean_out, "mean"),
        (p.inv_std_out, "inv_std"),
        (p.sum_out, "sum"),
    ] {
        if let Some(o) = o {
            writes.push(Bind::Out(o));
            wnames.push(name);
        }
    }
    let mut s = String::new();
    bindings(
        &mut s,
        &vec![Ty::F32; reads.len()],
        &vec![Ty::F32; writes.len()],
    );
    // Readable aliases for the numbered bindings.
    let alias = |name: &str, list: &[&str], prefix: &str| -> Option<String> {
        list.iter()
            .position(|n| *n == name)
            .map(|i| format!("{prefix}{i}"))
    };
    let x = alias("x", &names, "in").expect("x");
    let gamma = alias("gamma", &names, "in").expect("gamma");
    reduce_fn(&mut s);
    let len = p.len;
    let groups = row_kernel(&mut s, p.rows);
    let mut val = format!("{x}[base + j]");
    if let (Some(skip), Some(skip_len)) = (alias("skip", &names, "in"), p.skip_len) {
        val = format!("{val} + {skip}[(base % {skip_len}u) + j]");
    }
    if let Some(bias) = alias("bias", &names, "in") {
        val = format!("{val} + {bias}[j]");
    }
    let mean = if p.rms {
        "  let mean = 0.0;".to_string()
    } else {
        format!("  var t = 0.0;\n  for (var j = l; j < {len}u; j = j + {WG}u) {{ t = t + ({val}); }}\n  let mean = wg_sum(t, l) / {lenf};", lenf = lit(len.max(1) as f32)?)
    };
    let _ = writeln!(
        s,
        "  let base = r * {len}u;\n{mean}\n  var v = 0.0;\n  for (var j = l; j < {len}u; j = j + {WG}u) {{ let d = ({val}) - mean; v = v + d * d; }}\n  let inv = 1.0 / sqrt(wg_sum(v, l) / {lenf} + {eps});",
        lenf = lit(len.max(1) as f32)?,
        eps = lit(p.epsilon)?
    );
    let beta = alias("beta", &names, "in")
        .map(|b| format!(" + {b}[j]"))
        .unwrap_or_default();
    let mut body = format!("let s = {val}; out0[base + j] = (s - mean) * inv * {gamma}[j]{beta};");
    if let Some(o) = alias("sum", &wnames, "out") {
        let _ = write!(body, " {o}[base + j] = s;");
    }
    let _ = writeln!(
        s,
        "  for (var j = l; j < {len}u; j = j + {WG}u) {{ {body} }}"
    );
    if let Some(o) = alias("mean", &wnames, "out") {
        let _ = writeln!(s, "  if (l == 0u) {{ {o}[r] = mean; }}");
    }
    if let Some(o) = alias("inv_std", &wnames, "out") {
        let _ = writeln!(s, "  if (l == 0u) {{ {o}[r] = inv; }}");
    }
    s.push_str("}\n");
    Ok(Dispatch {
        wgsl: s,
        groups,
        reads,
        writes,
    })
}

/// Attention's second pass: one workgroup per (batch, head, query) over the packed [B·S, 3H]
/// projection in `in0`: scores for every key into workgroup memory (scaled, then the padding
/// mask `in1` [B, S] (int32, key kept where > 0) adds `filter` and causal later keys add the
/// lowest float, as the reference kernel does), softmax, and the weighted sum of V rows.
pub struct AttentionCore {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub filter: f32,
    pub causal: bool,
    pub masked: bool,
}

/// Longest sequence the attention kernel keeps a score row of in workgroup memory.
pub const MAX_ATTENTION_SEQ: usize = 2048;

pub fn attention_core(p: &AttentionCore) -> Result<Dispatch, String> {
    let (s, d, h) = (p.seq, p.head_dim, p.heads * p.head_dim);
    if s > MAX_ATTENTION_SEQ {
        return Err(format!(
            "sequence {s} is longer than the webgpu attention kernel's {MAX_ATTENTION_SEQ}"
        ));
    }
    let mut src = String::new();
    let reads = if p.masked {
        vec![Ty::F32, Ty::I32]
    } else {
        vec![Ty::F32]
    };
    bindings(&mut src, &reads, &[Ty::F32]);
    reduce_fn(&mut src);
    let _ = writeln!(src, "var<workgroup> sc: array<f32, {}>;", s.max(1));
    let groups = row_kernel(&mut src, p.batch * p.heads * s);
    // A later key (causal) gets the lowest float added, padded or not; otherwise a padded key
    // gets the filter (the reference kernel's rule: one additive mask value per score).
    let pad = if p.masked {
        format!("in1[b * {s}u + j] <= 0")
    } else {
        "false".into()
    };
    let later = if p.causal { "j > q" } else { "false" };
    let mask = format!(
        "    if ({later}) {{ x = x + -3.4028234663852886e38; }} else if ({pad}) {{ x = x + {}; }}\n",
        lit(p.filter)?
    );
    let _ = writeln!(
        src,
        "  let q = r % {s}u;\n  let hd = (r / {s}u) % {heads}u;\n  let b = r / ({s}u * {heads}u);\n  let qrow = (b * {s}u + q) * {w}u + hd * {d}u;\n  var m = -3.4028234663852886e38;\n  for (var j = l; j < {s}u; j = j + {WG}u) {{\n    let krow = (b * {s}u + j) * {w}u + {h}u + hd * {d}u;\n    var x = 0.0;\n    for (var t = 0u; t < {d}u; t = t + 1u) {{ x = x + in0[qrow + t] * in0[krow + t]; }}\n    x = x * {scale};\n{mask}    sc[j] = x;\n    m = max(m, x);\n  }}\n  m = wg_max(m, l);\n  var total = 0.0;\n  for (var j = l; j < {s}u; j = j + {WG}u) {{ let e = exp(sc[j] - m); sc[j] = e; total = total + e; }}\n  total = wg_sum(total, l);\n  for (var t = l; t < {d}u; t = t + {WG}u) {{\n    var acc = 0.0;\n    for (var j = 0u; j < {s}u; j = j + 1u) {{ acc = acc + sc[j] * in0[(b * {s}u + j) * {w}u + {h2}u + hd * {d}u + t]; }}\n    out0[(b * {s}u + q) * {h}u + hd * {d}u + t] = acc / total;\n  }}\n}}",
        heads = p.heads,
        w = 3 * h,
        h2 = 2 * h,
        scale = lit(p.scale)?,
    );
    let mut r = vec![Bind::Scratch(0)];
    if p.masked {
        r.push(Bind::In(3));
    }
    Ok(Dispatch {
        wgsl: src,
        groups,
        reads: r,
        writes: vec![Bind::Out(0)],
    })
}

/// EmbedLayerNormalization, one workgroup per token: word + position (+ segment) rows summed,
/// then normalized. Ids are bound-clamped (the reference backend reports bad ids). Inputs by
/// node position: 0 ids, 1 segment ids?, 2 word, 3 position, 4 segment?, 5 gamma, 6 beta,
/// 8 position_ids?.
pub struct Embed {
    pub batch: usize,
    pub seq: usize,
    pub hidden: usize,
    pub words: usize,
    pub positions: usize,
    /// Rows of the segment table, when segments are given.
    pub segments: Option<usize>,
    /// Rows of position_ids ([1, S] or [B, S]), when given.
    pub position_rows: Option<usize>,
    pub epsilon: f32,
    pub sum_out: bool,
}

pub fn embed_layer_norm(p: &Embed) -> Result<Dispatch, String> {
    let mut reads = vec![Bind::In(0)];
    let mut tys = vec![Ty::I32];
    let idx = |b: Bind, t: Ty, reads: &mut Vec<Bind>, tys: &mut Vec<Ty>| {
        reads.push(b);
        tys.push(t);
        reads.len() - 1
    };
    let seg_ids = p
        .segments
        .map(|_| idx(Bind::In(1), Ty::I32, &mut reads, &mut tys));
    let word = idx(Bind::In(2), Ty::F32, &mut reads, &mut tys);
    let pos = idx(Bind::In(3), Ty::F32, &mut reads, &mut tys);
    let seg = p
        .segments
        .map(|_| idx(Bind::In(4), Ty::F32, &mut reads, &mut tys));
    let gamma = idx(Bind::In(5), Ty::F32, &mut reads, &mut tys);
    let beta = idx(Bind::In(6), Ty::F32, &mut reads, &mut tys);
    let pos_ids = p
        .position_rows
        .map(|_| idx(Bind::In(8), Ty::I32, &mut reads, &mut tys));
    let mut writes = vec![Bind::Out(0)];
    if p.sum_out {
        writes.push(Bind::Out(2));
    }
    let mut s = String::new();
    bindings(&mut s, &tys, &vec![Ty::F32; writes.len()]);
    reduce_fn(&mut s);
    let (seq, hid) = (p.seq, p.hidden);
    let groups = row_kernel(&mut s, p.batch * seq);
    let clampi = |e: String, n: usize| format!("u32(clamp({e}, 0i, {}i))", n.saturating_sub(1));
    let _ = writeln!(
        s,
        "  let b = r / {seq}u;\n  let t = r % {seq}u;\n  let wrow = {} * {hid}u;",
        clampi("in0[r]".into(), p.words)
    );
    let prow = match (pos_ids, p.position_rows) {
        (Some(k), Some(rows)) => {
            let at = if rows == 1 {
                "t".to_string()
            } else {
                "r".to_string()
            };
            clampi(format!("in{k}[{at}]"), p.positions)
        }
        _ => clampi("i32(t)".into(), p.positions),
    };
    let _ = writeln!(s, "  let prow = {prow} * {hid}u;");
    let mut val = format!("in{word}[wrow + j] + in{pos}[prow + j]");
    if let (Some(si), Some(st), Some(n)) = (seg_ids, seg, p.segments) {
        let _ = writeln!(
            s,
            "  let srow = {} * {hid}u;",
            clampi(format!("in{si}[r]"), n)
        );
        val = format!("{val} + in{st}[srow + j]");
    }
    let sum = if p.sum_out {
        " out1[r * {hid}u + j] = v;".replace("{hid}", &hid.to_string())
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "  var tot = 0.0;\n  for (var j = l; j < {hid}u; j = j + {WG}u) {{ tot = tot + ({val}); }}\n  let mean = wg_sum(tot, l) / {hf};\n  var var_ = 0.0;\n  for (var j = l; j < {hid}u; j = j + {WG}u) {{ let dd = ({val}) - mean; var_ = var_ + dd * dd; }}\n  let inv = 1.0 / sqrt(wg_sum(var_, l) / {hf} + {eps});\n  for (var j = l; j < {hid}u; j = j + {WG}u) {{ let v = {val}; out0[r * {hid}u + j] = (v - mean) * inv * in{gamma}[j] + in{beta}[j];{sum} }}\n}}",
        hf = lit(hid.max(1) as f32)?,
        eps = lit(p.epsilon)?,
    );
    Ok(Dispatch {
        wgsl: s,
        groups,
        reads,
        writes,
    })
}

/// RotaryEmbedding (com.microsoft and ai.onnx): one thread per element of X, `[batch, heads, seq,
/// head]` (`bnsh`) or `[batch, seq, heads · head]`. Token (b, s) reads the cache row `rows_from`
/// names, clamped to the caches' `rows` (a GPU kernel cannot fail; the reference backend reports
/// a position out of range). The first `rot` elements of each head are rotated in pairs (`i`,
/// `i + rot/2`), or adjacent pairs when `interleaved`.
pub struct Rotary {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head: usize,
    pub rot: usize,
    pub bnsh: bool,
    pub interleaved: bool,
    pub rows_from: RotaryRows,
    pub rows: usize,
}

/// Where a RotaryEmbedding's token (b, s) finds its cache row, and the node's input order.
#[derive(Clone, Copy, PartialEq)]
pub enum RotaryRows {
    /// com.microsoft (x, position_ids, cos, sin) with position_ids `[1]`: row `start + s`.
    Start,
    /// com.microsoft with position_ids `[batch, seq]`: row `position_ids[b, s]`.
    PerToken,
    /// ai.onnx (x, cos, sin, position_ids) with position_ids `[batch or 1, seq]`.
    StandardIds { per_batch: bool },
    /// ai.onnx (x, cos, sin) with caches `[batch or 1, seq, rot/2]`: row `b · seq + s` or `s`.
    StandardTable { per_batch: bool },
}

pub fn rotary(p: &Rotary) -> Dispatch {
    let (h, seq, rot, half) = (p.head, p.seq, p.rot, p.rot / 2);
    let n = p.batch * seq * p.heads * h;
    let mut s = String::new();
    // The cos/sin bindings, and what the position-id binding (in1) is read for.
    let bt = |per_batch: bool| {
        if per_batch {
            format!("b * {seq}u + t")
        } else {
            "t".into()
        }
    };
    let (cos, sin, pos, reads) = match p.rows_from {
        RotaryRows::Start => (
            "in2",
            "in3",
            "in1[0] + i32(t)".to_string(),
            vec![0, 1, 2, 3],
        ),
        RotaryRows::PerToken => (
            "in2",
            "in3",
            format!("in1[b * {seq}u + t]"),
            vec![0, 1, 2, 3],
        ),
        RotaryRows::StandardIds { per_batch } => (
            "in2",
            "in3",
            format!("in1[{}]", bt(per_batch)),
            vec![0, 3, 1, 2],
        ),
        RotaryRows::StandardTable { per_batch } => (
            "in1",
            "in2",
            format!("i32({})", bt(per_batch)),
            vec![0, 1, 2],
        ),
    };
    let types: &[Ty] = if reads.len() == 4 {
        &[Ty::F32, Ty::I32, Ty::F32, Ty::F32]
    } else {
        &[Ty::F32, Ty::F32, Ty::F32]
    };
    bindings(&mut s, types, &[Ty::F32]);
    let (b, t) = if p.bnsh {
        (
            format!("i / {}u", p.heads * seq * h),
            format!("(i / {h}u) % {seq}u"),
        )
    } else {
        (
            format!("i / {}u", seq * p.heads * h),
            format!("(i / {}u) % {seq}u", p.heads * h),
        )
    };
    let (first, next, prev, col) = if p.interleaved {
        (
            "j % 2u == 0u".to_string(),
            "i + 1u".to_string(),
            "i - 1u".to_string(),
            "j / 2u".to_string(),
        )
    } else {
        (
            format!("j < {half}u"),
            format!("i + {half}u"),
            format!("i - {half}u"),
            format!("j % {half}u"),
        )
    };
    let groups = thread_kernel(&mut s, n);
    let _ = writeln!(
        s,
        "  let j = i % {h}u;\n  if (j >= {rot}u) {{ out0[i] = in0[i]; return; }}\n  let b = {b};\n  let t = {t};\n  let row = u32(clamp({pos}, 0i, {last}i));\n  let k = row * {half}u + {col};\n  let c = {cos}[k];\n  let sn = {sin}[k];\n  if ({first}) {{ out0[i] = in0[i] * c - in0[{next}] * sn; }} else {{ out0[i] = in0[{prev}] * sn + in0[i] * c; }}\n}}",
        last = p.rows.saturating_sub(1)
    );
    Dispatch {
        wgsl: s,
        groups,
        reads: reads.into_iter().map(Bind::In).collect(),
        writes: vec![Bind::Out(0)],
    }
}

/// MultiHeadAttention's core for query `[B, S, N·D]` and heads-first key `[B, N, L, D]` and
/// value `[B, N, L, Dv]` (the form `multi_head_attention` emits): one workgroup per (batch, head,
/// query), scores in workgroup memory (scaled, plus the additive `bias` `[B or 1, N or 1, S, L]`
/// when bound), softmax, and the weighted sum of value rows into `[B, S, N·Dv]`.
pub struct MhaCore {
    pub batch: usize,
    pub seq: usize,
    pub kv_seq: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub v_dim: usize,
    pub scale: f32,
    /// The bias's batch and head dims (each 1 or the full size), when there is one.
    pub bias: Option<(usize, usize)>,
    /// Key and value are 3-D [B, L, N·D] (else heads-first [B, N, L, D]).
    pub kv_3d: bool,
    /// An int32 key_padding_mask [B, L] (input 4): keys where it is 0 get this filter added.
    pub key_padding: Option<f32>,
    /// `unidirectional`: a key after the query (query i is token `past + i`) gets the lowest
    /// float added instead.
    pub causal: bool,
    /// Cached keys before the new ones (0: none).
    pub past: usize,
    /// Where key and value are read: inputs 1 and 2, or (after a cache) the present outputs 1
    /// and 2 that `cache_append` wrote.
    pub kv: [Bind; 2],
}

/// present [B, N, P + L, D] = the cache past [B, N, P, D] (binding `past`) followed by the new
/// rows of x [B, L, N·D] (binding `new`, the heads side by side), written to `out`.
pub fn cache_append(
    (b, n, p, l, d): (usize, usize, usize, usize, usize),
    past: Bind,
    new: Bind,
    out: Bind,
) -> Dispatch {
    let total = p + l;
    let mut src = String::new();
    bindings(&mut src, &[Ty::F32, Ty::F32], &[Ty::F32]);
    let groups = thread_kernel(&mut src, b * n * total * d);
    let _ = writeln!(
        src,
        "  let t = i % {d1}u;\n  let j = (i / {d1}u) % {tt}u;\n  let hd = (i / ({d1}u * {tt}u)) % {n1}u;\n  let bb = i / ({d1}u * {tt}u * {n1}u);\n  if (j < {p}u) {{ out0[i] = in0[((bb * {n}u + hd) * {p}u + j) * {d}u + t]; }} else {{ out0[i] = in1[((bb * {l}u + j - {p}u) * {n}u + hd) * {d}u + t]; }}\n}}",
        // Divisors of at least 1: WGSL refuses a division by a constant 0 (no thread runs then).
        tt = total.max(1),
        d1 = d.max(1),
        n1 = n.max(1),
    );
    Dispatch {
        wgsl: src,
        groups,
        reads: vec![past, new],
        writes: vec![out],
    }
}

pub fn mha_core(p: &MhaCore) -> Result<Dispatch, String> {
    let (s, l, n, d, dv) = (p.seq, p.kv_seq, p.heads, p.head_dim, p.v_dim);
    if l > MAX_ATTENTION_SEQ {
        return Err(format!(
            "key sequence {l} is longer than the webgpu attention kernel's {MAX_ATTENTION_SEQ}"
        ));
    }
    let mut src = String::new();
    let mut reads = vec![Ty::F32, Ty::F32, Ty::F32];
    let mut binds = vec![Bind::In(0), p.kv[0], p.kv[1]];
    if p.bias.is_some() {
        reads.push(Ty::F32);
        binds.push(Bind::In(5));
    }
    let kpm = format!("in{}", reads.len());
    if p.key_padding.is_some() {
        reads.push(Ty::I32);
        binds.push(Bind::In(4));
    }
    bindings(&mut src, &reads, &[Ty::F32]);
    reduce_fn(&mut src);
    let _ = writeln!(src, "var<workgroup> sc: array<f32, {}>;", l.max(1));
    let groups = row_kernel(&mut src, p.batch * n * s);
    let mut extra = String::new();
    if let Some((bb, bn)) = p.bias {
        let b = if bb == 1 { "0u" } else { "b" };
        let h = if bn == 1 { "0u" } else { "hd" };
        let _ = writeln!(
            extra,
            "    x = x + in3[(({b} * {bn}u + {h}) * {s}u + q) * {l}u + j];"
        );
    }
    // One additive mask value per score, the causal one winning (the reference kernel's rule).
    let later = match p.causal {
        true => format!("j > q + {}u", p.past),
        false => "false".to_string(),
    };
    let pad = match p.key_padding {
        Some(f) => format!(
            "else if ({kpm}[b * {l}u + j] == 0) {{ x = x + {}; }}",
            lit(f)?
        ),
        None => String::new(),
    };
    if p.causal || p.key_padding.is_some() {
        let _ = writeln!(
            extra,
            "    if ({later}) {{ x = x + -3.4028234663852886e38; }} {pad}"
        );
    }
    // Element t of key/value row j of head hd: heads-first, or 3-D with the heads side by side.
    let (krow, vrow) = if p.kv_3d {
        (
            format!("((b * {l}u + j) * {n}u + hd) * {d}u"),
            format!("((b * {l}u + j) * {n}u + hd) * {dv}u"),
        )
    } else {
        (
            format!("(kbase + j) * {d}u"),
            format!("(kbase + j) * {dv}u"),
        )
    };
    let _ = writeln!(
        src,
        "  let q = r % {s}u;\n  let hd = (r / {s}u) % {n}u;\n  let b = r / ({s}u * {n}u);\n  let qrow = (b * {s}u + q) * {nd}u + hd * {d}u;\n  let kbase = (b * {n}u + hd) * {l}u;\n  var m = -3.4028234663852886e38;\n  for (var j = l; j < {l}u; j = j + {WG}u) {{\n    var x = 0.0;\n    for (var t = 0u; t < {d}u; t = t + 1u) {{ x = x + in0[qrow + t] * in1[{krow} + t]; }}\n    x = x * {scale};\n{extra}    sc[j] = x;\n    m = max(m, x);\n  }}\n  m = wg_max(m, l);\n  var total = 0.0;\n  for (var j = l; j < {l}u; j = j + {WG}u) {{ let e = exp(sc[j] - m); sc[j] = e; total = total + e; }}\n  total = wg_sum(total, l);\n  for (var t = l; t < {dv}u; t = t + {WG}u) {{\n    var acc = 0.0;\n    for (var j = 0u; j < {l}u; j = j + 1u) {{ acc = acc + sc[j] * in2[{vrow} + t]; }}\n    out0[(b * {s}u + q) * {ndv}u + hd * {dv}u + t] = acc / total;\n  }}\n}}",
        nd = n * d,
        ndv = n * dv,
        scale = lit(p.scale)?,
    );
    Ok(Dispatch {
        wgsl: src,
        groups,
        reads: binds,
        writes: vec![Bind::Out(0)],
    })
}
