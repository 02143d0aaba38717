//! Conv's and ConvTranspose's shape checks and output geometry, shared by the reference kernel
//! and the WebGPU lowering.

use super::*;

/// A node's checked geometry: X's and W's shapes (and B's) against each other and the window
/// attributes, the spatial axes in effect, and Y's shape. The reference kernel and the WebGPU
/// lowering both take it from here.
pub(super) struct Geometry {
    pub axes: Vec<Axis>,
    /// Output channels.
    pub m: usize,
    /// Input channels per group.
    pub w_in: usize,
    /// Y's shape.
    pub shape: Vec<usize>,
}

impl Spec<'_> {
    pub(super) fn geometry(&self, xs: &[usize], ws: &[usize], b: Option<&[usize]>) -> R<Geometry> {
        let (op, window, g) = (self.op, self.window, self.group);
        let transpose = self.transpose.is_some();
        let n = spatial(op, xs)?;
        if ws.len() != xs.len() {
            return Err(format!(
                "{op}: W must have X's rank {} ([{}, {}, kernel...]), got shape {ws:?}",
                xs.len(),
                if transpose { "C" } else { "M" },
                if transpose { "M/group" } else { "C/group" },
            ));
        }
        // Conv: W [M, C/g, k...]; ConvTranspose: W [C, M/g, k...].
        let c = xs[1];
        // Products of dims and group saturate: a huge one only fails the checks below.
        let (w_in, m) = if transpose {
            (ws[0] / g, ws[1].saturating_mul(g))
        } else {
            (ws[1], ws[0])
        };
        let w_c = if transpose {
            ws[0]
        } else {
            ws[1].saturating_mul(g)
        };
        if w_c != c || (transpose && !ws[0].is_multiple_of(g)) {
            return Err(format!(
                "{op}: X has {c} channels but W of shape {ws:?} with group {g} takes {}",
                if transpose {
                    format!("{} (W.shape[0], a multiple of group)", ws[0])
                } else {
                    format!("{w_c} (W.shape[1] * group)")
                }
            ));
        }
        if !transpose && m % g != 0 {
            return Err(format!(
                "{op}: W has {m} output channels, not a multiple of group {g}"
            ));
        }
        if let Some(b) = b.filter(|&b| b != [m]) {
            return Err(format!("{op}: B must have shape [{m}], got {b:?}"));
        }
        let kernel = &ws[2..];
        if let Some(ks) = window.kernel_shape.as_ref() {
            if ks.iter().zip(kernel).any(|(&a, &b)| a != b as i64) || ks.len() != n {
                return Err(format!(
                    "{op}: attribute 'kernel_shape' {ks:?} differs from W's kernel dims {kernel:?}"
                ));
            }
        }
        let axes = match self.transpose {
            Some(t) => t.axes(&xs[2..], kernel)?,
            None => window.axes(op, &xs[2..], kernel)?,
        };
        let mut shape = vec![xs[0], m];
        shape.extend(axes.iter().map(|a| a.out));
        Ok(Geometry {
            axes,
            m,
            w_in,
            shape,
        })
    }
}
