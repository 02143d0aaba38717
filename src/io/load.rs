//! Loading: decode (prost) → inline external data → build the IR → infer types → verify.
//!
//! Tensor bytes are copied at most once. The model's bytes become one shared buffer (`Bytes`)
//! that every `raw_data` slices; external data files are memory-mapped natively and sliced the
//! same way (in wasm the dropped files' buffers are). Decoding a weight into a kernel's array
//! (`Graph::initializer_value`) is the one copy, made on first use and shared by every clone of
//! the graph.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use prost::Message;

use crate::ir::types::TensorType;
use crate::ir::{Graph, InitializerInputs, Model, Node};
use crate::limits::Limits;
use crate::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, TensorProto, ValueInfoProto, DATA_LOCATION_EXTERNAL,
};
use crate::onnx::tensor::validate;
use crate::{Error, Result};

/// Where external tensor data (`data_location = EXTERNAL`) comes from.
#[derive(Clone, Debug, Default)]
pub enum ExternalData {
    /// External data is an error (for example bytes handed over without their files).
    #[default]
    None,
    /// Files beside the model, in this folder. Locations may not leave it.
    Dir(PathBuf),
    /// Files handed over by name (the web page's drop of several files).
    Files(HashMap<String, Bytes>),
}

#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    pub limits: Limits,
    pub external: ExternalData,
}

/// Reads and loads a model file; external data is read from the file's folder.
pub fn load_file(path: &Path, limits: &Limits) -> Result<Model> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path.display(), e))?;
    if meta.len() > limits.max_tensor_bytes {
        return Err(Error::limit(format!(
            "{}: file is {} bytes, over the limit",
            path.display(),
            meta.len()
        )));
    }
    let bytes = Bytes::from(std::fs::read(path).map_err(|e| Error::io(path.display(), e))?);
    let dir = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."))
        .to_path_buf();
    load_buf(
        bytes,
        &LoadOptions {
            limits: *limits,
            external: ExternalData::Dir(dir),
        },
    )
}

/// Decodes only the protobuf (no external data, no IR). Tensor bytes slice `bytes`.
pub fn decode(bytes: Bytes) -> Result<ModelProto> {
    if bytes.is_empty() {
        return Err(Error::Decode("the file is empty".into()));
    }
    ModelProto::decode(bytes).map_err(|e| Error::Decode(e.to_string()))
}

/// Loads a model from bytes the caller keeps (they are copied once, into the model's buffer).
pub fn load_bytes(bytes: &[u8], opts: &LoadOptions) -> Result<Model> {
    load_buf(Bytes::copy_from_slice(bytes), opts)
}

/// Loads a model from a buffer it takes over: its tensors slice it, nothing is copied.
pub fn load_buf(bytes: Bytes, opts: &LoadOptions) -> Result<Model> {
    let mut proto = decode(bytes)?;
    let mut graph_proto = proto
        .graph
        .take()
        .ok_or_else(|| Error::invalid("model has no graph"))?;
    let mut cx = Resolve {
        opts,
        mapped: HashMap::new(),
    };
    cx.tensors(&mut graph_proto, 0)?;
    for f in &mut proto.functions {
        for n in &mut f.node {
            for a in &mut n.attribute {
                cx.attribute(a, 1)?;
            }
        }
    }
    let mut graph = build_graph(graph_proto)?;
    if proto.ir_version < 4 {
        initializers_not_inputs(&mut graph);
    }
    let mut model = Model { graph, proto };
    crate::ops::check_attributes(&model)?;
    crate::ops::infer::infer_types(&mut model);
    crate::ops::verify(&model)?;
    Ok(model)
}

/// IR < 4: the graph inputs that restate an initializer leave `inputs` (a caller may not feed
/// them, so the initializer is a constant); their declarations are kept for the save
/// (`GraphExtra::initializers_as_inputs`).
fn initializers_not_inputs(g: &mut Graph) {
    let mut kept = InitializerInputs::default();
    let inputs = std::mem::take(&mut g.inputs);
    for id in inputs {
        kept.order.push(g.name(id).to_string());
        if g.initializer(id).is_some() {
            let v = g.value_mut(id);
            let info = v.info.take().unwrap_or_else(|| ValueInfoProto {
                name: v.name.clone(),
                r#type: Some(v.ty.to_proto()),
                ..Default::default()
            });
            kept.declared.insert(v.name.clone(), info);
        } else {
            g.inputs.push(id);
        }
    }
    g.extra.initializers_as_inputs = Some(kept);
}

/// Deepest subgraph nesting we walk (prost's decoder stops at 100 nested messages anyway).
const MAX_GRAPH_DEPTH: usize = 64;

/// Inlines external data (as slices of its files) and validates every tensor of a graph and its
/// subgraphs. `mapped`: each external file opened so far, mapped once for all its tensors.
struct Resolve<'a> {
    opts: &'a LoadOptions,
    mapped: HashMap<PathBuf, Bytes>,
}

impl Resolve<'_> {
    fn tensors(&mut self, g: &mut GraphProto, depth: usize) -> Result<()> {
        if depth > MAX_GRAPH_DEPTH {
            return Err(Error::limit(format!(
                "subgraphs nested more than {MAX_GRAPH_DEPTH} deep"
            )));
        }
        for t in &mut g.initializer {
            self.tensor(t)?;
        }
        for n in &mut g.node {
            for a in &mut n.attribute {
                self.attribute(a, depth + 1)?;
            }
        }
        Ok(())
    }

    fn attribute(&mut self, a: &mut AttributeProto, depth: usize) -> Result<()> {
        if let Some(t) = a.t.as_mut() {
            self.tensor(t)?;
        }
        for t in &mut a.tensors {
            self.tensor(t)?;
        }
        if let Some(g) = a.g.as_mut() {
            self.tensors(g, depth)?;
        }
        for g in &mut a.graphs {
            self.tensors(g, depth)?;
        }
        Ok(())
    }

    fn tensor(&mut self, t: &mut TensorProto) -> Result<()> {
        if t.data_location == DATA_LOCATION_EXTERNAL {
            t.raw_data = self.external(t)?;
            t.external_data.clear();
            t.data_location = 0;
        }
        validate(t, &self.opts.limits)?;
        Ok(())
    }
}

/// Rejects locations that could leave the model's folder: absolute paths, `..`, drive prefixes.
fn checked_location(tensor: &str, loc: &str) -> Result<PathBuf> {
    let bad = |why: &str| {
        Error::invalid(format!(
            "tensor '{tensor}': external data location '{loc}' {why}"
        ))
    };
    if loc.is_empty() {
        return Err(bad("is empty"));
    }
    if loc.contains('\\') || loc.contains(':') || loc.contains('\0') {
        return Err(bad("contains '\\', ':' or NUL"));
    }
    let p = Path::new(loc);
    for c in p.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(bad("uses '..' to leave the model's folder")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(bad(
                    "is absolute; it must be relative to the model's folder",
                ))
            }
        }
    }
    Ok(p.to_path_buf())
}

impl Resolve<'_> {
    /// A tensor's external data: a slice of its file (mapped once per load) or of a handed-over file.
    fn external(&mut self, t: &TensorProto) -> Result<Bytes> {
        let opts = self.opts;
        let mut location = None;
        let mut offset = 0u64;
        let mut length = None;
        for kv in &t.external_data {
            let num = |v: &str| {
                v.parse::<u64>().map_err(|_| {
                    Error::invalid(format!(
                        "tensor '{}': external data {} '{}' is not a number",
                        t.name, kv.key, v
                    ))
                })
            };
            match kv.key.as_str() {
                "location" => location = Some(kv.value.clone()),
                "offset" => offset = num(&kv.value)?,
                "length" => length = Some(num(&kv.value)?),
                _ => {}
            }
        }
        let loc = location.ok_or_else(|| {
            Error::invalid(format!(
                "tensor '{}': external data has no location",
                t.name
            ))
        })?;
        let rel = checked_location(&t.name, &loc)?;
        let bits = crate::tensor::DType(t.data_type).bits().unwrap_or(8);
        let n = opts
            .limits
            .check_dims(&format!("tensor '{}'", t.name), &t.dims, bits)?;
        let want = (n * bits).div_ceil(8);
        if let Some(len) = length {
            if len != want {
                return Err(Error::invalid(format!(
                    "tensor '{}': external data length {len} but dims {:?} need {want} bytes",
                    t.name, t.dims
                )));
            }
        }
        let slice = |data: &Bytes| -> Result<Bytes> {
            let end = offset.checked_add(want).filter(|&e| e <= data.len() as u64);
            match end {
            Some(end) => Ok(data.slice(offset as usize..end as usize)),
            None => Err(Error::invalid(format!(
                "tensor '{}': external data '{loc}' has {} bytes, fewer than offset {offset} + {want}",
                t.name,
                data.len()
            ))),
        }
        };
        match &opts.external {
            ExternalData::None => Err(Error::invalid(format!(
                "tensor '{}' keeps its data in external file '{loc}', which was not provided",
                t.name
            ))),
            ExternalData::Files(files) => {
                let data = files.get(loc.trim_start_matches("./")).ok_or_else(|| {
                    Error::invalid(format!(
                        "tensor '{}': external data file '{loc}' was not provided",
                        t.name
                    ))
                })?;
                slice(data)
            }
            ExternalData::Dir(dir) => {
                let path = inside_dir(dir, &rel, &t.name, &loc)?;
                if !self.mapped.contains_key(&path) {
                    let data = map_file(&path, &t.name, &loc)?;
                    self.mapped.insert(path.clone(), data);
                }
                slice(&self.mapped[&path])
            }
        }
    }
}

/// `dir/rel`, resolved through symlinks, provided it is still inside `dir` and a regular file:
/// a textual check alone would let `w.bin -> /etc/passwd` out.
fn inside_dir(dir: &Path, rel: &Path, tensor: &str, loc: &str) -> Result<PathBuf> {
    let ctx = || format!("tensor '{tensor}': external data '{loc}'");
    let root = dir
        .canonicalize()
        .map_err(|e| Error::io(dir.display(), e))?;
    let target = root
        .join(rel)
        .canonicalize()
        .map_err(|e| Error::io(ctx(), e))?;
    if !target.starts_with(&root) {
        return Err(Error::invalid(format!(
            "{} resolves to {}, outside the model's folder",
            ctx(),
            target.display()
        )));
    }
    if !target.is_file() {
        return Err(Error::invalid(format!("{} is not a regular file", ctx())));
    }
    Ok(target)
}

/// Maps an external data file read-only. The tensors that slice it keep the mapping alive, so
/// only the pages a reader touches are read from disk. (Like every memory-mapped reader, this
/// assumes nobody truncates the file while the model is loaded.)
#[cfg(not(target_arch = "wasm32"))]
fn map_file(path: &Path, tensor: &str, loc: &str) -> Result<Bytes> {
    let ctx = || format!("tensor '{tensor}': external data '{loc}'");
    let f = std::fs::File::open(path).map_err(|e| Error::io(ctx(), e))?;
    if f.metadata().map_err(|e| Error::io(ctx(), e))?.len() == 0 {
        return Ok(Bytes::new()); // mapping an empty file fails on some systems
    }
    crate::onnx::mapped::map(&f).map_err(|e| Error::io(ctx(), e))
}

#[cfg(target_arch = "wasm32")]
fn map_file(_: &Path, tensor: &str, loc: &str) -> Result<Bytes> {
    Err(Error::invalid(format!(
        "tensor '{tensor}': external data '{loc}' cannot be read from a folder in wasm"
    )))
}

/// Names a subgraph reads from enclosing scopes (recursively through its own subgraphs).
pub fn free_names(g: &GraphProto) -> Vec<String> {
    let mut defined: HashSet<&str> = HashSet::new();
    for v in &g.input {
        defined.insert(&v.name);
    }
    for t in &g.initializer {
        defined.insert(&t.name);
    }
    for sp in &g.sparse_initializer {
        if let Some(v) = &sp.values {
            defined.insert(&v.name);
        }
    }
    for n in &g.node {
        for o in &n.output {
            defined.insert(o);
        }
    }
    let mut free = Vec::new();
    let push = |name: &str, free: &mut Vec<String>| {
        if !name.is_empty() && !defined.contains(name) && !free.iter().any(|f| f == name) {
            free.push(name.to_string());
        }
    };
    for n in &g.node {
        for i in &n.input {
            push(i, &mut free);
        }
        for sub in subgraphs(&n.attribute) {
            for name in free_names(sub) {
                push(&name, &mut free);
            }
        }
    }
    for o in &g.output {
        push(&o.name, &mut free);
    }
    free
}

/// A subgraph (If/Loop/Scan body) as a model of its own, under the enclosing model's opsets:
/// the values it reads from enclosing scopes are neither inputs nor produced in it (the
/// executor binds them by name). Types are inferred; the body is not verified.
pub fn subgraph_model(gp: &GraphProto, outer: &ModelProto) -> Result<Model> {
    let graph = build_graph(gp.clone())?;
    let mut proto = outer.clone();
    proto.graph = None;
    let mut model = Model { graph, proto };
    crate::ops::infer::infer_types(&mut model);
    Ok(model)
}

fn subgraphs(attrs: &[AttributeProto]) -> impl Iterator<Item = &GraphProto> {
    attrs
        .iter()
        .flat_map(|a| a.g.as_deref().into_iter().chain(a.graphs.iter()))
}

fn build_graph(gp: GraphProto) -> Result<Graph> {
    let mut g = Graph::new(&gp.name);
    g.extra.doc_string = gp.doc_string;
    g.extra.sparse_initializer = gp.sparse_initializer;
    g.extra.quantization_annotation = gp.quantization_annotation;
    g.extra.metadata_props = gp.metadata_props;
    for vi in gp.input {
        if vi.name.is_empty() {
            return Err(Error::invalid("a graph input has no name"));
        }
        if g.find(&vi.name).is_some() {
            return Err(Error::invalid(format!(
                "graph input '{}' is listed twice",
                vi.name
            )));
        }
        let ty = vi
            .r#type
            .as_ref()
            .map(TensorType::from_proto)
            .unwrap_or_default();
        let id = g.new_value(&vi.name, ty);
        g.value_mut(id).info = Some(vi);
        g.inputs.push(id);
    }
    for t in gp.initializer {
        if t.name.is_empty() {
            return Err(Error::invalid("an initializer has no name"));
        }
        let id = g.value_named(&t.name);
        if g.initializer(id).is_some() {
            return Err(Error::invalid(format!(
                "initializer '{}' is listed twice",
                t.name
            )));
        }
        let v = g.value_mut(id);
        if v.ty.dtype.is_none() {
            v.ty = TensorType {
                dtype: Some(crate::tensor::DType(t.data_type)),
                shape: Some(t.dims.iter().map(|&d| crate::ir::Dim::Known(d)).collect()),
            };
        }
        g.set_initializer(id, t);
    }
    for sp in &g.extra.sparse_initializer.clone() {
        let name = sp.values.as_ref().map(|v| v.name.as_str()).unwrap_or("");
        if name.is_empty() {
            return Err(Error::invalid("a sparse initializer has no name"));
        }
        let id = g.value_named(name);
        if g.initializer(id).is_some() || g.sparse_values.contains(&id) {
            return Err(Error::invalid(format!(
                "initializer '{name}' is listed twice"
            )));
        }
        g.sparse_values.push(id);
    }
    for np in gp.node {
        let mut node = Node::new(&np.op_type, &np.domain);
        node.name = np.name;
        node.inputs = np
            .input
            .iter()
            .map(|n| (!n.is_empty()).then(|| g.value_named(n)))
            .collect();
        let mut implicit = Vec::new();
        for sub in subgraphs(&np.attribute) {
            for name in free_names(sub) {
                let id = g.value_named(&name);
                if !implicit.contains(&id) {
                    implicit.push(id);
                }
            }
        }
        node.implicit_inputs = implicit;
        let mut outputs = Vec::with_capacity(np.output.len());
        for n in &np.output {
            if n.is_empty() {
                outputs.push(None);
                continue;
            }
            let id = g.value_named(n);
            if outputs.contains(&Some(id)) {
                return Err(Error::invalid(format!(
                    "node '{}' lists output '{n}' twice",
                    node.name
                )));
            }
            outputs.push(Some(id));
        }
        node.outputs = outputs;
        node.set_attributes(np.attribute);
        node.extra = crate::ir::node::NodeExtra {
            overload: np.overload,
            doc_string: np.doc_string,
            metadata_props: np.metadata_props,
            device_configurations: np.device_configurations,
        };
        g.add_node(node)?;
    }
    for vi in gp.output {
        if vi.name.is_empty() {
            return Err(Error::invalid("a graph output has no name"));
        }
        let id = g.value_named(&vi.name);
        if g.outputs.contains(&id) {
            return Err(Error::invalid(format!(
                "graph output '{}' is listed twice",
                vi.name
            )));
        }
        let v = g.value_mut(id);
        let ty = vi
            .r#type
            .as_ref()
            .map(TensorType::from_proto)
            .unwrap_or_default();
        merge_declared(&mut v.ty, ty);
        if v.info.is_none() {
            v.info = Some(vi);
        } else {
            g.output_info.insert(id, vi);
        }
        g.outputs.push(id);
    }
    for vi in gp.value_info {
        let id = g.value_named(&vi.name);
        let ty = vi
            .r#type
            .as_ref()
            .map(TensorType::from_proto)
            .unwrap_or_default();
        merge_declared(&mut g.value_mut(id).ty, ty);
        g.value_info.push((id, vi));
    }
    Ok(g)
}

fn merge_declared(cur: &mut TensorType, declared: TensorType) {
    if cur.dtype.is_none() {
        cur.dtype = declared.dtype;
    }
    if cur.shape.is_none() {
        cur.shape = declared.shape;
    }
}
