//! Saving: IR → GraphProto (nodes in topological order) → ModelProto bytes.

use prost::Message;

use crate::ir::{Graph, Model, ValueId};
use crate::onnx::proto::{GraphProto, ModelProto, NodeProto, ValueInfoProto};
use crate::Result;

fn value_info(g: &Graph, id: ValueId) -> ValueInfoProto {
    let v = g.value(id);
    match &v.info {
        Some(info) => ValueInfoProto {
            name: v.name.clone(),
            ..info.clone()
        },
        None => ValueInfoProto {
            name: v.name.clone(),
            r#type: Some(v.ty.to_proto()),
            ..Default::default()
        },
    }
}

pub fn to_graph_proto(g: &Graph) -> Result<GraphProto> {
    let order = g.topo_order()?;
    let name = |v: &Option<ValueId>| v.map(|v| g.name(v).to_string()).unwrap_or_default();
    let node = order
        .iter()
        .map(|&id| {
            let n = g.node(id);
            NodeProto {
                input: n.inputs.iter().map(name).collect(),
                output: n.outputs.iter().map(name).collect(),
                name: n.name.clone(),
                op_type: n.op_type.clone(),
                domain: n.domain.clone(),
                overload: n.extra.overload.clone(),
                attribute: n.attributes().to_vec(),
                doc_string: n.extra.doc_string.clone(),
                metadata_props: n.extra.metadata_props.clone(),
                device_configurations: n.extra.device_configurations.clone(),
            }
        })
        .collect();
    Ok(GraphProto {
        node,
        name: g.name.clone(),
        initializer: g.initializers().map(|(_, t)| t.clone()).collect(),
        sparse_initializer: g.extra.sparse_initializer.clone(),
        doc_string: g.extra.doc_string.clone(),
        input: g.inputs.iter().map(|&i| value_info(g, i)).collect(),
        output: g
            .outputs
            .iter()
            .map(|&o| match g.output_info.get(&o) {
                Some(vi) => ValueInfoProto {
                    name: g.name(o).to_string(),
                    ..vi.clone()
                },
                None => value_info(g, o),
            })
            .collect(),
        value_info: g
            .value_info
            .iter()
            .filter(|(id, _)| g.is_defined(*id))
            .map(|(id, vi)| ValueInfoProto {
                name: g.name(*id).to_string(),
                ..vi.clone()
            })
            .collect(),
        quantization_annotation: g.extra.quantization_annotation.clone(),
        metadata_props: g.extra.metadata_props.clone(),
    })
}

pub fn to_model_proto(m: &Model) -> Result<ModelProto> {
    Ok(ModelProto {
        graph: Some(to_graph_proto(&m.graph)?),
        ..m.proto.clone()
    })
}

/// Protobuf readers (onnx, onnxruntime) refuse messages of 2 GiB or more.
pub const MAX_PROTO_BYTES: usize = (2 << 30) - 1;

pub fn to_bytes(m: &Model) -> Result<Vec<u8>> {
    let proto = to_model_proto(m)?;
    let len = proto.encoded_len();
    if len > MAX_PROTO_BYTES {
        return Err(crate::Error::limit(format!(
            "the saved model would be {len} bytes, over protobuf's 2 GiB limit \
             (saving weights as external data is not implemented yet)"
        )));
    }
    Ok(proto.encode_to_vec())
}

#[cfg(not(target_arch = "wasm32"))]
pub fn save_file(m: &Model, path: &std::path::Path) -> Result<()> {
    let bytes = to_bytes(m)?;
    std::fs::write(path, bytes).map_err(|e| crate::Error::io(path.display(), e))
}
