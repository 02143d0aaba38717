//! The recurrent ops' kernel: input checks, the per-direction time loop and the gate cells (RNN, GRU, LSTM).

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------------
// Kernel

/// The float types the cells compute in, with their matrix product.
pub(super) trait Cellular: Real {
    /// `a · b` for row-major `a` [m, k] and `b` [k, n], row-major [m, n].
    fn gemm(a: &[Self], b: &[Self], m: usize, k: usize, n: usize) -> Vec<Self>;
}

pub(super) fn views<'a, T>(
    a: &'a [T],
    b: &'a [T],
    m: usize,
    k: usize,
    n: usize,
) -> (ArrayView2<'a, T>, ArrayView2<'a, T>) {
    let a = ArrayView2::from_shape((m, k), a).expect("gemm: a is m x k");
    let b = ArrayView2::from_shape((k, n), b).expect("gemm: b is k x n");
    (a, b)
}

impl Cellular for f32 {
    fn gemm(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let (a, b) = views(a, b, m, k, n);
        let y = sgemm(a, b);
        y.as_slice()
            .map_or_else(|| y.iter().copied().collect(), <[f32]>::to_vec)
    }
}

impl Cellular for f64 {
    fn gemm(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let (a, b) = views(a, b, m, k, n);
        let mut y = vec![0.0; m * n];
        let yv = ArrayViewMut2::from_shape((m, n), &mut y[..]).expect("gemm: y is m x n");
        let mut yv = yv;
        general_mat_mul(1.0, &a, &b, 0.0, &mut yv);
        y
    }
}

pub(super) fn recurrent(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    p: &RnnAttrs,
    cell: Cell,
) -> KernelResult {
    let op = cell.name();
    match input(op, inputs, 0)?.dtype() {
        DType::F32 => run_cell::<f32>(ctx, inputs, p, cell),
        DType::F64 => run_cell::<f64>(ctx, inputs, p, cell),
        t => Err(unsupported_type(op, t)),
    }
}

/// The elements of `a` with its axes permuted by `perm`, row-major.
pub(super) fn permuted<T: Real>(a: &ArrayD<T>, perm: &[usize]) -> Vec<T> {
    a.view()
        .permuted_axes(IxDyn(perm))
        .iter()
        .copied()
        .collect()
}

/// Checks that input `what` has shape `want`.
pub(super) fn check_shape(op: &str, what: &str, got: &[usize], want: &[usize]) -> R<()> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{op}: '{what}' must have shape {want:?}, got {got:?}"
        ))
    }
}

/// Row-major transpose of the `rows` x `cols` block of `m` starting at row `r0` (of a matrix
/// with `cols` columns): [cols, rows].
pub(super) fn transpose_rows<T: Real>(m: &[T], r0: usize, rows: usize, cols: usize) -> Vec<T> {
    let mut t = vec![T::ZERO; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = m[(r0 + r) * cols + c];
        }
    }
    t
}

pub(super) fn run_cell<T: Cellular>(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    p: &RnnAttrs,
    cell: Cell,
) -> KernelResult {
    let op = cell.name();
    let x = required::<T>(op, inputs, 0)?;
    let w = required::<T>(op, inputs, 1)?;
    let r = required::<T>(op, inputs, 2)?;
    let xs = x.shape();
    let &[a0, a1, input_size] = xs else {
        return Err(format!("{op}: X must be 3-D, got shape {xs:?}"));
    };
    let (seq, batch) = if p.batch_major { (a1, a0) } else { (a0, a1) };
    let nd = p.direction.count();
    let g = cell.gates();
    let hidden = match (p.hidden_size, r.shape()) {
        (Some(h), _) => h,
        (None, [_, _, h]) => *h,
        (None, s) => return Err(format!("{op}: R must be 3-D, got shape {s:?}")),
    };
    let gh = hidden
        .checked_mul(g)
        .ok_or_else(|| format!("{op}: hidden_size {hidden} is too large"))?;
    check_shape(op, "W", w.shape(), &[nd, gh, input_size])?;
    check_shape(op, "R", r.shape(), &[nd, gh, hidden])?;
    let b = same_type::<T>(op, inputs, 3)?;
    if let Some(b) = b {
        check_shape(op, "B", b.shape(), &[nd, 2 * gh])?;
    }
    let lens: Vec<usize> = match opt_input(inputs, 4) {
        None => vec![seq; batch],
        Some(t) => {
            let v = t
                .to_i64_vec()
                .filter(|_| matches!(t.dtype(), DType::I32 | DType::I64))
                .ok_or_else(|| format!("{op}: 'sequence_lens' must be int32, got {}", t.dtype()))?;
            check_shape(op, "sequence_lens", t.shape(), &[batch])?;
            v.iter()
                .map(|&l| {
                    usize::try_from(l)
                        .ok()
                        .filter(|&l| l <= seq)
                        .ok_or_else(|| {
                            format!("{op}: sequence_lens value {l} is outside [0, {seq}]")
                        })
                })
                .collect::<R<_>>()?
        }
    };
    let state_shape = if p.batch_major {
        [batch, nd, hidden]
    } else {
        [nd, batch, hidden]
    };
    // An initial state as [D, batch, H], row-major.
    let state_in = |i: usize, what: &str| -> R<Option<Vec<T>>> {
        match same_type::<T>(op, inputs, i)? {
            None => Ok(None),
            Some(s) => {
                check_shape(op, what, s.shape(), &state_shape)?;
                Ok(Some(if p.batch_major {
                    permuted(s, &[1, 0, 2])
                } else {
                    elements(s).into_owned()
                }))
            }
        }
    };
    let h0 = state_in(5, "initial_h")?;
    let (c0, peep) = if let Cell::Lstm { .. } = cell {
        let c0 = state_in(6, "initial_c")?;
        let peep = same_type::<T>(op, inputs, 7)?;
        if let Some(pp) = peep {
            check_shape(op, "P", pp.shape(), &[nd, 3 * hidden])?;
        }
        (c0, peep)
    } else {
        (None, None)
    };
    let (n_out, want) = wanted(ctx, op, cell.outputs())?;
    // Y too is optional here: a node that names only Y_h (and Y_c) does not get it computed.
    let mut want = want;
    want[0] = ctx.node.outputs.is_empty() || ctx.node.output(0).is_some();
    let y_shape = if p.batch_major {
        vec![batch, seq, nd, hidden]
    } else {
        vec![seq, nd, batch, hidden]
    };
    let bits = T::DTYPE.bits().unwrap_or(64);
    // The working buffers: the input products for a whole direction, the outputs.
    check_out(ctx, op, &[seq, batch, gh], bits)?;
    check_out(ctx, op, &y_shape, bits)?;
    check_out(ctx, op, &state_shape, bits)?;

    // X as [seq, batch, input].
    let xv = if p.batch_major {
        permuted(x, &[1, 0, 2])
    } else {
        elements(x).into_owned()
    };
    let wv = elements(w);
    let rv = elements(r);
    let bv = b.map(|b| elements(b));
    let pv = peep.map(|pp| elements(pp));

    let mut y = if want[0] {
        vec![T::ZERO; seq * nd * batch * hidden]
    } else {
        Vec::new()
    };
    let mut yh = vec![T::ZERO; nd * batch * hidden];
    let mut yc = vec![T::ZERO; nd * batch * hidden];
    for d in 0..nd {
        let dir = Dir {
            cell,
            acts: &p.acts[d],
            clip: p.clip,
            hidden,
            batch,
            seq,
            reversed: p.direction.reversed(d),
            lens: &lens,
        };
        let w_d = &wv[d * gh * input_size..][..gh * input_size];
        let r_d = &rv[d * gh * hidden..][..gh * hidden];
        let b_d = bv.as_ref().map(|b| &b[d * 2 * gh..][..2 * gh]);
        let p_d = pv.as_ref().map(|pp| &pp[d * 3 * hidden..][..3 * hidden]);
        let n = batch * hidden;
        let mut h: Vec<T> = h0
            .as_ref()
            .map_or_else(|| vec![T::ZERO; n], |s| s[d * n..][..n].to_vec());
        let mut c: Vec<T> = c0
            .as_ref()
            .map_or_else(|| vec![T::ZERO; n], |s| s[d * n..][..n].to_vec());
        dir.run(
            &xv,
            input_size,
            w_d,
            r_d,
            b_d,
            p_d,
            &mut h,
            &mut c,
            |t, bi, row| {
                if want[0] {
                    let at = ((t * nd + d) * batch + bi) * hidden;
                    y[at..at + hidden].copy_from_slice(row);
                }
            },
        );
        for (bi, &len) in lens.iter().enumerate() {
            let at = (d * batch + bi) * hidden;
            if len > 0 {
                yh[at..at + hidden].copy_from_slice(&h[bi * hidden..][..hidden]);
                yc[at..at + hidden].copy_from_slice(&c[bi * hidden..][..hidden]);
            }
        }
    }

    let state_out = |v: Vec<T>| -> R<Tensor> {
        let t = shaped(op, &[nd, batch, hidden], v)?;
        Ok(if p.batch_major {
            let a = T::view(&t).expect("just built");
            shaped(op, &state_shape, permuted(a, &[1, 0, 2]))?
        } else {
            t
        })
    };
    let mut outs = Vec::with_capacity(n_out);
    outs.push(if want[0] {
        let t = shaped(op, &[seq, nd, batch, hidden], y)?;
        if p.batch_major {
            let a = T::view(&t).expect("just built");
            shaped(op, &y_shape, permuted(a, &[2, 0, 1, 3]))?
        } else {
            t
        }
    } else {
        placeholder(T::DTYPE)
    });
    if n_out > 1 {
        outs.push(if want[1] {
            state_out(yh)?
        } else {
            placeholder(T::DTYPE)
        });
    }
    if n_out > 2 {
        outs.push(if want[2] {
            state_out(yc)?
        } else {
            placeholder(T::DTYPE)
        });
    }
    Ok(outs)
}

/// One direction's run.
pub(super) struct Dir<'a> {
    cell: Cell,
    acts: &'a [Act],
    clip: Option<f64>,
    hidden: usize,
    batch: usize,
    seq: usize,
    reversed: bool,
    lens: &'a [usize],
}

impl Dir<'_> {
    #[inline]
    fn act(&self, i: usize, v: f64) -> f64 {
        let v = match self.clip {
            Some(c) => v.clamp(-c, c),
            None => v,
        };
        self.acts[i].apply(v)
    }

    /// Runs the sequence from state `h` (and `c`), leaving each batch entry's state at its
    /// last step there and handing every step's new state to `emit(t, batch entry, row)`.
    #[allow(clippy::too_many_arguments)]
    fn run<T: Cellular>(
        &self,
        x: &[T],
        input_size: usize,
        w: &[T],
        r: &[T],
        b: Option<&[T]>,
        peep: Option<&[T]>,
        h: &mut [T],
        c: &mut [T],
        mut emit: impl FnMut(usize, usize, &[T]),
    ) {
        let (hs, batch, seq) = (self.hidden, self.batch, self.seq);
        let gh = self.cell.gates() * hs;
        // The input products for every step at once: [seq·batch, G·H], W's biases (and R's,
        // but for GRU's h gate, whose R bias goes inside the reset) added.
        let wt = transpose_rows(w, 0, gh, input_size);
        let mut xw = T::gemm(x, &wt, seq * batch, input_size, gh);
        let gru_lbr = match self.cell {
            Cell::Gru {
                linear_before_reset,
            } => Some(linear_before_reset),
            _ => None,
        };
        if let Some(b) = b {
            let mut bias: Vec<T> = (0..gh).map(|j| b[j] + b[gh + j]).collect();
            if gru_lbr.is_some() {
                bias[2 * hs..3 * hs].copy_from_slice(&b[2 * hs..3 * hs]);
            }
            for row in xw.chunks_exact_mut(gh) {
                for (v, &bb) in row.iter_mut().zip(&bias) {
                    *v = *v + bb;
                }
            }
        }
        let rbh: Vec<f64> = match (gru_lbr, b) {
            (Some(_), Some(b)) => b[gh + 2 * hs..gh + 3 * hs]
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            _ => vec![0.0; hs],
        };
        // R's products: GRU without linear_before_reset takes H·Rzr and (r ⊙ H)·Rh apart.
        let split = gru_lbr == Some(false);
        let rg = if split { 2 * hs } else { gh };
        let rt = transpose_rows(r, 0, rg, hs);
        let rt_h = if split {
            transpose_rows(r, 2 * hs, hs, hs)
        } else {
            Vec::new()
        };
        let peep = |k: usize, j: usize| peep.map_or(0.0, |pp| pp[k * hs + j].to_f64());
        let mut new_h = vec![T::ZERO; hs];
        let mut rh = vec![T::ZERO; batch * hs];
        let mut zr = vec![0.0f64; batch * 2 * hs];
        for s in 0..seq {
            let hr = T::gemm(h, &rt, batch, hs, rg);
            let step = |bi: usize| -> Option<usize> {
                let len = self.lens[bi];
                (s < len).then(|| if self.reversed { len - 1 - s } else { s })
            };
            if split {
                // z and r first, then the reset state's product.
                for bi in 0..batch {
                    let Some(t) = step(bi) else { continue };
                    let xrow = &xw[(t * batch + bi) * gh..][..gh];
                    let hrow = &hr[bi * rg..][..rg];
                    for j in 0..2 * hs {
                        zr[bi * 2 * hs + j] = self.act(0, xrow[j].to_f64() + hrow[j].to_f64());
                    }
                    for j in 0..hs {
                        rh[bi * hs + j] =
                            T::from_f64(zr[bi * 2 * hs + hs + j] * h[bi * hs + j].to_f64());
                    }
                }
            }
            let rhr = if split {
                T::gemm(&rh, &rt_h, batch, hs, hs)
            } else {
                Vec::new()
            };
            for bi in 0..batch {
                let Some(t) = step(bi) else { continue };
                let xrow = &xw[(t * batch + bi) * gh..][..gh];
                let hrow = &hr[bi * rg..][..rg];
                let hb = &mut h[bi * hs..][..hs];
                let cb = &mut c[bi * hs..][..hs];
                let pre = |j: usize| xrow[j].to_f64() + hrow[j].to_f64();
                match self.cell {
                    Cell::Rnn => {
                        for (j, v) in new_h.iter_mut().enumerate() {
                            *v = T::from_f64(self.act(0, pre(j)));
                        }
                    }
                    Cell::Gru {
                        linear_before_reset,
                    } => {
                        for j in 0..hs {
                            let (z, hc) = if linear_before_reset {
                                let z = self.act(0, pre(j));
                                let rr = self.act(0, pre(hs + j));
                                let lin = hrow[2 * hs + j].to_f64() + rbh[j];
                                (z, self.act(1, xrow[2 * hs + j].to_f64() + rr * lin))
                            } else {
                                let z = zr[bi * 2 * hs + j];
                                let lin = rhr[bi * hs + j].to_f64() + rbh[j];
                                (z, self.act(1, xrow[2 * hs + j].to_f64() + lin))
                            };
                            new_h[j] = T::from_f64((1.0 - z) * hc + z * hb[j].to_f64());
                        }
                    }
                    Cell::Lstm { input_forget } => {
                        for j in 0..hs {
                            let cp = cb[j].to_f64();
                            let i = self.act(0, pre(j) + peep(0, j) * cp);
                            let f = if input_forget {
                                1.0 - i
                            } else {
                                self.act(0, pre(2 * hs + j) + peep(2, j) * cp)
                            };
                            let cc = self.act(1, pre(3 * hs + j));
                            let cn = f * cp + i * cc;
                            let o = self.act(0, pre(hs + j) + peep(1, j) * cn);
                            let cn_t = T::from_f64(cn);
                            cb[j] = cn_t;
                            new_h[j] = T::from_f64(o * self.acts[2].apply(cn_t.to_f64()));
                        }
                    }
                }
                hb.copy_from_slice(&new_h);
                emit(t, bi, hb);
            }
        }
    }
}
