//! Hostile and broken models: every one is a clear error naming what is wrong, never a panic,
//! a stack overflow or an allocation past the limit. Each case is also written to a file and fed
//! to the CLI, which must exit 2 with one message.

mod common;

use std::path::Path;
use std::process::Command;

use fuselab::io::{load_bytes, load_file, LoadOptions};
use fuselab::ir::Dim;
use fuselab::onnx::proto::{
    data_type, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto, DATA_LOCATION_EXTERNAL,
};
use fuselab::{Error, Limits};
use prost::Message;

fn model(graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    }
}

fn vi(name: &str) -> fuselab::onnx::proto::ValueInfoProto {
    fuselab::onnx::proto::ValueInfoProto {
        name: name.into(),
        r#type: Some(
            fuselab::ir::TensorType::new(fuselab::DType::F32, vec![fuselab::ir::Dim::Known(2)])
                .to_proto(),
        ),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_{}", outputs.join("_")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn graph(nodes: Vec<NodeProto>, inits: Vec<TensorProto>) -> GraphProto {
    GraphProto {
        name: "g".into(),
        node: nodes,
        initializer: inits,
        input: vec![vi("X")],
        output: vec![vi("Y")],
        ..Default::default()
    }
}

fn load_err(bytes: &[u8]) -> String {
    let limits = Limits {
        max_tensor_bytes: 1 << 20,
    };
    let opts = LoadOptions {
        limits,
        ..Default::default()
    };
    match load_bytes(bytes, &opts) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

/// Writes the bytes to a file and runs `fuselab inspect` on it: exit 2, one line, no panic.
fn cli_rejects(name: &str, bytes: &[u8], needle: &str) {
    let dir = std::env::temp_dir().join(format!("fuselab-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.onnx"));
    std::fs::write(&file, bytes).unwrap();
    cli_rejects_file(&file, needle);
}

fn cli_rejects_file(file: &Path, needle: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_fuselab"))
        .args(["inspect", "--max-tensor-bytes", "1048576"])
        .arg(file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}: {err}", file.display());
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one message: {err}");
    assert!(
        err.contains(needle),
        "{}: expected {needle:?} in {err}",
        file.display()
    );
}

fn check(name: &str, m: &ModelProto, needle: &str) {
    let bytes = m.encode_to_vec();
    let msg = load_err(&bytes);
    assert!(
        msg.contains(needle),
        "{name}: expected {needle:?} in {msg:?}"
    );
    cli_rejects(name, &bytes, needle);
}

fn example_bytes() -> Vec<u8> {
    let m = common::eyelike_add(None);
    fuselab::io::to_bytes(&m).unwrap()
}

#[test]
fn truncated_files_are_decode_errors() {
    // Protobuf has no end marker: a cut exactly between two top-level fields is a valid (smaller)
    // model. A cut anywhere inside the graph field must fail.
    let bytes = example_bytes();
    let graph_bytes = fuselab::io::to_model_proto(&common::eyelike_add(None))
        .unwrap()
        .graph
        .unwrap()
        .encode_to_vec();
    let start = bytes
        .windows(graph_bytes.len())
        .position(|w| w == graph_bytes.as_slice())
        .expect("graph bytes appear in the model");
    for cut in 0..bytes.len() {
        let r = load_bytes(&bytes[..cut], &LoadOptions::default());
        if cut > start.saturating_sub(3) && cut < start + graph_bytes.len() {
            assert!(
                matches!(r, Err(Error::Decode(_))),
                "prefix of {cut} bytes (inside the graph): {:?}",
                r.map(|_| "loaded").map_err(|e| e.to_string())
            );
        }
    }
    cli_rejects("truncated", &bytes[..bytes.len() / 2], "cannot decode");
    cli_rejects("empty", &[], "empty");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = fuselab::runtime::inputs::Rng::new(42);
    for len in [1usize, 7, 64, 1000, 10_000] {
        for _ in 0..50 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let _ = load_bytes(&bytes, &LoadOptions::default());
        }
    }
    // Random bytes with a valid-looking ModelProto prefix (field 7, graph, huge length).
    let r = load_bytes(
        &[0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3],
        &LoadOptions::default(),
    );
    assert!(matches!(r, Err(Error::Decode(_))));
    cli_rejects(
        "random",
        &[0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3],
        "cannot decode",
    );
}

#[test]
fn undefined_value() {
    let m = model(graph(vec![node("Add", &["X", "ghost"], &["Y"])], vec![]));
    check("undefined", &m, "undefined value 'ghost'");
}

#[test]
fn cycle() {
    let m = model(graph(
        vec![
            node("Add", &["X", "B"], &["A"]),
            node("Relu", &["A"], &["B"]),
            node("Relu", &["A"], &["Y"]),
        ],
        vec![],
    ));
    check("cycle", &m, "cycle");
}

#[test]
fn duplicate_value_names() {
    let m = model(graph(
        vec![node("Relu", &["X"], &["Y"]), node("Neg", &["X"], &["Y"])],
        vec![],
    ));
    check("duplicate", &m, "'Y' is produced twice");
}

fn f32_tensor(name: &str, dims: Vec<i64>, raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims,
        data_type: data_type::FLOAT,
        raw_data: raw.into(),
        ..Default::default()
    }
}

#[test]
fn raw_data_length_disagrees_with_dims() {
    let w = f32_tensor("W", vec![2, 3], vec![0; 20]);
    let m = model(graph(vec![node("Add", &["X", "W"], &["Y"])], vec![w]));
    check(
        "rawlen",
        &m,
        "tensor 'W': raw_data has 20 bytes but dims [2, 3] of float32 need 24",
    );
}

#[test]
fn dims_product_overflows() {
    let w = f32_tensor("W", vec![1 << 40, 1 << 40], vec![]);
    let m = model(graph(vec![node("Add", &["X", "W"], &["Y"])], vec![w]));
    check("overflow", &m, "overflows");
}

#[test]
fn dims_past_the_size_limit() {
    // 4 MiB declared, limit 1 MiB: refused before anything is allocated or compared.
    let w = f32_tensor("W", vec![1024, 1024], vec![]);
    let m = model(graph(vec![node("Add", &["X", "W"], &["Y"])], vec![w]));
    check("limit", &m, "over the 1048576 byte limit");
}

#[test]
fn negative_dim() {
    let w = f32_tensor("W", vec![-3], vec![]);
    let m = model(graph(vec![node("Add", &["X", "W"], &["Y"])], vec![w]));
    check("negdim", &m, "negative dimension");
}

/// Appends a length-delimited field to a protobuf message by hand, so nesting thousands deep
/// never recurses in the test itself.
fn field(out: &mut Vec<u8>, tag: u32, payload: &[u8]) {
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, out);
    prost::encoding::encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

#[test]
fn subgraphs_nested_thousands_deep() {
    let mut g: Vec<u8> = Vec::new();
    for _ in 0..5000 {
        let mut attr = Vec::new();
        field(&mut attr, 1, b"then_branch");
        prost::encoding::encode_key(20, prost::encoding::WireType::Varint, &mut attr);
        prost::encoding::encode_varint(5, &mut attr);
        field(&mut attr, 6, &g);
        let mut n = Vec::new();
        field(&mut n, 4, b"If");
        field(&mut n, 5, &attr);
        let mut next = Vec::new();
        field(&mut next, 1, &n);
        g = next;
    }
    let mut m = Vec::new();
    field(&mut m, 7, &g);
    let msg = load_err(&m);
    assert!(msg.contains("recursion limit"), "{msg}");
    cli_rejects("deep", &m, "recursion limit");
}

fn external(location: &str, length: usize) -> TensorProto {
    TensorProto {
        name: "W".into(),
        dims: vec![2],
        data_type: data_type::FLOAT,
        data_location: DATA_LOCATION_EXTERNAL,
        external_data: vec![
            StringStringEntryProto {
                key: "location".into(),
                value: location.into(),
            },
            StringStringEntryProto {
                key: "length".into(),
                value: length.to_string(),
            },
        ],
        ..Default::default()
    }
}

#[test]
fn external_data_is_read_beside_the_model() {
    let dir = std::env::temp_dir().join(format!("fuselab-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(dir.join("w.bin"), &data).unwrap();
    let m = model(graph(
        vec![node("Add", &["X", "W"], &["Y"])],
        vec![external("w.bin", 8)],
    ));
    let path = dir.join("ext.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let loaded = load_file(&path, &Limits::default()).unwrap();
    let w = loaded.graph.find("W").unwrap();
    assert_eq!(loaded.graph.initializer(w).unwrap().raw_data, data);

    // Hostile locations never leave the folder.
    for (name, loc, needle) in [
        ("abs", "/etc/passwd", "is absolute"),
        ("dotdot", "../w.bin", "'..'"),
        ("nested-dotdot", "sub/../../w.bin", "'..'"),
        ("missing", "nope.bin", "nope.bin"),
    ] {
        let m = model(graph(
            vec![node("Add", &["X", "W"], &["Y"])],
            vec![external(loc, 8)],
        ));
        let p = dir.join(format!("{name}.onnx"));
        std::fs::write(&p, m.encode_to_vec()).unwrap();
        let err = load_file(&p, &Limits::default()).unwrap_err().to_string();
        assert!(err.contains(needle), "{name}: {err}");
        cli_rejects_file(&p, needle);
    }
    // A symlink inside the folder that points out of it is refused too.
    std::os::unix::fs::symlink("/etc/passwd", dir.join("link.bin")).ok();
    let m = model(graph(
        vec![node("Add", &["X", "W"], &["Y"])],
        vec![external("link.bin", 8)],
    ));
    let p = dir.join("symlink.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    let err = load_file(&p, &Limits::default()).unwrap_err().to_string();
    assert!(err.contains("outside the model's folder"), "{err}");
    cli_rejects_file(&p, "outside the model's folder");
    // Length that disagrees with the dims.
    let m = model(graph(
        vec![node("Add", &["X", "W"], &["Y"])],
        vec![external("w.bin", 4)],
    ));
    let p = dir.join("badlen.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    let err = load_file(&p, &Limits::default()).unwrap_err().to_string();
    assert!(err.contains("length 4"), "{err}");
}

/// Offsets past 4 GiB (and a data file of 4.5 GB) load natively: the file is sparse, so only
/// the tensor's 8 bytes take disk. The run reads them back through the mapping.
#[test]
fn external_data_past_4_gib_loads_and_runs() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = std::env::temp_dir().join(format!("fuselab-ext4g-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let offset: u64 = 4_500_000_000;
    let mut f = std::fs::File::create(dir.join("big.bin")).unwrap();
    f.set_len(offset + 64).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let data: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    f.write_all(&data).unwrap();
    drop(f);
    let mut w = external("big.bin", 8);
    w.external_data.push(StringStringEntryProto {
        key: "offset".into(),
        value: offset.to_string(),
    });
    let m = model(graph(vec![node("Add", &["X", "W"], &["Y"])], vec![w]));
    let path = dir.join("big.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let loaded = load_file(&path, &Limits::default()).unwrap();
    let x = fuselab::Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![2], vec![1.0, 1.0]).unwrap());
    let ex = fuselab::runtime::reference::Executor::new(&loaded, &Limits::default()).unwrap();
    let y = ex.run(&[("X".to_string(), x)].into()).unwrap();
    let y = y[0].1.as_f32().unwrap();
    assert_eq!(y.as_slice().unwrap(), [2.5, -1.0]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_and_misshapen_inputs_at_run_time() {
    use std::collections::HashMap;
    let m = common::eyelike_add(None);
    let ex = fuselab::runtime::reference::Executor::new(&m, &Limits::default()).unwrap();
    let err = ex.run(&HashMap::new()).unwrap_err().to_string();
    assert!(err.contains("input 'X': missing"), "{err}");
    let bad = fuselab::Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 2, 2])));
    let err = ex
        .run(&HashMap::from([("X".to_string(), bad)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected rank 2"), "{err}");
    let wrong_type = fuselab::Tensor::I64(ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 2])));
    let err = ex
        .run(&HashMap::from([("X".to_string(), wrong_type)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected float32, got int64"), "{err}");
}

#[test]
fn kernel_outputs_are_checked_against_the_limit_before_allocating() {
    use fuselab::builder::{dims, GraphBuilder};
    use std::collections::HashMap;
    // ReduceSum over the empty axis of X [2, 0, 2^20] yields 2 x 2^20 zeros: 8 MiB from an
    // empty input, over a 1 MiB limit.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", fuselab::DType::F32, dims(&[2, 0, 1 << 20]));
    let axes = b.initializer("axes", &fuselab::Tensor::from_i64s(&[1]));
    let y = b.op("ReduceSum", &[x, axes], vec![]);
    b.output(y, "Y");
    let m = b.build();
    let limits = Limits {
        max_tensor_bytes: 1 << 20,
    };
    let input = fuselab::Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 0, 1 << 20])));
    let ex = fuselab::runtime::reference::Executor::new(&m, &limits).unwrap();
    let err = ex
        .run(&HashMap::from([("X".to_string(), input)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("over the 1048576 byte limit"), "{err}");
}

#[test]
fn overflowing_declared_dims_in_shape_inference_do_not_panic() {
    // X: f32[2^62, 8] reshaped to [-1, 2^32, 2]: the element count, 2^65, overflows i64 during
    // inference (wrapped around it would be 0, and the -1 would come out as 0).
    let mut x = vi("X");
    x.r#type = Some(
        fuselab::ir::TensorType::new(
            fuselab::DType::F32,
            vec![Dim::Known(1 << 62), Dim::Known(8)],
        )
        .to_proto(),
    );
    let shape = TensorProto {
        name: "S".into(),
        dims: vec![3],
        data_type: data_type::INT64,
        int64_data: vec![-1, 1 << 32, 2],
        ..Default::default()
    };
    let mut g = graph(vec![node("Reshape", &["X", "S"], &["Y"])], vec![shape]);
    g.input = vec![x];
    // Y declares no shape, so the one it gets is inference's.
    g.output[0].r#type = Some(
        fuselab::ir::TensorType {
            dtype: Some(fuselab::DType::F32),
            shape: None,
        }
        .to_proto(),
    );
    // Nothing here to refuse (declared dims are only hints, and 2^62 x 4 is a shape, if a big
    // one): the model loads, and inference, unable to count the elements, leaves the -1 undecided
    // rather than solving it from a wrapped-around product.
    let m = load_bytes(&model(g).encode_to_vec(), &LoadOptions::default())
        .expect("declared dims whose product overflows still load");
    let shape = m.graph.value(m.graph.outputs[0]).ty.shape.clone().unwrap();
    assert_eq!(shape.len(), 3, "{shape:?}");
    assert!(shape[0].is_undecided(), "{shape:?}");
    assert_eq!(shape[1..], [Dim::Known(1 << 32), Dim::Known(2)]);
}

#[test]
fn an_attribute_of_the_wrong_type_is_a_load_error_naming_node_and_attribute() {
    let mut t = node("Transpose", &["X"], &["Y"]);
    t.attribute.push(fuselab::ir::attr::float("perm", 1.0));
    let m = model(graph(vec![t], vec![]));
    check(
        "wrong attribute type",
        &m,
        "Transpose node 'Transpose_Y': attribute 'perm' has the wrong type: INTS expected, found FLOAT",
    );
    // The same record on an op the registry does not know is not parsed: the model loads.
    let mut u = node("SomeCustomOp", &["X"], &["Y"]);
    u.domain = "com.example".into();
    u.attribute.push(fuselab::ir::attr::float("perm", 1.0));
    let mut m = model(graph(vec![u], vec![]));
    m.opset_import.push(OperatorSetIdProto {
        domain: "com.example".into(),
        version: 1,
    });
    assert!(load_bytes(&m.encode_to_vec(), &LoadOptions::default()).is_ok());
}
