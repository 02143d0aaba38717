//! Unit tests of strings.rs and of string inputs to Equal, Where and Cast: small cases checked
//! by hand.

use super::super::common::test_util::*;
use super::super::resolve;
use super::*;
use crate::ir::attr;
use crate::onnx::proto::{data_type as dt, AttributeProto};

fn run(
    op: &str,
    opset: i64,
    attrs: Vec<AttributeProto>,
    ins: &[&Tensor],
) -> Result<Vec<Tensor>, String> {
    let n = node(op, attrs);
    let k = resolve(&n, opset).map_err(|e| e.to_string())?.kernel();
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
    run_at(k, &n, opset, &ins)
}

fn run1(
    op: &str,
    opset: i64,
    attrs: Vec<AttributeProto>,
    ins: &[&Tensor],
) -> Result<Tensor, String> {
    run(op, opset, attrs, ins).map(|mut v| v.remove(0))
}

#[test]
fn string_concat_broadcasts_and_keeps_utf8() {
    let a = strs(&[3], &["cat", "", "的"]);
    let b = strs(&[1], &["s"]);
    assert_eq!(
        run1("StringConcat", 20, vec![], &[&a, &b]).unwrap(),
        strs(&[3], &["cats", "s", "的s"])
    );
    // [2, 1] with [2] -> [2, 2]
    let a = strs(&[2, 1], &["a", "b"]);
    let b = strs(&[2], &["x", "y"]);
    assert_eq!(
        run1("StringConcat", 20, vec![], &[&a, &b]).unwrap(),
        strs(&[2, 2], &["ax", "ay", "bx", "by"])
    );
    let e = run1("StringConcat", 20, vec![], &[&a, &f32s(&[1], &[1.0])]).unwrap_err();
    assert!(
        e.contains("StringConcat: input must be string, got float32"),
        "{e}"
    );
}

#[test]
fn equal_compares_strings_and_refuses_mixed_types() {
    let a = strs(&[3], &["a", "b", "c"]);
    let b = strs(&[1], &["b"]);
    assert_eq!(
        run1("Equal", 19, vec![], &[&a, &b]).unwrap(),
        bools(&[3], &[false, true, false])
    );
    let e = run1("Less", 13, vec![], &[&a, &b]).unwrap_err();
    assert!(
        e.contains("Less: element type string is not supported"),
        "{e}"
    );
    let e = run1("Equal", 19, vec![], &[&a, &i64s(&[1], &[1])]).unwrap_err();
    assert!(e.contains("input types differ: string and int64"), "{e}");
    // A numeric op given strings names itself and the type.
    let e = run1("Add", 14, vec![], &[&a, &a]).unwrap_err();
    assert!(e.contains("Add") && e.contains("string"), "{e}");
}

#[test]
fn where_selects_strings() {
    let c = bools(&[2], &[true, false]);
    let x = strs(&[2], &["x0", "x1"]);
    let y = strs(&[], &["y"]);
    assert_eq!(
        run1("Where", 16, vec![], &[&c, &x, &y]).unwrap(),
        strs(&[2], &["x0", "y"])
    );
}

fn cast(to: i32, x: &Tensor) -> Result<Tensor, String> {
    run1("Cast", 21, vec![attr::int("to", i64::from(to))], &[x])
}

#[test]
fn cast_numbers_to_strings_and_back() {
    // As numpy's astype(str): shortest digits, positional from 1e-4 up to 1e6 for float32.
    let f = f32s(
        &[8],
        &[
            0.1,
            -2.0,
            1e-5,
            65504.0,
            1e6,
            1.5e20,
            f32::INFINITY,
            f32::NAN,
        ],
    );
    assert_eq!(
        cast(dt::STRING, &f).unwrap(),
        strs(
            &[8],
            &["0.1", "-2.0", "1e-05", "65504.0", "1e+06", "1.5e+20", "inf", "nan"]
        )
    );
    let d = f64s(&[3], &[1e15, 1e16, -0.0]);
    assert_eq!(
        cast(dt::STRING, &d).unwrap(),
        strs(&[3], &["1000000000000000.0", "1e+16", "-0.0"])
    );
    let h = [std::f32::consts::PI, 65504.0].map(half::f16::from_f32);
    let h = Tensor::F16(ndarray::arr1(&h).into_dyn());
    assert_eq!(
        cast(dt::STRING, &h).unwrap(),
        strs(&[2], &["3.14", "6.55e+04"])
    );
    assert_eq!(
        cast(dt::STRING, &i64s(&[2], &[-7, i64::MAX])).unwrap(),
        strs(&[2], &["-7", "9223372036854775807"])
    );
    assert_eq!(
        cast(dt::STRING, &bools(&[2], &[true, false])).unwrap(),
        strs(&[2], &["True", "False"])
    );
    let s = strs(&[6], &["3.5", " 1e-5", "1E8", "+INF", "-inf", "nan"]);
    let back = cast(dt::FLOAT, &s).unwrap();
    let v = back.to_f64_vec();
    assert_eq!(
        &v[..5],
        &[3.5, 1e-5f32 as f64, 1e8, f64::INFINITY, f64::NEG_INFINITY]
    );
    assert!(v[5].is_nan());
    // Integers: exact for int64, floats truncated toward zero.
    assert_eq!(
        cast(dt::INT64, &strs(&[2], &["9007199254740993", "-3"])).unwrap(),
        i64s(&[2], &[9_007_199_254_740_993, -3])
    );
    assert_eq!(
        cast(dt::INT32, &strs(&[2], &["100.5", "-2.7"])).unwrap(),
        i32s(&[2], &[100, -2])
    );
    assert_eq!(
        cast(dt::BOOL, &strs(&[3], &["0", "2.5", "True"])).unwrap(),
        bools(&[3], &[false, true, true])
    );
    let e = cast(dt::FLOAT, &strs(&[1], &["Hello World!"])).unwrap_err();
    assert!(
        e.contains("Cast: string \"Hello World!\" is not a number"),
        "{e}"
    );
    // string to string is the identity.
    assert_eq!(cast(dt::STRING, &s).unwrap(), s);
}

#[test]
fn string_normalizer_drops_stopwords_and_changes_case() {
    let x = strs(&[1, 4], &["Monday", "tuesday", "monday", "Straße"]);
    let attrs = || {
        vec![
            attr::string("case_change_action", "UPPER"),
            attr::strings("stopwords", &["monday"]),
        ]
    };
    assert_eq!(
        run1("StringNormalizer", 10, attrs(), &[&x]).unwrap(),
        strs(&[1, 2], &["TUESDAY", "STRASSE"])
    );
    // Case-sensitive: only the exact "monday" goes.
    let mut a = attrs();
    a.push(attr::int("is_case_sensitive", 1));
    assert_eq!(
        run1("StringNormalizer", 10, a, &[&x]).unwrap(),
        strs(&[1, 3], &["MONDAY", "TUESDAY", "STRASSE"])
    );
    // Everything dropped: one empty string.
    let all = strs(&[2], &["monday", "MONDAY"]);
    assert_eq!(
        run1("StringNormalizer", 10, attrs(), &[&all]).unwrap(),
        strs(&[1], &[""])
    );
    let e = run1(
        "StringNormalizer",
        10,
        attrs(),
        &[&strs(&[2, 2], &["a"; 4])],
    )
    .unwrap_err();
    assert!(e.contains("must be [C] or [1, C]"), "{e}");
    let e = run1(
        "StringNormalizer",
        10,
        vec![attr::string("locale", "tr_TR")],
        &[&x],
    )
    .unwrap_err();
    assert!(e.contains("'locale' \"tr_TR\" is not supported"), "{e}");
}

#[test]
fn string_split_follows_python_split() {
    let x = strs(&[3], &["a.b..c", "", "x"]);
    let out = run(
        "StringSplit",
        20,
        vec![attr::string("delimiter", ".")],
        &[&x],
    )
    .unwrap();
    assert_eq!(
        out[0],
        strs(
            &[3, 4],
            &["a", "b", "", "c", "", "", "", "", "x", "", "", ""]
        )
    );
    assert_eq!(out[1], i64s(&[3], &[4, 1, 1]));
    // No delimiter: runs of whitespace; maxsplit keeps the rest whole.
    let x = strs(&[2], &["  the quick  brown fox ", ""]);
    let out = run("StringSplit", 20, vec![attr::int("maxsplit", 2)], &[&x]).unwrap();
    assert_eq!(
        out[0],
        strs(&[2, 3], &["the", "quick", "brown fox ", "", "", ""])
    );
    assert_eq!(out[1], i64s(&[2], &[3, 0]));
    // An empty input: [0, 0] and [0].
    let out = run("StringSplit", 20, vec![], &[&strs(&[0], &[])]).unwrap();
    assert_eq!(out[0], strs(&[0, 0], &[]));
    assert_eq!(out[1], i64s(&[0], &[]));
}
