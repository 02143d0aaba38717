//! The window loop that vectorizes: one input plane copied once with its padding filled in and
//! each strided axis split into phases, so that a tap reads one contiguous run for all outputs
//! of a z slice at once.
//!
//! In padded coordinates output `o`'s tap `k` reads position `o·s + k·d` of an axis. On y and x
//! the copy holds phase `p` (positions `p, p + s, p + 2s, ...`) of each axis as rows `PH` long
//! and columns `PW` long, so position `o·s + k·d` is element `o + q` of phase `p`, with
//! `k·d = q·s + p`. The rows of one (z, y phase, x phase) block are `PW` apart, and the tap's
//! values for outputs (oy, ox) are its run `[oy·PW + ox]` from `(q_y, q_x)`: one slice of
//! `OH·PW` elements per tap, whose columns `ox >= OW` are junk (they read what follows) and
//! are never copied out. The copy is made with the positions that are read only: an axis is
//! `(out - 1)·s + (k - 1)·d + 1` long, which for a ceil_mode pool may run past the end padding
//! (the filler stands there as in the padding). A kernel row's taps are summed in one pass.

use super::Axis;

/// A plane's padded copy and the accumulator of one z slice of outputs.
pub(in crate::ops) struct Padded<T> {
    a: [Axis; 3],
    /// Padded length read on z, and the y and x phases' lengths.
    ez: usize,
    ph: usize,
    pw: usize,
    /// One z position's block: `s_y · s_x` phases of `ph · pw`.
    slice: usize,
    buf: Vec<T>,
    acc: Vec<T>,
}

/// Positions read on axis `a` in padded coordinates (None on overflow).
fn extent(a: &Axis) -> Option<usize> {
    let last = (a.out.checked_sub(1)?).checked_mul(a.s)?;
    let reach = (a.k.checked_sub(1)?).checked_mul(a.d)?;
    last.checked_add(reach)?.checked_add(1)
}

impl<T: Copy> Padded<T> {
    /// The copy for windows `a`, its padding set to `fill`; `None` where it does not pay or
    /// cannot be made (an empty axis, a negative pad, or a copy over four times input plus
    /// output), so the caller takes its general loop instead.
    pub fn new(a: &[Axis; 3], fill: T) -> Option<Padded<T>> {
        let [az, ay, ax] = a;
        if a.iter()
            .any(|a| a.pb < 0 || a.inp == 0 || a.out == 0 || a.s == 0)
        {
            return None;
        }
        let ez = extent(az)?;
        let ph = extent(ay)?.div_ceil(ay.s);
        let pw = extent(ax)?.div_ceil(ax.s);
        let slice = ay.s.checked_mul(ax.s)?.checked_mul(ph)?.checked_mul(pw)?;
        let len = ez.checked_mul(slice)?.checked_add(pw)?;
        let acc = ay.out.checked_mul(pw)?;
        let isz = az.inp.checked_mul(ay.inp)?.checked_mul(ax.inp)?;
        let osz = az.out.checked_mul(ay.out)?.checked_mul(ax.out)?;
        let budget = isz.checked_add(osz)?.checked_mul(4)?.checked_add(4096)?;
        if len > budget || acc > budget {
            return None;
        }
        Some(Padded {
            a: *a,
            ez,
            ph,
            pw,
            slice,
            buf: vec![fill; len],
            acc: vec![fill; acc],
        })
    }

    /// Copies plane `x` (z, y, x row-major) into the padded positions; the padding keeps the
    /// filler (every plane writes the same positions). Compiled for the widest vectors the CPU
    /// has (a stride-2 row's split into phases vectorizes).
    pub fn load(&mut self, x: &[T]) {
        super::super::simd::widest(
            #[cfg_attr(target_arch = "x86_64", inline(always))]
            || self.load_body(x),
        )
    }

    #[inline(always)]
    fn load_body(&mut self, x: &[T]) {
        let [az, ay, ax] = &self.a;
        let (sy, sx, ph, pw) = (ay.s, ax.s, self.ph, self.pw);
        let (pbz, pby, pbx) = (az.pb as usize, ay.pb as usize, ax.pb as usize);
        let ey = ph * sy;
        let ex = pw * sx;
        // Input columns landing inside the copy: `ix + pbx < ex`.
        let nx = ax.inp.min(ex.saturating_sub(pbx));
        if nx == 0 {
            return;
        }
        for (iz, plane) in x.chunks_exact(ay.inp * ax.inp).enumerate() {
            let pz = iz + pbz;
            if pz >= self.ez {
                break;
            }
            // Row py = iy + pby is row qy of y phase ry (py = qy·sy + ry), stepped along
            // without a division per row.
            let (mut qy, mut ry) = (pby / sy, pby % sy);
            for (iy, row) in plane.chunks_exact(ax.inp).enumerate() {
                if iy + pby >= ey {
                    break;
                }
                let base = pz * self.slice + ry * sx * ph * pw + qy * pw;
                ry += 1;
                if ry == sy {
                    (qy, ry) = (qy + 1, 0);
                }
                let row = &row[..nx];
                if sx == 1 {
                    self.buf[base + pbx..][..nx].copy_from_slice(row);
                    continue;
                }
                if sx == 2 {
                    // Two phases at once: pairs of input columns, the first (if `pbx` is odd:
                    // the second) landing in phase 0.
                    let (p0, p1) = self.buf[base..].split_at_mut(ph * pw);
                    let (p0, p1) = (&mut p0[..pw], &mut p1[..pw]);
                    let (lead, start) = if pbx % 2 == 1 {
                        p1[pbx / 2] = row[0];
                        (1, pbx / 2 + 1)
                    } else {
                        (0, pbx / 2)
                    };
                    let pairs = row[lead..].chunks_exact(2);
                    let last = pairs.remainder().first().copied();
                    let n = pairs.len();
                    let dst = p0[start..].iter_mut().zip(p1[start..].iter_mut());
                    for ((e, o), pair) in dst.zip(pairs) {
                        (*e, *o) = (pair[0], pair[1]);
                    }
                    if let Some(v) = last {
                        p0[start + n] = v;
                    }
                    continue;
                }
                for p in 0..sx {
                    // The first input column of x phase p, and its place in the phase.
                    let ix0 = (p + sx - pbx % sx) % sx;
                    if ix0 >= nx {
                        continue;
                    }
                    let dst = &mut self.buf[base + p * ph * pw..][..pw][(ix0 + pbx) / sx..];
                    for (d, &v) in dst.iter_mut().zip(row[ix0..].iter().step_by(sx)) {
                        *d = v;
                    }
                }
            }
        }
    }

    /// For each z slice of outputs: the accumulator set to `init`, then `row(t, acc, taps)` for
    /// each kernel row (kz, ky) in order, `t` the number of its first tap in (kz, ky, kx) order
    /// and `taps` its input runs lined up with `acc`; then the slice's outputs copied into `y`
    /// (the plane's outputs, z, y, x row-major).
    #[inline(always)]
    pub fn run(&mut self, y: &mut [T], init: T, mut row: impl FnMut(usize, &mut [T], Row<T>)) {
        let [az, ay, ax] = &self.a;
        let (ph, pw) = (self.ph, self.pw);
        let len = self.acc.len();
        // Tap kx's run from its kernel row's start: its x phase's block, then `qx` columns.
        let xoff: Vec<usize> = (0..ax.k)
            .map(|kx| ((kx * ax.d) % ax.s) * ph * pw + (kx * ax.d) / ax.s)
            .collect();
        for (oz, ys) in y.chunks_exact_mut(ay.out * ax.out).enumerate() {
            self.acc.iter_mut().for_each(|v| *v = init);
            let mut t = 0;
            for kz in 0..az.k {
                let z = (oz * az.s + kz * az.d) * self.slice;
                for ky in 0..ay.k {
                    let (qy, py) = ((ky * ay.d) / ay.s, (ky * ay.d) % ay.s);
                    let start = z + py * ax.s * ph * pw + qy * pw;
                    let data = &self.buf[start..];
                    row(
                        t,
                        &mut self.acc,
                        Row {
                            data,
                            xoff: &xoff,
                            len,
                        },
                    );
                    t += ax.k;
                }
            }
            for (dst, src) in ys.chunks_exact_mut(ax.out).zip(self.acc.chunks_exact(pw)) {
                dst.copy_from_slice(&src[..ax.out]);
            }
        }
    }
}

/// The taps of one kernel row: tap kx's input values for the accumulator's outputs.
pub(in crate::ops) struct Row<'a, T> {
    data: &'a [T],
    xoff: &'a [usize],
    len: usize,
}

impl<'a, T: Copy> Row<'a, T> {
    /// Tap `kx`'s run.
    #[inline(always)]
    pub fn tap(&self, kx: usize) -> &'a [T] {
        &self.data[self.xoff[kx]..][..self.len]
    }

    /// `acc[i] = f(acc[i], tap kx's run[i], params[kx])` for kx in order: 3- and 5-tap rows
    /// (the usual kernels) in one pass over `acc`, others a pass per tap. Either way every
    /// element sees the same calls in the same order. `params` has a value per tap at least.
    #[inline(always)]
    pub fn fold<P: Copy>(&self, acc: &mut [T], params: &[P], f: impl Fn(T, T, P) -> T) {
        let k = self.xoff.len();
        let p = &params[..k];
        match k {
            3 => {
                let (r0, r1, r2) = (self.tap(0), self.tap(1), self.tap(2));
                let (p0, p1, p2) = (p[0], p[1], p[2]);
                for (((o, &a), &b), &c) in acc.iter_mut().zip(r0).zip(r1).zip(r2) {
                    *o = f(f(f(*o, a, p0), b, p1), c, p2);
                }
            }
            5 => {
                let (r0, r1, r2) = (self.tap(0), self.tap(1), self.tap(2));
                let (r3, r4) = (self.tap(3), self.tap(4));
                let (p0, p1, p2, p3, p4) = (p[0], p[1], p[2], p[3], p[4]);
                let runs = acc.iter_mut().zip(r0).zip(r1).zip(r2).zip(r3).zip(r4);
                for (((((o, &a), &b), &c), &d), &e) in runs {
                    *o = f(f(f(f(f(*o, a, p0), b, p1), c, p2), d, p3), e, p4);
                }
            }
            _ => {
                for (kx, &pk) in p.iter().enumerate() {
                    for (o, &v) in acc.iter_mut().zip(self.tap(kx)) {
                        *o = f(*o, v, pk);
                    }
                }
            }
        }
    }
}
