//! If, Loop and Scan on the reference backend, on hand-built models whose bodies read values of
//! the enclosing graph; expected values computed by hand.

use std::collections::HashMap;

use fuselab::io::{load_bytes, LoadOptions};
use fuselab::onnx::proto::{
    attribute_type as at, data_type as dt, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TypeProto, ValueInfoProto,
};
use fuselab::runtime::reference::Executor;
use fuselab::{Limits, Tensor};
use ndarray::{ArrayD, IxDyn};
use prost::Message;

fn vi(name: &str, elem: i32) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem,
                shape: None,
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, ins: &[&str], outs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_{}", outs.join("_")),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    }
}

fn graph(
    name: &str,
    nodes: Vec<NodeProto>,
    ins: Vec<ValueInfoProto>,
    outs: Vec<ValueInfoProto>,
) -> GraphProto {
    GraphProto {
        name: name.into(),
        node: nodes,
        input: ins,
        output: outs,
        ..Default::default()
    }
}

fn g_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::GRAPH,
        g: Some(Box::new(g)),
        ..Default::default()
    }
}

fn i_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::INT,
        i: v,
        ..Default::default()
    }
}

fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::INTS,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn load(g: GraphProto) -> fuselab::Result<fuselab::ir::Model> {
    load_at(g, 17)
}

fn load_at(g: GraphProto, opset: i64) -> fuselab::Result<fuselab::ir::Model> {
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(g),
        ..Default::default()
    };
    load_bytes(&m.encode_to_vec(), &LoadOptions::default())
}

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

fn run(g: GraphProto, feeds: &[(&str, Tensor)]) -> fuselab::Result<Vec<Tensor>> {
    run_at(g, 17, feeds)
}

fn run_at(g: GraphProto, opset: i64, feeds: &[(&str, Tensor)]) -> fuselab::Result<Vec<Tensor>> {
    let m = load_at(g, opset)?;
    let inputs: HashMap<String, Tensor> = feeds
        .iter()
        .map(|(k, t)| (k.to_string(), t.clone()))
        .collect();
    let ex = Executor::new(&m, &Limits::default())?;
    Ok(ex.run(&inputs)?.into_iter().map(|(_, t)| t).collect())
}

/// cond = sum(X) > T, computed in the outer graph; both branches read the outer X.
fn if_model() -> GraphProto {
    let then_b = graph(
        "then",
        vec![node("Add", &["X", "X"], &["ty"], vec![])],
        vec![],
        vec![vi("ty", dt::FLOAT)],
    );
    let else_b = graph(
        "else",
        vec![node("Neg", &["X"], &["ey"], vec![])],
        vec![],
        vec![vi("ey", dt::FLOAT)],
    );
    graph(
        "main",
        vec![
            node("ReduceSum", &["X"], &["s"], vec![i_attr("keepdims", 0)]),
            node("Greater", &["s", "T"], &["c"], vec![]),
            node(
                "If",
                &["c"],
                &["Y"],
                vec![g_attr("then_branch", then_b), g_attr("else_branch", else_b)],
            ),
        ],
        vec![vi("X", dt::FLOAT), vi("T", dt::FLOAT)],
        vec![vi("Y", dt::FLOAT)],
    )
}

#[test]
fn if_picks_the_branch_by_a_computed_cond_and_reads_outer_values() {
    let x = f32s(&[3], &[1., 2., 3.]);
    let out = run(if_model(), &[("X", x.clone()), ("T", f32s(&[], &[5.]))]).unwrap();
    assert_eq!(out[0], f32s(&[3], &[2., 4., 6.]));
    let out = run(if_model(), &[("X", x), ("T", f32s(&[], &[10.]))]).unwrap();
    assert_eq!(out[0], f32s(&[3], &[-1., -2., -3.]));
}

#[test]
fn if_without_an_else_branch_is_refused() {
    let mut g = if_model();
    g.node[2].attribute.truncate(1);
    let Err(e) = load(g) else {
        panic!("an If without else_branch loaded")
    };
    let e = e.to_string();
    assert!(e.contains("'else_branch' (a graph) is missing"), "{e}");
}

/// s_{i+1} = s_i + i * K (K outer), stop when s reaches L (outer) or after M iterations; every
/// s is also a scan output.
fn loop_model() -> GraphProto {
    let body = graph(
        "body",
        vec![
            node(
                "Cast",
                &["i"],
                &["fi"],
                vec![i_attr("to", dt::FLOAT as i64)],
            ),
            node("Mul", &["fi", "K"], &["step"], vec![]),
            node("Add", &["s_in", "step"], &["s_out"], vec![]),
            node("Less", &["s_out", "L"], &["c_out"], vec![]),
            node("Identity", &["s_out"], &["s_scan"], vec![]),
        ],
        vec![
            vi("i", dt::INT64),
            vi("c_in", dt::BOOL),
            vi("s_in", dt::FLOAT),
        ],
        vec![
            vi("c_out", dt::BOOL),
            vi("s_out", dt::FLOAT),
            vi("s_scan", dt::FLOAT),
        ],
    );
    graph(
        "main",
        vec![node(
            "Loop",
            &["M", "C", "S0"],
            &["S", "Ss"],
            vec![g_attr("body", body)],
        )],
        vec![
            vi("M", dt::INT64),
            vi("C", dt::BOOL),
            vi("S0", dt::FLOAT),
            vi("K", dt::FLOAT),
            vi("L", dt::FLOAT),
        ],
        vec![vi("S", dt::FLOAT), vi("Ss", dt::FLOAT)],
    )
}

fn loop_feeds(m: i64, l: f32) -> Vec<(&'static str, Tensor)> {
    vec![
        ("M", Tensor::I64(ArrayD::from_elem(IxDyn(&[]), m))),
        ("C", Tensor::Bool(ArrayD::from_elem(IxDyn(&[]), true))),
        ("S0", f32s(&[], &[0.])),
        ("K", f32s(&[], &[2.])),
        ("L", f32s(&[], &[l])),
    ]
}

#[test]
fn loop_runs_the_trip_count_or_until_cond_turns_false() {
    // 5 iterations: 2 * (0 + 1 + 2 + 3 + 4) = 20.
    let out = run(loop_model(), &loop_feeds(5, 100.)).unwrap();
    assert_eq!(out[0], f32s(&[], &[20.]));
    assert_eq!(out[1], f32s(&[5], &[0., 2., 6., 12., 20.]));
    // s: 0, 2, 6, 12; 12 < 7 is false after the fourth iteration.
    let out = run(loop_model(), &loop_feeds(100, 7.)).unwrap();
    assert_eq!(out[0], f32s(&[], &[12.]));
    assert_eq!(out[1], f32s(&[4], &[0., 2., 6., 12.]));
}

#[test]
fn a_huge_trip_count_is_refused_before_looping() {
    let Err(e) = run(loop_model(), &loop_feeds(1 << 62, 1e30)) else {
        panic!("a trip count of 2^62 ran")
    };
    let e = e.to_string();
    assert!(e.contains("iteration limit"), "{e}");
}

/// Scan's body for a running sum: state s_in + element x, returned as the new state and as
/// the step's scan output.
fn running_sum_body() -> GraphProto {
    graph(
        "body",
        vec![
            node("Add", &["s_in", "x"], &["s_out"], vec![]),
            node("Identity", &["s_out"], &["y"], vec![]),
        ],
        vec![vi("s_in", dt::FLOAT), vi("x", dt::FLOAT)],
        vec![vi("s_out", dt::FLOAT), vi("y", dt::FLOAT)],
    )
}

#[test]
fn scan_computes_a_cumulative_sum_both_ways() {
    let body = running_sum_body();
    let model = |extra: Vec<AttributeProto>| {
        let mut attrs = vec![g_attr("body", body.clone()), i_attr("num_scan_inputs", 1)];
        attrs.extend(extra);
        graph(
            "main",
            vec![node("Scan", &["S0", "X"], &["S", "Y"], attrs)],
            vec![vi("S0", dt::FLOAT), vi("X", dt::FLOAT)],
            vec![vi("S", dt::FLOAT), vi("Y", dt::FLOAT)],
        )
    };
    let feeds = [
        ("S0", f32s(&[2], &[0., 0.])),
        ("X", f32s(&[3, 2], &[1., 2., 3., 4., 5., 6.])),
    ];
    let out = run(model(vec![]), &feeds).unwrap();
    assert_eq!(out[0], f32s(&[2], &[9., 12.]));
    assert_eq!(out[1], f32s(&[3, 2], &[1., 2., 4., 6., 9., 12.]));
    // Reading X backwards (5+6 first) and writing Y along axis 1.
    let out = run(
        model(vec![
            ints_attr("scan_input_directions", &[1]),
            ints_attr("scan_output_axes", &[1]),
        ]),
        &feeds,
    )
    .unwrap();
    assert_eq!(out[0], f32s(&[2], &[9., 12.]));
    assert_eq!(out[1], f32s(&[2, 3], &[5., 8., 9., 6., 10., 12.]));
}

/// Scan 8: batch first, the scan axis 1, a sequence length per batch entry (scan outputs zero
/// past it), `directions` for the inputs.
#[test]
fn scan_8_runs_each_batch_entry_for_its_own_length() {
    let body = running_sum_body();
    let model = |extra: Vec<AttributeProto>| {
        let mut attrs = vec![g_attr("body", body.clone()), i_attr("num_scan_inputs", 1)];
        attrs.extend(extra);
        graph(
            "main",
            vec![node("Scan", &["L", "S0", "X"], &["S", "Y"], attrs)],
            vec![vi("L", dt::INT64), vi("S0", dt::FLOAT), vi("X", dt::FLOAT)],
            vec![vi("S", dt::FLOAT), vi("Y", dt::FLOAT)],
        )
    };
    let x = f32s(
        &[2, 3, 2],
        &[1., 2., 3., 4., 5., 6., 10., 20., 30., 40., 50., 60.],
    );
    let lens =
        |v: &[i64]| Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap());
    let feeds = [
        ("L", lens(&[3, 1])),
        ("S0", f32s(&[2, 2], &[0., 0., 100., 100.])),
        ("X", x),
    ];
    let out = run_at(model(vec![]), 8, &feeds).unwrap();
    assert_eq!(out[0], f32s(&[2, 2], &[9., 12., 110., 120.]));
    assert_eq!(
        out[1],
        f32s(
            &[2, 3, 2],
            &[1., 2., 4., 6., 9., 12., 110., 120., 0., 0., 0., 0.]
        )
    );
    // Backwards: entry 0 reads 5,6 first; entry 1 (length 1) reads only its first step.
    let out = run_at(model(vec![ints_attr("directions", &[1])]), 8, &feeds).unwrap();
    assert_eq!(out[0], f32s(&[2, 2], &[9., 12., 110., 120.]));
    assert_eq!(
        out[1],
        f32s(
            &[2, 3, 2],
            &[5., 6., 8., 10., 9., 12., 110., 120., 0., 0., 0., 0.]
        )
    );
    // An empty sequence_lens means every entry runs the whole axis.
    let mut all = feeds.clone();
    all[0].1 = lens(&[]);
    let out = run_at(model(vec![]), 8, &all).unwrap();
    assert_eq!(out[0], f32s(&[2, 2], &[9., 12., 190., 220.]));
    // A length past the scan axis, or a state without the batch, is refused by name.
    let mut bad = feeds.clone();
    bad[0].1 = lens(&[3, 4]);
    let err = run_at(model(vec![]), 8, &bad).unwrap_err().to_string();
    assert!(err.contains("sequence_lens holds 4"), "{err}");
    bad[0].1 = lens(&[0, 3]);
    let err = run_at(model(vec![]), 8, &bad).unwrap_err().to_string();
    assert!(
        err.contains("sequence_lens holds 0, outside 1..=3"),
        "{err}"
    );
    let mut bad = feeds.clone();
    bad[1].1 = f32s(&[2], &[0., 0.]);
    bad[2].1 = f32s(&[3, 2], &[1., 2., 3., 4., 5., 6.]);
    let err = run_at(model(vec![]), 8, &bad).unwrap_err().to_string();
    assert!(err.contains("opset 8 takes [batch, ...]"), "{err}");
    // The same model at opset 9 has three inputs for one state and one scan input: L is read
    // as a state, so the body's two formal inputs get three values.
    assert!(run_at(model(vec![]), 9, &feeds).is_err());
}
