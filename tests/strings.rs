//! String tensors end to end: initializers through the protobuf codec and back, a saved model
//! re-loaded and run, and the codec's refusal of bytes that are not UTF-8.

use std::collections::HashMap;

use fuselab::builder::{dims, GraphBuilder};
use fuselab::ir::attr;
use fuselab::onnx::proto::{data_type as dt, TensorProto};
use fuselab::onnx::tensor::{from_tensor, to_tensor};
use fuselab::runtime::reference::Executor;
use fuselab::{DType, Limits, Tensor};
use ndarray::{ArrayD, IxDyn};

fn strs(shape: &[usize], v: &[&str]) -> Tensor {
    let v = v.iter().map(|s| s.to_string()).collect();
    Tensor::Str(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
}

#[test]
fn string_tensors_round_trip_through_string_data() {
    let t = strs(&[2, 2], &["a", "", "的", "tab\there"]);
    let p = from_tensor("words", &t);
    assert_eq!(p.data_type, dt::STRING);
    assert!(p.raw_data.is_empty());
    assert_eq!(p.string_data[2], "的".as_bytes());
    assert_eq!(to_tensor(&p, &Limits::default()).unwrap(), t);
}

#[test]
fn bytes_that_are_not_utf8_are_refused_by_name() {
    let p = TensorProto {
        name: "bad".into(),
        dims: vec![2],
        data_type: dt::STRING,
        string_data: vec![b"ok".to_vec(), vec![0xff, 0xfe]],
        ..Default::default()
    };
    let e = to_tensor(&p, &Limits::default()).unwrap_err().to_string();
    assert!(e.contains("tensor 'bad': string 1 is not UTF-8"), "{e}");
    // A count that does not fill the dims is refused before anything is built.
    let short = TensorProto { dims: vec![3], ..p };
    let e = to_tensor(&short, &Limits::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 strings for dims [3]"), "{e}");
}

/// Gather from a string initializer, Equal against an input, Cast of the picked words' lengths
/// as text: saved to bytes, loaded again, run.
#[test]
fn a_saved_model_with_string_initializers_loads_and_runs() {
    let mut b = GraphBuilder::new("strings", 20);
    let vocab = b.initializer("vocab", &strs(&[3], &["zero", "one", "two"]));
    let idx = b.input("idx", DType::I64, dims(&[2]));
    let want = b.input("want", DType::STRING, dims(&[2]));
    let picked = b.op("Gather", &[vocab, idx], vec![attr::int("axis", 0)]);
    let same = b.op("Equal", &[picked, want], vec![]);
    let suffix = b.initializer("suffix", &strs(&[], &["!"]));
    let shout = b.op("StringConcat", &[picked, suffix], vec![]);
    let n = b.op("Cast", &[idx], vec![attr::int("to", i64::from(dt::STRING))]);
    b.output(same, "same");
    b.output(shout, "shout");
    b.output(n, "n");
    let m = b.build();
    let bytes = fuselab::io::to_bytes(&m).unwrap();
    let m = fuselab::io::load_bytes(&bytes, &Default::default()).unwrap();
    let g = &m.graph;
    let ty = |name: &str| g.value(g.find(name).unwrap()).ty.dtype;
    assert_eq!(ty("shout"), Some(DType::STRING));
    assert_eq!(ty("n"), Some(DType::STRING));
    let inputs: HashMap<String, Tensor> = [
        ("idx".to_string(), Tensor::from_i64s(&[2, 0])),
        ("want".to_string(), strs(&[2], &["two", "one"])),
    ]
    .into();
    let out = Executor::new(&m, &Limits::default())
        .unwrap()
        .run(&inputs)
        .unwrap();
    let out: HashMap<_, _> = out.into_iter().collect();
    assert_eq!(
        out["same"],
        Tensor::Bool(ArrayD::from_shape_vec(IxDyn(&[2]), vec![true, false]).unwrap())
    );
    assert_eq!(out["shout"], strs(&[2], &["two!", "zero!"]));
    assert_eq!(out["n"], strs(&[2], &["2", "0"]));
    // A numeric op fed strings fails naming the op and the type.
    let mut b = GraphBuilder::new("bad", 20);
    let x = b.input("x", DType::STRING, dims(&[1]));
    let y = b.op("Relu", &[x], vec![]);
    b.output(y, "y");
    let m = b.build();
    let inputs: HashMap<String, Tensor> = [("x".to_string(), strs(&[1], &["a"]))].into();
    let e = Executor::new(&m, &Limits::default())
        .and_then(|ex| ex.run(&inputs))
        .unwrap_err()
        .to_string();
    assert!(e.contains("Relu") && e.contains("string"), "{e}");
}
