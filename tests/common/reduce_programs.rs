//! Reduction test programs shared by the interpreter, NVRTC and GPU tests: load a tile of
//! `x` in a layout, reduce it along one dimension, store the result (and, for the softmax-like
//! program, subtract the row maximum from the tile, a thread-local broadcast).

use tilus_core::ir::{ElementOp, Expr, Operand, Program, ProgramBuilder, ReduceOp, ScanOp};
use tilus_core::layout::parse;
use tilus_core::DType;

/// One reduction case: `op` of a `shape` tile in `layout` along `dim`, over `blocks` blocks
/// (block `b` reads rows `b * shape[0]..`).
#[derive(Clone, Debug)]
pub struct ReduceCase {
    pub layout: &'static str,
    pub dim: usize,
    pub threads: u32,
}

/// Layouts that exercise every stage: locals only, lanes only, lanes and locals, lanes and
/// warps, warps only, column-major threads, replicas, a replicated operand, a digit of three.
pub const CASES: &[ReduceCase] = &[
    ReduceCase {
        layout: "spatial(32,4).local(1,8)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(128,1).local(1,16)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(4,32)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "local(2,1).spatial(2,64)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "column_spatial(32,4)",
        dim: 0,
        threads: 128,
    },
    ReduceCase {
        layout: "column_spatial(32,4).local(1,2)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(8,16).local(1,2)",
        dim: 0,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(32,4).local(4,1)",
        dim: 0,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(4,8)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "reduce(spatial(16,8),[0]).local(1,8)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(32,3)",
        dim: 1,
        threads: 96,
    },
];

pub const BLOCKS: i32 = 2;

/// The output dtype of `op` on `dtype` elements.
pub fn out_dtype(op: ReduceOp, dtype: DType) -> DType {
    if op == ReduceOp::ArgMax {
        DType::Int(32)
    } else {
        dtype
    }
}

/// The tile shape of a case.
pub fn shape(case: &ReduceCase) -> Vec<usize> {
    parse(case.layout).unwrap().shape().to_vec()
}

/// Elements of the input (all blocks) and of the output.
pub fn sizes(case: &ReduceCase) -> (usize, usize) {
    let s = shape(case);
    let n = BLOCKS as usize * s[0] * s[1];
    (n, n / s[case.dim])
}

/// `out = op(x, dim)` over `BLOCKS` blocks; `x` is `[BLOCKS * s0, s1]`, `out` is
/// `[BLOCKS * s0, 1]` (dim 1) or `[BLOCKS, s1]` (dim 0).
pub fn reduce_program(case: &ReduceCase, op: ReduceOp, dtype: DType) -> Program {
    let layout = parse(case.layout).unwrap();
    let s = layout.shape().to_vec();
    let od = out_dtype(op, dtype);
    let mut b = ProgramBuilder::new(&format!("reduce_{op:?}_{dtype}"), case.threads);
    let x = b.param_ptr("x", dtype, false);
    let out = b.param_ptr("out", od, true);
    b.grid(vec![BLOCKS.into()]);
    let bi = b.block_indices(&["bi"])[0];
    let rows = BLOCKS * s[0] as i32;
    let gx = b.view_global("gx", x, dtype, vec![rows.into(), (s[1] as i32).into()]);
    let (oshape, ooff): (Vec<Expr>, Vec<Expr>) = if case.dim == 1 {
        (
            vec![rows.into(), 1.into()],
            vec![Expr::from(bi) * s[0] as i32, 0.into()],
        )
    } else {
        (
            vec![BLOCKS.into(), (s[1] as i32).into()],
            vec![bi.into(), 0.into()],
        )
    };
    let go = b.view_global("go", out, od, oshape);
    let t = b.load_global(
        "t",
        gx,
        layout,
        vec![Expr::from(bi) * s[0] as i32, 0.into()],
    );
    let r = b.reduce("r", t, op, case.dim);
    b.store_global(r, go, ooff);
    b.finish()
}

/// `y = x - reduce_max(x, 1)` for an f32 tile in `layout` (one block).
pub fn sub_max_program(layout: &str, threads: u32) -> Program {
    let layout = parse(layout).unwrap();
    let s = layout.shape().to_vec();
    let mut b = ProgramBuilder::new("sub_row_max", threads);
    let x = b.param_ptr("x", DType::F32, false);
    let y = b.param_ptr("y", DType::F32, true);
    b.grid(vec![1.into()]);
    let dims: Vec<Expr> = s.iter().map(|&d| (d as i32).into()).collect();
    let gx = b.view_global("gx", x, DType::F32, dims.clone());
    let gy = b.view_global("gy", y, DType::F32, dims);
    let t = b.load_global("t", gx, layout, vec![0.into(), 0.into()]);
    let m = b.reduce("m", t, ReduceOp::Max, 1);
    let d = b.binary("d", ElementOp::Sub, t, Operand::Tensor(m));
    b.store_global(d, gy, vec![0.into(), 0.into()]);
    b.finish()
}

/// Layouts for `cumsum`: locals only, lanes only, lanes between locals, column-major lanes under
/// locals, replicas, and dimensions across warps (through shared memory): two warps along the
/// row, four, a digit of three warps, and a replicated layout across warps.
pub const SCAN_CASES: &[ReduceCase] = &[
    ReduceCase {
        layout: "spatial(128,1).local(1,16)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(4,32)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "local(1,2).spatial(4,8).local(1,4)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "local(2,1).column_spatial(8,4)",
        dim: 0,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(8,4).local(4,1)",
        dim: 0,
        threads: 128,
    },
    ReduceCase {
        layout: "local(2,1).spatial(2,64)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(1,128).local(1,2)",
        dim: 1,
        threads: 128,
    },
    ReduceCase {
        layout: "spatial(3,32)",
        dim: 0,
        threads: 96,
    },
    ReduceCase {
        layout: "local(1,2).spatial(2,64)",
        dim: 1,
        threads: 256,
    },
];

/// `y = cumsum(x, dim)` of one `[s0, s1]` tile.
pub fn scan_program(case: &ReduceCase, dtype: DType) -> Program {
    let layout = parse(case.layout).unwrap();
    let s = layout.shape().to_vec();
    let mut b = ProgramBuilder::new(&format!("cumsum_{dtype}"), case.threads);
    let x = b.param_ptr("x", dtype, false);
    let y = b.param_ptr("y", dtype, true);
    b.grid(vec![1.into()]);
    let dims: Vec<Expr> = s.iter().map(|&d| (d as i32).into()).collect();
    let gx = b.view_global("gx", x, dtype, dims.clone());
    let gy = b.view_global("gy", y, dtype, dims);
    let t = b.load_global("t", gx, layout, vec![0.into(), 0.into()]);
    let c = b.scan("c", t, ScanOp::Sum, case.dim);
    b.store_global(c, gy, vec![0.into(), 0.into()]);
    b.finish()
}
