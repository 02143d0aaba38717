//! GatherND on WebGPU against the reference backend.

use super::*;

/// GatherND at batch_dims 0 (whole-row and element tuples, negative indices) and 1: one
/// dispatch each, values copied exactly.
pub fn gather_nd_is_one_dispatch(gpu: &Gpu) {
    for (data, idx_shape, idx, batch_dims) in [
        (vec![4, 3, 5], vec![2, 2, 1], vec![0i64, 3, -1, 2], 0),
        (vec![4, 3, 5], vec![3, 2], vec![1, 2, -4, 0, 3, -1], 0),
        (vec![4, 3, 5], vec![2, 3], vec![0, 1, 2, 3, 2, 4], 0),
        (vec![3, 4, 5], vec![3, 2, 1], vec![0, 3, -1, 1, 2, 2], 1),
        (vec![2, 7, 6], vec![2, 1], vec![6, -7], 1),
    ] {
        let mut b = GraphBuilder::new("g", 17);
        let x = f32_in(&mut b, "x", &data);
        let i = b.input(
            "i",
            DType::I64,
            dims(&idx_shape.iter().map(|&d| d as i64).collect::<Vec<_>>()),
        );
        let y = b.op(
            "GatherND",
            &[x, i],
            vec![attr::int("batch_dims", batch_dims)],
        );
        b.output(y, "y");
        let d = check(
            gpu,
            &b.build(),
            &[
                ("x", seeded_f32(&data, 41)),
                ("i", i64_tensor(&idx_shape, idx)),
            ],
            0.0,
        );
        assert_eq!(d, 1, "{data:?} {idx_shape:?} batch_dims {batch_dims}");
    }
}
