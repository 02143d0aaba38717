//! A zero Pad of a Conv's spatial axes moved into the Conv's pads: op counts, parity, and what
//! must not fold.

mod common;

use common::{counts, fuse, ops, parity, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model};
use fuselab::onnx::proto::AttributeProto;
use fuselab::{DType, Tensor};

const RULES: &[&str] = &["pad_conv"];

fn i64s(v: &[i64]) -> Tensor {
    Tensor::I64(ndarray::Array1::from(v.to_vec()).into_dyn())
}

/// x [batch, 3, 6, 7] → Pad(`pads`, `mode`, value `value`) → Conv(4 filters 3x3, `conv_attrs`).
fn model(
    pads: &[i64],
    mode: &str,
    value: f32,
    conv_attrs: Vec<AttributeProto>,
    opset: i64,
) -> Model {
    let mut b = GraphBuilder::new("pad_conv", opset);
    let x = b.input(
        "x",
        DType::F32,
        vec![sym("batch"), Dim::Known(3), Dim::Known(6), Dim::Known(7)],
    );
    let p = if opset >= 11 {
        let pv = b.initializer("pads", &i64s(pads));
        let cv = b.initializer("value", &Tensor::F32(ndarray::arr0(value).into_dyn()));
        b.op("Pad", &[x, pv, cv], vec![attr::string("mode", mode)])
    } else {
        b.op(
            "Pad",
            &[x],
            vec![
                attr::ints("pads", pads),
                attr::string("mode", mode),
                attr::float("value", value),
            ],
        )
    };
    let w = b.initializer("w", &seeded_f32(&[4, 3, 3, 3], 1));
    let y = b.op("Conv", &[p, w], conv_attrs);
    b.output(y, "y");
    b.build()
}

#[test]
fn zero_pad_moves_into_the_conv() {
    for opset in [17, 10] {
        let m = model(
            &[0, 0, 1, 2, 0, 0, 2, 1],
            "constant",
            0.0,
            vec![attr::ints("pads", &[1, 0, 0, 1])],
            opset,
        );
        let (opt, _) = fuse(&m, RULES);
        assert_eq!(ops(&opt), counts(&[("Conv", 1)]), "opset {opset}");
        let n = opt.graph.node(opt.graph.node_ids().next().unwrap());
        assert_eq!(
            n.attr_ints("pads"),
            Some(&[2, 2, 2, 2][..]),
            "opset {opset}"
        );
        for batch in [2, 1] {
            let p = parity(&m, &opt, &[("batch", batch)]);
            assert!(
                p.max_abs_diff == 0.0,
                "opset {opset} batch {batch}: {}",
                p.max_abs_diff
            );
        }
    }
}

#[test]
fn what_must_not_fold() {
    let reject = |m: Model, needle: &str| common::assert_rejected(&m, RULES, needle);
    let spatial = [0, 0, 1, 1, 0, 0, 1, 1];
    // A Conv reads its own padding as 0: another value, or reflect/edge padding, is not that.
    reject(model(&spatial, "constant", 1.5, vec![], 17), "not 0");
    reject(
        model(&spatial, "reflect", 0.0, vec![], 17),
        "not in constant mode",
    );
    // Padding the channels changes C; a negative pad crops.
    reject(
        model(&[0, 1, 1, 1, 0, 0, 1, 1], "constant", 0.0, vec![], 17),
        "touch the batch or channel",
    );
    reject(
        model(&[0, 0, -1, 1, 0, 0, 1, 1], "constant", 0.0, vec![], 17),
        "crop",
    );
    // auto_pad computes the Conv's pads from the padded size; they cannot be summed.
    reject(
        model(
            &spatial,
            "constant",
            0.0,
            vec![attr::string("auto_pad", "SAME_UPPER")],
            17,
        ),
        "auto_pad is set",
    );
}
