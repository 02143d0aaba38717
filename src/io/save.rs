//! Saving: IR → GraphProto (nodes in topological order) → ModelProto bytes, with large
//! initializers optionally in an external data file beside the model.

use prost::Message;

use crate::ir::types::TensorType;
use crate::ir::{Graph, Model, ValueId};
use crate::onnx::proto::{GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto};
#[cfg(not(target_arch = "wasm32"))]
use crate::onnx::proto::{StringStringEntryProto, DATA_LOCATION_EXTERNAL};
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

/// The graph's inputs; under IR < 4 (`GraphExtra::initializers_as_inputs`) every initializer
/// among them, as that IR requires: in the order read, then the real inputs and initializers
/// that are new.
fn inputs(g: &Graph) -> Vec<ValueInfoProto> {
    let Some(read) = &g.extra.initializers_as_inputs else {
        return g.inputs.iter().map(|&i| value_info(g, i)).collect();
    };
    let restated = |id: ValueId| {
        let t = g.initializer(id)?;
        Some(
            read.declared
                .get(&t.name)
                .cloned()
                .unwrap_or_else(|| ValueInfoProto {
                    name: t.name.clone(),
                    r#type: Some(TensorType::from_tensor_proto(t).to_proto()),
                    ..Default::default()
                }),
        )
    };
    let mut done = std::collections::HashSet::new();
    let mut out = Vec::new();
    let known = read.order.iter().filter_map(|n| g.find(n));
    let real = g.inputs.iter().copied();
    let weights = g.initializers().map(|(id, _)| id);
    for id in known.chain(real).chain(weights) {
        if !done.insert(id) {
            continue;
        }
        if g.is_graph_input(id) {
            out.push(value_info(g, id));
        } else if let Some(vi) = restated(id) {
            out.push(vi);
        }
    }
    out
}

pub fn to_graph_proto(g: &Graph) -> Result<GraphProto> {
    to_graph_proto_with(g, &mut |t: &TensorProto| Ok(t.clone()))
}

/// `to_graph_proto` with each top-level initializer written by `init` (a clone, or a stub
/// pointing at external data the callback wrote).
fn to_graph_proto_with(
    g: &Graph,
    init: &mut dyn FnMut(&TensorProto) -> Result<TensorProto>,
) -> Result<GraphProto> {
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
        initializer: g
            .initializers()
            .map(|(_, t)| init(t))
            .collect::<Result<_>>()?,
        sparse_initializer: g.extra.sparse_initializer.clone(),
        doc_string: g.extra.doc_string.clone(),
        input: inputs(g),
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

/// `--external-data` without a value: tensors of at least 1 KiB of data go out (the onnx
/// package's own default threshold).
pub const DEFAULT_EXTERNAL_THRESHOLD: u64 = 1024;

/// Offsets in the data file are multiples of this (aligned loads and mappings).
#[cfg(not(target_arch = "wasm32"))]
const EXTERNAL_ALIGN: u64 = 64;

pub fn to_bytes(m: &Model) -> Result<Vec<u8>> {
    let proto = to_model_proto(m)?;
    let len = proto.encoded_len();
    if len > MAX_PROTO_BYTES {
        return Err(crate::Error::limit(format!(
            "the saved model would be {len} bytes, over protobuf's 2 GiB limit; save it with \
             its weights as external data (the CLI's --external-data)"
        )));
    }
    Ok(proto.encode_to_vec())
}

/// What `save_file` wrote besides the model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Saved {
    /// The external data file (beside the model), when any tensor went there.
    pub data_file: Option<std::path::PathBuf>,
    /// Tensors and bytes (alignment padding excluded) in it.
    pub external_tensors: usize,
    pub external_bytes: u64,
    /// External data was chosen because the model would pass protobuf's 2 GiB.
    pub automatic: bool,
}

/// The raw bytes of a top-level initializer with at least `threshold` of them (tensors kept in
/// typed fields, subgraph initializers and smaller tensors stay in the model).
#[cfg(not(target_arch = "wasm32"))]
fn goes_external(t: &TensorProto, threshold: u64) -> bool {
    !t.raw_data.is_empty() && t.raw_data.len() as u64 >= threshold
}

/// Writes `m` to `path`. With `external = Some(threshold)`, every top-level initializer with at
/// least `threshold` bytes of raw data goes to `<file name>.data` beside the model (location
/// relative, offsets aligned to 64 bytes), written straight from the model's buffers. Without
/// it, a model whose protobuf would pass 2 GiB is saved that way at the default threshold.
#[cfg(not(target_arch = "wasm32"))]
pub fn save_file(m: &Model, path: &std::path::Path, external: Option<u64>) -> Result<Saved> {
    save_file_within(m, path, external, MAX_PROTO_BYTES as u64)
}

/// `save_file` for a reader that takes messages up to `max_proto` bytes instead of protobuf's
/// 2 GiB: the automatic choice of external data is made against it (less 64 MiB left for the
/// nodes). Tests reach that path with a small limit instead of writing 2 GiB.
#[cfg(not(target_arch = "wasm32"))]
pub fn save_file_within(
    m: &Model,
    path: &std::path::Path,
    external: Option<u64>,
    max_proto: u64,
) -> Result<Saved> {
    let io = |p: &std::path::Path, e| crate::Error::io(p.display(), e);
    let (threshold, automatic) = match external {
        Some(t) => (t, false),
        None => {
            // The initializers' encoded size, without encoding them: 64 MiB is left for the
            // nodes and value infos (to_bytes still checks the exact size).
            let data: u64 = m
                .graph
                .initializers()
                .map(|(_, t)| t.encoded_len() as u64)
                .sum();
            if data < max_proto.saturating_sub(64 << 20) {
                let bytes = to_bytes(m)?;
                std::fs::write(path, bytes).map_err(|e| io(path, e))?;
                return Ok(Saved::default());
            }
            (DEFAULT_EXTERNAL_THRESHOLD, true)
        }
    };
    let name = path
        .file_name()
        .ok_or_else(|| crate::Error::Other(format!("{}: not a file name", path.display())))?;
    let location = format!("{}.data", name.to_string_lossy());
    let data_path = path.with_file_name(&location);
    let mut out: Option<std::io::BufWriter<std::fs::File>> = None;
    let mut saved = Saved {
        automatic,
        ..Saved::default()
    };
    let mut offset = 0u64;
    let graph = to_graph_proto_with(&m.graph, &mut |t: &TensorProto| {
        if !goes_external(t, threshold) {
            return Ok(t.clone());
        }
        use std::io::Write;
        if out.is_none() {
            let f = std::fs::File::create(&data_path).map_err(|e| io(&data_path, e))?;
            out = Some(std::io::BufWriter::new(f));
        }
        let w = out.as_mut().expect("opened above");
        let pad = offset.next_multiple_of(EXTERNAL_ALIGN) - offset;
        w.write_all(&[0u8; EXTERNAL_ALIGN as usize][..pad as usize])
            .and_then(|_| w.write_all(&t.raw_data))
            .map_err(|e| io(&data_path, e))?;
        // Written: a mapped source's pages need not stay in this process.
        crate::onnx::release_pages(&t.raw_data);
        offset += pad;
        let len = t.raw_data.len() as u64;
        let entry = |key: &str, value: String| StringStringEntryProto {
            key: key.into(),
            value,
        };
        let stub = TensorProto {
            dims: t.dims.clone(),
            data_type: t.data_type,
            name: t.name.clone(),
            doc_string: t.doc_string.clone(),
            metadata_props: t.metadata_props.clone(),
            data_location: DATA_LOCATION_EXTERNAL,
            external_data: vec![
                entry("location", location.clone()),
                entry("offset", offset.to_string()),
                entry("length", len.to_string()),
            ],
            ..Default::default()
        };
        offset += len;
        saved.external_tensors += 1;
        saved.external_bytes += len;
        Ok(stub)
    })?;
    if let Some(mut w) = out.take() {
        use std::io::Write;
        w.flush().map_err(|e| io(&data_path, e))?;
        saved.data_file = Some(data_path.clone());
    }
    let proto = ModelProto {
        graph: Some(graph),
        ..m.proto.clone()
    };
    let len = proto.encoded_len();
    if len > MAX_PROTO_BYTES {
        return Err(crate::Error::limit(format!(
            "{}: the model without its external tensors is still {len} bytes, over protobuf's \
             2 GiB limit (a lower --external-data threshold moves more tensors out)",
            path.display()
        )));
    }
    std::fs::write(path, proto.encode_to_vec()).map_err(|e| io(path, e))?;
    Ok(saved)
}
