//! Load → save with no pass re-loads to the same graph: over every model in the repo, the onnx
//! wheel's test data and the regenerated node-test corpus.

mod common;

use std::path::Path;

use fuselab::io::{load::decode, load_file, to_model_proto};
use fuselab::Limits;
use prost::Message;

/// Loads, saves and compares the saved ModelProto with the original, field by field. Returns
/// Ok(false) when the loader rejects the model (reported, counted by the caller).
fn round_trip(path: &Path) -> Result<bool, String> {
    let limits = Limits::default();
    let mut original = decode(std::fs::read(path).unwrap().into()).map_err(|e| e.to_string())?;
    inline_external(&mut original, path);
    let m = match load_file(path, &limits) {
        Ok(m) => m,
        Err(e) => return Err(format!("load failed: {e}")),
    };
    let saved = to_model_proto(&m).map_err(|e| e.to_string())?;
    // Compared as prost re-encodings (deterministic), so NaN payloads compare equal.
    if saved.encode_to_vec() != original.encode_to_vec() {
        let (a, b) = (
            original.graph.as_ref().unwrap(),
            saved.graph.as_ref().unwrap(),
        );
        let what = if a.node != b.node {
            "nodes"
        } else if a.input != b.input || a.output != b.output {
            "inputs/outputs"
        } else if a.initializer != b.initializer {
            "initializers"
        } else if a.value_info != b.value_info {
            "value_info"
        } else {
            "model fields"
        };
        return Err(format!("saved model differs from the original in {what}"));
    }
    // And the saved bytes load again to the same thing.
    let again = fuselab::io::load_bytes(&fuselab::io::to_bytes(&m).unwrap(), &Default::default())
        .map_err(|e| format!("re-load failed: {e}"))?;
    if to_model_proto(&again).unwrap().encode_to_vec() != saved.encode_to_vec() {
        return Err("second round trip differs".into());
    }
    Ok(true)
}

/// The original with its external tensors' bytes read in (location, offset, length beside
/// the model), as the loader inlines them: what a saved single-file model must equal.
fn inline_external(m: &mut fuselab::onnx::proto::ModelProto, path: &Path) {
    use std::io::{Read, Seek, SeekFrom};
    let Some(g) = m.graph.as_mut() else { return };
    for t in g.initializer.iter_mut().filter(|t| t.data_location == 1) {
        let kv = |k: &str| {
            t.external_data
                .iter()
                .find(|e| e.key == k)
                .map(|e| e.value.clone())
        };
        let file = path.with_file_name(kv("location").unwrap());
        let offset: u64 = kv("offset").map_or(0, |o| o.parse().unwrap());
        let length: usize = kv("length").unwrap().parse().unwrap();
        let mut f = std::fs::File::open(&file).unwrap();
        f.seek(SeekFrom::Start(offset)).unwrap();
        let mut bytes = vec![0u8; length];
        f.read_exact(&mut bytes).unwrap();
        t.raw_data = bytes.into();
        t.external_data.clear();
        t.data_location = 0;
    }
}

fn check_all(files: &[std::path::PathBuf], min: usize) {
    assert!(
        files.len() >= min,
        "expected at least {min} models, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for f in files {
        if let Err(e) = round_trip(f) {
            failures.push(format!("{}: {e}", f.display()));
        }
    }
    println!(
        "{} models round-tripped, {} failed",
        files.len() - failures.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "round trip failures:\n{}",
        failures.join("\n")
    );
}

#[test]
fn repo_models_round_trip() {
    let mut files = common::onnx_files(&common::repo().join("examples"));
    files.extend(common::onnx_files(&common::repo().join("tests/models")));
    check_all(&files, 1);
}

/// The real models the onnx wheel ships (CNNs, pytorch-converted and simple graphs).
fn wheel_models() -> Vec<std::path::PathBuf> {
    let data = common::onnx_wheel().join("backend/test/data");
    let subs = [
        "simple",
        "pytorch-converted",
        "pytorch-operator",
        "light",
        "real",
    ];
    subs.iter()
        .flat_map(|sub| common::onnx_files(&data.join(sub)))
        .collect()
}

#[test]
fn onnx_wheel_test_data_round_trips() {
    check_all(&wheel_models(), 50);
}

#[test]
fn node_corpus_round_trips() {
    check_all(&common::onnx_files(&common::node_corpus()), 1000);
}

/// Every pass on every corpus model (most hold ops the reference backend lacks): the optimized
/// graph verifies, saves and re-loads, and no rule errors.
#[test]
fn passes_are_sound_on_every_corpus_model() {
    let mut files = common::onnx_files(&common::node_corpus());
    files.extend(wheel_models());
    let mut failures = Vec::new();
    let mut rewritten = 0;
    for f in &files {
        let Ok(mut m) = load_file(f, &Limits::default()) else {
            continue; // load failures are reported by the round-trip tests
        };
        let result = fuselab::passes::optimize(&mut m, &[])
            .and_then(|trace| {
                rewritten += usize::from(!trace.rewrites.is_empty());
                fuselab::ops::verify(&m)
            })
            .and_then(|_| fuselab::io::to_bytes(&m))
            .and_then(|b| fuselab::io::load_bytes(&b, &Default::default()).map(|_| ()));
        if let Err(e) = result {
            failures.push(format!("{}: {e}", f.display()));
        }
    }
    println!(
        "{} models optimized ({rewritten} rewritten), {} failed",
        files.len(),
        failures.len()
    );
    assert!(rewritten > 10, "the passes changed only {rewritten} models");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A model with every part ONNX has: metadata, functions, training info, sparse initializers,
/// quantization annotations, value_info with symbolic dims and denotations, an attribute of
/// every kind (subgraphs included) and tensors of every element type in raw and typed storage.
#[test]
fn every_part_of_a_model_survives_a_round_trip() {
    use fuselab::onnx::proto::{
        attribute_type as at, data_type as dt, type_proto, AttributeProto, Dim, Dimension,
        FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, SparseTensorProto,
        StringStringEntryProto, TensorAnnotation, TensorProto, TensorShapeProto, TrainingInfoProto,
        TypeProto, ValueInfoProto,
    };
    let kv = |k: &str, v: &str| StringStringEntryProto {
        key: k.into(),
        value: v.into(),
    };
    let sym_type = |elem: i32| TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: elem,
            shape: Some(TensorShapeProto {
                dim: vec![
                    Dimension {
                        value: Some(Dim::DimParam("batch".into())),
                        denotation: "DATA_BATCH".into(),
                    },
                    Dimension {
                        value: Some(Dim::DimValue(4)),
                        denotation: String::new(),
                    },
                    Dimension::default(),
                ],
            }),
        })),
        denotation: "TENSOR".into(),
    };
    let vi = |name: &str| ValueInfoProto {
        name: name.into(),
        r#type: Some(sym_type(dt::FLOAT)),
        doc_string: format!("doc of {name}"),
        metadata_props: vec![kv("origin", name)],
    };
    // One tensor per element type: raw_data for each, plus the typed fields where they exist.
    let mut tensors = Vec::new();
    for ty in 1..=28 {
        if ty == dt::STRING {
            continue;
        }
        let bits = fuselab::DType(ty).bits().unwrap() as usize;
        tensors.push(TensorProto {
            name: format!("raw_{ty}"),
            dims: vec![2, 4],
            data_type: ty,
            raw_data: (0..(8 * bits).div_ceil(8)).map(|i| i as u8).collect(),
            doc_string: "raw".into(),
            metadata_props: vec![kv("k", "v")],
            ..Default::default()
        });
    }
    let typed = |name: &str, ty: i32| TensorProto {
        name: name.into(),
        dims: vec![2],
        data_type: ty,
        ..Default::default()
    };
    tensors.push(TensorProto {
        float_data: vec![1.5, -0.0],
        ..typed("f32", dt::FLOAT)
    });
    tensors.push(TensorProto {
        double_data: vec![1e300, 2.0],
        ..typed("f64", dt::DOUBLE)
    });
    tensors.push(TensorProto {
        int64_data: vec![i64::MIN, 7],
        ..typed("i64", dt::INT64)
    });
    tensors.push(TensorProto {
        int32_data: vec![0x3c00, 0x7e00],
        ..typed("f16", dt::FLOAT16)
    });
    tensors.push(TensorProto {
        int32_data: vec![0x3f80, 0xffc0],
        ..typed("bf16", dt::BFLOAT16)
    });
    tensors.push(TensorProto {
        int32_data: vec![1, 0],
        ..typed("bool", dt::BOOL)
    });
    tensors.push(TensorProto {
        uint64_data: vec![u64::MAX, 1],
        ..typed("u64", dt::UINT64)
    });
    tensors.push(TensorProto {
        string_data: vec![b"hello".to_vec(), vec![0xff, 0x00]],
        ..typed("str", dt::STRING)
    });
    let sparse = SparseTensorProto {
        values: Some(TensorProto {
            float_data: vec![3.0],
            ..typed("sp", dt::FLOAT)
        }),
        indices: Some(TensorProto {
            int64_data: vec![1],
            dims: vec![1],
            ..typed("", dt::INT64)
        }),
        dims: vec![4],
    };
    let body = GraphProto {
        name: "body".into(),
        node: vec![NodeProto {
            op_type: "Neg".into(),
            input: vec!["X".into()],
            output: vec!["b".into()],
            ..Default::default()
        }],
        output: vec![vi("b")],
        ..Default::default()
    };
    let a = |name: &str, ty: i32| AttributeProto {
        name: name.into(),
        r#type: ty,
        doc_string: format!("attr {name}"),
        ..Default::default()
    };
    let attrs = vec![
        AttributeProto {
            f: 0.5,
            ..a("f", at::FLOAT)
        },
        AttributeProto {
            i: -3,
            ..a("i", at::INT)
        },
        AttributeProto {
            s: b"s".to_vec(),
            ..a("s", at::STRING)
        },
        AttributeProto {
            t: Some(tensors[0].clone()),
            ..a("t", at::TENSOR)
        },
        AttributeProto {
            g: Some(Box::new(body.clone())),
            ..a("g", at::GRAPH)
        },
        AttributeProto {
            floats: vec![1.0, f32::NAN],
            ..a("floats", at::FLOATS)
        },
        AttributeProto {
            ints: vec![1, -1],
            ..a("ints", at::INTS)
        },
        AttributeProto {
            strings: vec![b"a".to_vec()],
            ..a("strings", at::STRINGS)
        },
        AttributeProto {
            tensors: tensors[1..3].to_vec(),
            ..a("tensors", at::TENSORS)
        },
        AttributeProto {
            graphs: vec![body.clone()],
            ..a("graphs", at::GRAPHS)
        },
        AttributeProto {
            sparse_tensor: Some(sparse.clone()),
            ..a("sp", at::SPARSE_TENSOR)
        },
        AttributeProto {
            sparse_tensors: vec![sparse.clone()],
            ..a("sps", at::SPARSE_TENSORS)
        },
        AttributeProto {
            tp: Some(sym_type(dt::INT64)),
            ..a("tp", at::TYPE_PROTO)
        },
        AttributeProto {
            type_protos: vec![sym_type(dt::BOOL)],
            ..a("tps", at::TYPE_PROTOS)
        },
        AttributeProto {
            ref_attr_name: "outer".into(),
            ..a("ref", at::INT)
        },
    ];
    let graph = GraphProto {
        name: "everything".into(),
        doc_string: "graph doc".into(),
        input: vec![vi("X")],
        output: vec![vi("Y")],
        initializer: tensors.clone(),
        sparse_initializer: vec![sparse],
        value_info: vec![vi("mid")],
        quantization_annotation: vec![TensorAnnotation {
            tensor_name: "mid".into(),
            quant_parameter_tensor_names: vec![kv("SCALE_TENSOR", "raw_1")],
        }],
        metadata_props: vec![kv("graph", "meta")],
        node: vec![
            NodeProto {
                op_type: "Custom".into(),
                domain: "com.example".into(),
                name: "custom".into(),
                overload: "v2".into(),
                input: vec!["X".into(), String::new(), "raw_1".into()],
                output: vec!["mid".into(), String::new()],
                attribute: attrs.clone(),
                doc_string: "node doc".into(),
                metadata_props: vec![kv("node", "meta")],
                ..Default::default()
            },
            NodeProto {
                op_type: "Relu".into(),
                name: "relu".into(),
                input: vec!["mid".into()],
                output: vec!["Y".into()],
                ..Default::default()
            },
        ],
    };
    let opset = |d: &str, v: i64| OperatorSetIdProto {
        domain: d.into(),
        version: v,
    };
    let model = ModelProto {
        ir_version: 10,
        opset_import: vec![opset("", 21), opset("com.example", 1)],
        producer_name: "test".into(),
        producer_version: "1".into(),
        domain: "org.example".into(),
        model_version: 3,
        doc_string: "model doc".into(),
        graph: Some(graph),
        metadata_props: vec![kv("author", "fuselab")],
        training_info: vec![TrainingInfoProto {
            initialization: Some(body.clone()),
            algorithm: Some(body.clone()),
            initialization_binding: vec![kv("a", "b")],
            update_binding: vec![kv("c", "d")],
        }],
        functions: vec![FunctionProto {
            name: "Custom".into(),
            domain: "com.example".into(),
            overload: "v2".into(),
            input: vec!["x".into()],
            output: vec!["y".into()],
            attribute: vec!["alpha".into()],
            attribute_proto: vec![AttributeProto {
                f: 1.0,
                ..a("beta", at::FLOAT)
            }],
            node: vec![NodeProto {
                op_type: "Relu".into(),
                input: vec!["x".into()],
                output: vec!["y".into()],
                attribute: vec![attrs[0].clone()],
                ..Default::default()
            }],
            opset_import: vec![opset("", 21)],
            value_info: vec![vi("y")],
            metadata_props: vec![kv("fn", "meta")],
            doc_string: "function doc".into(),
        }],
        configuration: vec![],
    };
    let bytes = model.encode_to_vec();
    let loaded = fuselab::io::load_bytes(&bytes, &Default::default()).unwrap();
    let saved = to_model_proto(&loaded).unwrap();
    assert_eq!(
        saved.encode_to_vec(),
        bytes,
        "saved model differs from the original"
    );
}

/// A node may read a sparse initializer; quantization-annotated initializers survive passes.
#[test]
fn sparse_initializers_and_annotated_tensors_are_kept() {
    use fuselab::onnx::proto::{
        data_type as dt, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, SparseTensorProto,
        StringStringEntryProto, TensorAnnotation, TensorProto, ValueInfoProto,
    };
    let t = |name: &str, ty: i32, dims: Vec<i64>| TensorProto {
        name: name.into(),
        data_type: ty,
        dims,
        ..Default::default()
    };
    let sparse = SparseTensorProto {
        values: Some(TensorProto {
            float_data: vec![3.0],
            ..t("S", dt::FLOAT, vec![1])
        }),
        indices: Some(TensorProto {
            int64_data: vec![1],
            ..t("", dt::INT64, vec![1])
        }),
        dims: vec![4],
    };
    let scale = TensorProto {
        float_data: vec![0.5],
        ..t("scale", dt::FLOAT, vec![])
    };
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            name: "g".into(),
            node: vec![NodeProto {
                op_type: "Add".into(),
                input: vec!["X".into(), "S".into()],
                output: vec!["Y".into()],
                ..Default::default()
            }],
            input: vec![ValueInfoProto {
                name: "X".into(),
                ..Default::default()
            }],
            output: vec![ValueInfoProto {
                name: "Y".into(),
                ..Default::default()
            }],
            initializer: vec![scale],
            sparse_initializer: vec![sparse],
            quantization_annotation: vec![TensorAnnotation {
                tensor_name: "Y".into(),
                quant_parameter_tensor_names: vec![StringStringEntryProto {
                    key: "SCALE_TENSOR".into(),
                    value: "scale".into(),
                }],
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = model.encode_to_vec();
    let mut m = fuselab::io::load_bytes(&bytes, &Default::default()).unwrap();
    assert_eq!(to_model_proto(&m).unwrap().encode_to_vec(), bytes);
    fuselab::passes::optimize(&mut m, &[]).unwrap();
    let g = &m.graph;
    assert!(
        g.find("scale").and_then(|v| g.initializer(v)).is_some(),
        "annotated initializer dropped"
    );
}

#[test]
fn a_value_that_is_both_input_and_output_keeps_both_declarations() {
    use fuselab::onnx::proto::{GraphProto, ModelProto, OperatorSetIdProto, ValueInfoProto};
    let vi = |doc: &str| ValueInfoProto {
        name: "X".into(),
        doc_string: doc.into(),
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            name: "passthrough".into(),
            input: vec![vi("as input")],
            output: vec![vi("as output")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = model.encode_to_vec();
    let m = fuselab::io::load_bytes(&bytes, &Default::default()).unwrap();
    assert_eq!(to_model_proto(&m).unwrap().encode_to_vec(), bytes);
}

/// A model past the reader's limit goes to external data by itself (`automatic`), at the default
/// 1 KiB threshold, and loads back the same; under the limit it stays one file. The limit here
/// is 64 MiB (left for the nodes) + 100 KB instead of protobuf's 2 GiB, so that gpt2_tiny's ~1 MB
/// of weights is past it.
#[test]
fn a_model_past_the_protobuf_limit_saves_its_weights_externally_by_itself() {
    let dir = std::env::temp_dir().join(format!("fuselab-save-auto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/gpt2_tiny.onnx");
    let m = load_file(&src, &Limits::default()).unwrap();
    let out = dir.join("m.onnx");
    let small = (64 << 20) + 100_000;
    let saved = fuselab::io::save_file_within(&m, &out, None, small).unwrap();
    assert!(saved.automatic);
    assert_eq!(
        saved.data_file.as_deref(),
        Some(dir.join("m.onnx.data").as_path())
    );
    let big = m
        .graph
        .initializers()
        .filter(|(_, t)| t.raw_data.len() as u64 >= fuselab::io::DEFAULT_EXTERNAL_THRESHOLD)
        .count();
    assert_eq!(saved.external_tensors, big);
    assert!(std::fs::metadata(&out).unwrap().len() < 100_000);
    let again = load_file(&out, &Limits::default()).unwrap();
    assert_eq!(
        to_model_proto(&again).unwrap().encode_to_vec(),
        to_model_proto(&m).unwrap().encode_to_vec()
    );
    // Under the limit (protobuf's own): one self-contained file, no data file.
    std::fs::remove_file(dir.join("m.onnx.data")).unwrap();
    let saved = fuselab::io::save_file(&m, &out, None).unwrap();
    assert_eq!(saved, fuselab::io::Saved::default());
    assert!(!dir.join("m.onnx.data").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `save_file` with a threshold: tensors with at least that many bytes of raw data go to
/// `<name>.data` beside the model at 64-byte aligned offsets, smaller ones stay inline, and the
/// pair loads back to the same model as the in-memory one.
#[test]
fn external_data_save_round_trips() {
    let dir = std::env::temp_dir().join(format!("fuselab-save-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/gpt2_tiny.onnx");
    let m = load_file(&src, &Limits::default()).unwrap();
    let out = dir.join("m.onnx");
    let threshold = 4096u64;
    let saved = fuselab::io::save_file(&m, &out, Some(threshold)).unwrap();
    let data = dir.join("m.onnx.data");
    assert_eq!(saved.data_file.as_deref(), Some(data.as_path()));
    assert!(!saved.automatic);
    let big: Vec<_> = m
        .graph
        .initializers()
        .filter(|(_, t)| t.raw_data.len() as u64 >= threshold)
        .map(|(_, t)| t.raw_data.len() as u64)
        .collect();
    assert!(big.len() > 5, "gpt2_tiny has large weights");
    assert_eq!(saved.external_tensors, big.len());
    assert_eq!(saved.external_bytes, big.iter().sum::<u64>());
    // The model file holds stubs: location, aligned offset, length; no bytes.
    let proto = decode(std::fs::read(&out).unwrap().into()).unwrap();
    let mut external = 0;
    for t in &proto.graph.as_ref().unwrap().initializer {
        let kv: std::collections::HashMap<_, _> = t
            .external_data
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        if t.data_location == 1 {
            external += 1;
            assert!(t.raw_data.is_empty());
            assert_eq!(kv["location"], "m.onnx.data");
            assert_eq!(kv["offset"].parse::<u64>().unwrap() % 64, 0);
            assert!(kv["length"].parse::<u64>().unwrap() >= threshold);
        } else {
            assert!((t.raw_data.len() as u64) < threshold, "{}", t.name);
        }
    }
    assert_eq!(external, big.len());
    let file_len = std::fs::metadata(&data).unwrap().len();
    assert!(
        file_len >= saved.external_bytes && file_len < saved.external_bytes + 64 * big.len() as u64
    );
    let again = load_file(&out, &Limits::default()).unwrap();
    assert_eq!(
        to_model_proto(&again).unwrap().encode_to_vec(),
        to_model_proto(&m).unwrap().encode_to_vec()
    );
    // Loading copies no tensor bytes: every external tensor is a slice of one mapping of the data
    // file, so two tensors lie as far apart in memory as in the file.
    let slices: Vec<(u64, usize)> = again
        .graph
        .initializers()
        .zip(proto.graph.as_ref().unwrap().initializer.iter())
        .filter(|(_, stub)| stub.data_location == 1)
        .map(|((_, t), stub)| {
            let offset = stub
                .external_data
                .iter()
                .find(|e| e.key == "offset")
                .unwrap();
            (offset.value.parse().unwrap(), t.raw_data.as_ptr() as usize)
        })
        .collect();
    let (off0, ptr0) = slices[0];
    for &(off, ptr) in &slices {
        assert_eq!(ptr as i128 - ptr0 as i128, off as i128 - off0 as i128);
    }
    // A clone of the graph (the optimizer's working copy) shares the bytes and the decoded
    // weights: each weight is decoded once for both.
    let copy = again.clone();
    for ((v, a), (_, b)) in again.graph.initializers().zip(copy.graph.initializers()) {
        assert_eq!(a.raw_data.as_ptr(), b.raw_data.as_ptr());
        let (x, y) = (
            again.graph.initializer_value(v),
            copy.graph.initializer_value(v),
        );
        assert!(std::ptr::eq(x.unwrap(), y.unwrap()), "{}", a.name);
    }
    // Without a threshold a small model stays one file.
    let one = dir.join("one.onnx");
    assert_eq!(
        fuselab::io::save_file(&m, &one, None).unwrap(),
        fuselab::io::Saved::default()
    );
    assert!(!dir.join("one.onnx.data").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
