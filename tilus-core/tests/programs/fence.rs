//! The `fence` idiom: a split reduction in which the last block of each tile to arrive sums
//! the partial results of the others, in one launch. Shared by `tilus-core/tests/fence.rs`
//! (interpreter, every arrival order), the workspace's `tests/codegen_cuda.rs` (NVRTC) and
//! `tests/gpu_codegen.rs` (GPU vs interpreter).

use tilus_core::ir::{AtomicOp, BinaryOp, CmpOp, ElementOp, Expr, Operand, Program};
use tilus_core::ir::{ProgramBuilder, ReduceOp};
use tilus_core::layout::{parse, Layout};
use tilus_core::DType;

/// f32 elements per tile.
pub const TILE: i32 = 256;

fn l(s: &str) -> Layout {
    parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// How the last block is recognised: correctly, or (a bug the tests must catch) the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reducer {
    Last,
    First,
}

/// `out[t * TILE + e] = sum over s in 0..SPLIT of 2 x[s, t * TILE + e]`, added in split order
/// in f32, for `tiles` tiles. Grid `[tiles, SPLIT]`: block `(t, s)` writes its partial
/// `2 x[s, tile t]` to `ws[s, tile t]`, then `sync`, `fence`, and one thread adds 1 to
/// `counters[t]` (every other thread's index is out of range, so the update happens once per
/// block); `fence` again, and the old count becomes uniform through `sum(old, 0).item()`. The
/// block that saw `SPLIT - 1` sums the partials and resets `counters[t]` to 0, so the next
/// launch needs no memset. Parameters: `tiles`, `x` (f32 `[SPLIT, tiles * TILE]`), `ws`
/// (mutable f32, same shape), `counters` (mutable i32 `[tiles]`), `out` (mutable f32
/// `[tiles * TILE]`).
pub fn last_block_reduce_program(split: i32, reducer: Reducer) -> Program {
    let mut b = ProgramBuilder::new("last_block_reduce", 128);
    let tiles = b.param_i32("tiles");
    let x = b.param_ptr("x", DType::F32, false);
    let ws = b.param_ptr("ws", DType::F32, true);
    let counters = b.param_ptr("counters", DType::Int(32), true);
    let out = b.param_ptr("out", DType::F32, true);
    b.grid(vec![tiles.into(), split.into()]);
    let ix = b.block_indices(&["t", "s"]);
    let (t, s) = (ix[0], ix[1]);
    let cols = Expr::from(tiles) * TILE;
    let gx = b.view_global("gx", x, DType::F32, vec![split.into(), cols.clone()]);
    let gw = b.view_global("gw", ws, DType::F32, vec![split.into(), cols.clone()]);
    let gc = b.view_global("gc", counters, DType::Int(32), vec![tiles.into()]);
    let go = b.view_global("go", out, DType::F32, vec![cols]);
    let tile = l("local(2).spatial(128)");
    let at = Expr::from(t) * TILE;
    let v = b.load_global("v", gx, tile.clone(), vec![s.into(), at.clone()]);
    let p = b.binary("p", ElementOp::Mul, v, Operand::Imm(2.0));
    b.store_global(p, gw, vec![s.into(), at.clone()]);
    // Release: every thread's partial, then the count.
    b.synchronize();
    b.fence();
    let lanes = l("spatial(128)");
    let lane = b.arange("lane", lanes.clone(), 0, 0);
    let first = b.compare("first", CmpOp::Eq, lane, Operand::Scalar(0.into()));
    let tile_index = b.arange("tile_index", lanes.clone(), 0, t);
    let index = b.select("index", first, tile_index, Operand::Imm(-1.0));
    let ones = b.allocate_register("ones", DType::Int(32), lanes, Some(1.0));
    let old = b
        .atomic(AtomicOp::Add, gc, index, ones, None, Some("old".into()))
        .expect("bound");
    // Acquire: before the barrier of the reduction that hands the count to every thread.
    b.fence();
    let count = b.reduce("count", old, ReduceOp::Sum, 0);
    let arrived = b.item("arrived", count);
    let want = match reducer {
        Reducer::Last => split - 1,
        Reducer::First => 0,
    };
    let last = Expr::binary(BinaryOp::Eq, arrived, want);
    b.if_else(
        last,
        |b| {
            let acc = b.load_global("acc", gw, tile.clone(), vec![0.into(), at.clone()]);
            b.for_range("r", 1.into(), split.into(), |b, r| {
                let part = b.load_global("part", gw, tile.clone(), vec![r.into(), at.clone()]);
                b.binary(acc, ElementOp::Add, acc, Operand::Tensor(part));
            });
            b.store_global(acc, go, vec![at.clone()]);
            let zero = b.allocate_register("zero", DType::Int(32), l("local(1)"), Some(0.0));
            b.store_global(zero, gc, vec![t.into()]);
        },
        |_| {},
    );
    b.finish()
}
