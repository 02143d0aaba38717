//! `--fix-dim NAME=VALUE`: specializes a model to fixed sizes of its symbolic dims. Every type
//! that names the dim (inputs, outputs, value_info, and the inferred types of intermediates,
//! which share the input's symbol) says VALUE instead, so shape chains become constant and
//! `shape_fold` removes them. The saved model then accepts only that size.

use std::collections::HashMap;

use crate::ir::types::Dim;
use crate::ir::Model;
use crate::onnx::proto::{type_proto, Dim as ProtoDim, TypeProto};
use crate::{Error, Result};

/// Replaces each symbolic dim named in `fixed` by its value. Fails on a name no graph input
/// uses (a typo would otherwise silently do nothing) and on negative values.
pub fn fix_dims(model: &mut Model, fixed: &HashMap<String, i64>) -> Result<()> {
    let g = &mut model.graph;
    for (name, &v) in fixed {
        if v < 0 {
            return Err(Error::Other(format!(
                "--fix-dim {name}={v}: sizes are non-negative"
            )));
        }
        let used = g.inputs.iter().any(|&i| {
            g.value(i)
                .ty
                .shape
                .iter()
                .flatten()
                .any(|d| *d == Dim::Sym(name.clone()))
        });
        if !used {
            return Err(Error::Other(format!(
                "--fix-dim {name}: no graph input has a dim named '{name}'"
            )));
        }
    }
    for i in 0..g.value_count() {
        let id = crate::ir::ValueId(i as u32);
        let value = g.value_mut(id);
        for d in value.ty.shape.iter_mut().flatten() {
            if let Dim::Sym(s) = d {
                if let Some(&v) = fixed.get(s.as_str()) {
                    *d = Dim::Known(v);
                }
            }
        }
        if let Some(info) = value.info.as_mut().and_then(|i| i.r#type.as_mut()) {
            fix_type(info, fixed);
        }
    }
    for vi in g.output_info.values_mut() {
        if let Some(t) = vi.r#type.as_mut() {
            fix_type(t, fixed);
        }
    }
    for (_, vi) in g.value_info.iter_mut() {
        if let Some(t) = vi.r#type.as_mut() {
            fix_type(t, fixed);
        }
    }
    // Dims inference could not decide before may be decidable now.
    crate::ops::infer::refresh_inferred_types(model);
    Ok(())
}

fn fix_type(t: &mut TypeProto, fixed: &HashMap<String, i64>) {
    let Some(type_proto::Value::TensorType(tt)) = t.value.as_mut() else {
        return;
    };
    for d in tt.shape.iter_mut().flat_map(|s| s.dim.iter_mut()) {
        if let Some(ProtoDim::DimParam(p)) = &d.value {
            if let Some(&v) = fixed.get(p.as_str()) {
                d.value = Some(ProtoDim::DimValue(v));
            }
        }
    }
}
