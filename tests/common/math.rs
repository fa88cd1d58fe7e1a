//! Programs of the elementwise math, bit, comparison, `select`, `arange` and fill-load
//! instructions, shared by the NVRTC compile checks (`codegen_cuda.rs`) and the GPU-vs-
//! interpreter cases (`gpu_codegen.rs`).

use tilus::core::ir::{CmpOp, ElementOp, Expr, MathOp, Operand, Program, ProgramBuilder};
use tilus::core::layout::parse;
use tilus::DType;

/// Rows of the `[m, 64]` tensors below (not a multiple of the 16-row tile: the last tile is
/// masked).
pub const M: i32 = 40;

fn l(s: &str) -> tilus::Layout {
    parse(s).unwrap()
}

/// `out = op(x)` over `x[m, 64]` of `dtype`, in 16-row tiles.
pub fn unary_program(op: MathOp, dtype: DType) -> Program {
    let mut b = ProgramBuilder::new(&format!("unary_{}_{dtype}", op.name()), 128);
    let m = b.param_i32("m");
    let x = b.param_ptr("x", dtype, false);
    let out = b.param_ptr("out", dtype, true);
    b.grid(vec![Expr::cdiv(m, 16)]);
    let bi = b.block_indices(&["bi"])[0];
    let gx = b.view_global("gx", x, dtype, vec![m.into(), 64.into()]);
    let go = b.view_global("go", out, dtype, vec![m.into(), 64.into()]);
    let tile = l("spatial(16,8).local(1,8)");
    let off = vec![Expr::from(bi) * 16, 0.into()];
    let rx = b.load_global("rx", gx, tile, off.clone());
    let y = b.unary("y", op, rx);
    b.store_global(y, go, off);
    b.finish()
}

/// Bit operations of integer tensors `x`, `y` (`[m, 64]`): `and`, `or`, `xor`, shifts by a
/// tensor amount (`y & (bits - 1)`, always in range for power-of-two widths) and by
/// immediates, `not` and `popc`; two outputs.
pub fn bits_program(dtype: DType) -> Program {
    let bits = dtype.bits();
    let mut b = ProgramBuilder::new(&format!("bits_{dtype}"), 128);
    let m = b.param_i32("m");
    let x = b.param_ptr("x", dtype, false);
    let y = b.param_ptr("y", dtype, false);
    let out = b.param_ptr("out", dtype, true);
    let out2 = b.param_ptr("out2", dtype, true);
    b.grid(vec![Expr::cdiv(m, 16)]);
    let bi = b.block_indices(&["bi"])[0];
    let shape = vec![Expr::from(m), 64.into()];
    let gx = b.view_global("gx", x, dtype, shape.clone());
    let gy = b.view_global("gy", y, dtype, shape.clone());
    let go = b.view_global("go", out, dtype, shape.clone());
    let go2 = b.view_global("go2", out2, dtype, shape);
    let tile = l("spatial(16,8).local(1,8)");
    let off = vec![Expr::from(bi) * 16, 0.into()];
    let rx = b.load_global("rx", gx, tile.clone(), off.clone());
    let ry = b.load_global("ry", gy, tile, off.clone());
    let amount = b.binary(
        "amount",
        ElementOp::And,
        ry,
        Operand::Imm((bits - 1) as f64),
    );
    let s = b.binary("s", ElementOp::Shl, rx, Operand::Tensor(amount));
    let r = b.binary("r", ElementOp::Shr, ry, Operand::Tensor(amount));
    let a = b.binary("a", ElementOp::Xor, s, Operand::Tensor(r));
    let a = b.binary("a2", ElementOp::Or, a, Operand::Imm(1.0));
    let a = b.binary("a3", ElementOp::And, a, Operand::Tensor(rx));
    let a = b.binary("a4", ElementOp::Shr, a, Operand::Imm(1.0));
    let n = b.unary("n", MathOp::Not, a);
    b.store_global(n, go, off.clone());
    let p = b.unary("p", MathOp::Popc, ry);
    let p = b.binary("p2", ElementOp::Shl, p, Operand::Imm(1.0));
    b.store_global(p, go2, off);
    b.finish()
}

/// `mask = x < y` (`y` a broadcast row), stored as `u1`; `sel = select(mask, x, y)`, and
/// `select(x >= 0, x, scalar)` with an i32 scalar.
pub fn compare_select_program(dtype: DType, op: CmpOp) -> Program {
    let mut b = ProgramBuilder::new(&format!("compare_{}_{dtype}", op.name()), 128);
    let m = b.param_i32("m");
    let x = b.param_ptr("x", dtype, false);
    let y = b.param_ptr("y", dtype, false);
    let pmask = b.param_ptr("mask", DType::UInt(1), true);
    let out = b.param_ptr("out", dtype, true);
    b.grid(vec![Expr::cdiv(m, 16)]);
    let bi = b.block_indices(&["bi"])[0];
    let gx = b.view_global("gx", x, dtype, vec![m.into(), 64.into()]);
    let gy = b.view_global("gy", y, dtype, vec![1.into(), 64.into()]);
    let gm = b.view_global("gm", pmask, DType::UInt(1), vec![m.into(), 64.into()]);
    let go = b.view_global("go", out, dtype, vec![m.into(), 64.into()]);
    let tile = l("spatial(16,8).local(1,8)");
    let off = vec![Expr::from(bi) * 16, 0.into()];
    let rx = b.load_global("rx", gx, tile, off.clone());
    let ry = b.load_global(
        "ry",
        gy,
        l("reduce(spatial(16,8),[0]).local(1,8)"),
        vec![0.into(), 0.into()],
    );
    let mask = b.compare("mask", op, rx, Operand::Tensor(ry));
    b.store_global(mask, gm, off.clone());
    let sel = b.select("sel", mask, rx, Operand::Tensor(ry));
    let pos = b.compare("pos", CmpOp::Ge, sel, Operand::Scalar(Expr::from(m) - m));
    let sel = b.select("sel2", pos, sel, Operand::Scalar(Expr::from(m) - m - 3));
    b.store_global(sel, go, off);
    b.finish()
}

/// A masked row kernel for ragged tails: rows of `x[m, n]` (f32, `n` at run time, not a
/// multiple of the 64-column tile) loaded with fill `-inf`; `idx = arange(.., 1, bj * 64)`,
/// `keep = idx < n`, `out = select(keep, exp(x - 1), 0)`; the row maximum of the filled tile is
/// not needed, the fill itself is stored to `fill_out` (the whole tile, masked by its view).
pub fn masked_row_program() -> Program {
    let mut b = ProgramBuilder::new("masked_row", 128);
    let m = b.param_i32("m");
    let n = b.param_i32("n");
    let x = b.param_ptr("x", DType::F32, false);
    let out = b.param_ptr("out", DType::F32, true);
    let fill_out = b.param_ptr("fill_out", DType::F32, true);
    b.grid(vec![Expr::cdiv(m, 16), Expr::cdiv(n, 64)]);
    let ix = b.block_indices(&["bi", "bj"]);
    let gx = b.view_global("gx", x, DType::F32, vec![m.into(), n.into()]);
    let go = b.view_global("go", out, DType::F32, vec![m.into(), n.into()]);
    // The tile padded: row stride n + 64 would be a different view; the fill buffer is the
    // tile grid's full extent so the filled elements are visible.
    let gf = b.view_global(
        "gf",
        fill_out,
        DType::F32,
        vec![Expr::cdiv(m, 16) * 16, Expr::cdiv(n, 64) * 64],
    );
    let tile = l("spatial(16,8).local(1,8)");
    let off = vec![Expr::from(ix[0]) * 16, Expr::from(ix[1]) * 64];
    let rx = b.load_global_fill("rx", gx, tile.clone(), off.clone(), f64::NEG_INFINITY);
    b.store_global(rx, gf, off.clone());
    let idx = b.arange("idx", tile, 1, Expr::from(ix[1]) * 64);
    let keep = b.compare("keep", CmpOp::Lt, idx, Operand::Scalar(n.into()));
    let shifted = b.binary("shifted", ElementOp::Sub, rx, Operand::Imm(1.0));
    let e = b.unary("e", MathOp::Exp, shifted);
    let y = b.select("y", keep, e, Operand::Imm(0.0));
    b.store_global(y, go, off);
    b.finish()
}
