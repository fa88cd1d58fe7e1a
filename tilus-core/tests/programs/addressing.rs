//! Programs of the data-dependent addressing instructions (`item`, `gather`, `scatter`,
//! atomics), shared by `tilus-core/tests/addressing.rs` (interpreter), the workspace's
//! `tests/codegen_cuda.rs` (NVRTC) and `tests/gpu_codegen.rs` (GPU vs interpreter).
//!
//! Every program works in tiles of [`TILE`] elements held by 128 threads.

use tilus_core::ir::{AtomicOp, Expr, Operand, Program, ProgramBuilder};
use tilus_core::layout::{parse, Layout, SharedLayout, Swizzle};
use tilus_core::DType;

/// Elements per tile.
pub const TILE: i32 = 256;

fn l(s: &str) -> Layout {
    parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The 1-D tile layout: 128 threads, 2 locals each, no replicas.
pub fn tile() -> Layout {
    l("local(2).spatial(128)")
}

/// Rows x columns of the shared gather table.
pub const SH_ROWS: usize = 16;
pub const SH_COLS: usize = 64;

/// `out[i] = table.flat[idx[i]]` for `i < m` (0 for indices outside the table of `n`
/// elements); with `shared`, the table (`SH_ROWS x SH_COLS` elements, swizzled) is first
/// copied into shared memory and gathered from there.
pub fn gather_program(dtype: DType, shared: bool) -> Program {
    let mut b = ProgramBuilder::new("gather", 128);
    let n = b.param_i32("n");
    let m = b.param_i32("m");
    let table = b.param_ptr("table", dtype, false);
    let idx = b.param_ptr("idx", DType::Int(32), false);
    let out = b.param_ptr("out", dtype, true);
    b.grid(vec![Expr::cdiv(m, TILE)]);
    let bi = b.block_indices(&["bi"])[0];
    let off = vec![Expr::from(bi) * TILE];
    let gi = b.view_global("gi", idx, DType::Int(32), vec![m.into()]);
    let go = b.view_global("go", out, dtype, vec![m.into()]);
    let ix = b.load_global("ix", gi, tile(), off.clone());
    let src = if shared {
        let shape = [SH_ROWS, SH_COLS];
        let gt = b.view_global(
            "gt",
            table,
            dtype,
            vec![(SH_ROWS as i32).into(), (SH_COLS as i32).into()],
        );
        let layout = SharedLayout::row_major(&shape).with_swizzle(Swizzle::new(2, 3, 3).unwrap());
        let s = b.allocate_shared("st", dtype, layout);
        let t = b.load_global(
            "t",
            gt,
            l("spatial(16, 8).local(1, 8)"),
            vec![0.into(), 0.into()],
        );
        b.store_shared(t, s, vec![0.into(), 0.into()]);
        b.synchronize();
        s
    } else {
        b.view_global("gt", table, dtype, vec![n.into()])
    };
    let g = b.gather("g", src, ix);
    b.store_global(g, go, off);
    b.finish()
}

/// `out.flat[idx[i]] = x[i]` for `i < m`, through a tile layout with `replicas` copies of each
/// element (block threads `t` and `t + 128 / replicas`...). With `shared`, one block scatters
/// a tile into a shared tensor of `TILE` elements (a permutation fills it), which is then
/// copied to `out`.
pub fn scatter_program(dtype: DType, shared: bool, replicated: bool) -> Program {
    let mut b = ProgramBuilder::new("scatter", 128);
    let n = b.param_i32("n");
    let m = b.param_i32("m");
    let x = b.param_ptr("x", dtype, false);
    let idx = b.param_ptr("idx", DType::Int(32), false);
    let out = b.param_ptr("out", dtype, true);
    b.grid(vec![Expr::cdiv(m, TILE)]);
    let bi = b.block_indices(&["bi"])[0];
    let off = vec![Expr::from(bi) * TILE];
    // Replicated: 64 layout threads, each element held by two block threads.
    let layout = if replicated {
        l("local(4).spatial(64)")
    } else {
        tile()
    };
    let gi = b.view_global("gi", idx, DType::Int(32), vec![m.into()]);
    let gx = b.view_global("gx", x, dtype, vec![m.into()]);
    let go = b.view_global("go", out, dtype, vec![n.into()]);
    let ix = b.load_global("ix", gi, layout.clone(), off.clone());
    let v = b.load_global("v", gx, layout.clone(), off);
    if shared {
        let s = b.allocate_shared("s", dtype, SharedLayout::row_major(&[TILE as usize]));
        b.scatter(v, s, ix);
        b.synchronize();
        let r = b.load_shared("r", s, tile(), vec![0.into()]);
        b.store_global(r, go, vec![0.into()]);
    } else {
        b.scatter(v, go, ix);
    }
    b.finish()
}

/// `dst.flat[idx[i]] op= val[i]` for `i < m` (`m` a multiple of `TILE`), with `cmp[i]` for
/// compare-and-swap and the old values stored to `old[i]` when `with_old`. Global: one block
/// per tile, updating `dst` (`bins` elements) directly. Shared: one block copies `dst` (`TILE`
/// elements) into shared memory, applies every tile in a loop, and copies it back.
pub fn atomic_program(op: AtomicOp, dtype: DType, shared: bool, with_old: bool) -> Program {
    let mut b = ProgramBuilder::new("atomic", 128);
    let bins = b.param_i32("bins");
    let m = b.param_i32("m");
    let idx = b.param_ptr("idx", DType::Int(32), false);
    let val = b.param_ptr("val", dtype, false);
    let cmp = (op == AtomicOp::Cas).then(|| b.param_ptr("cmp", dtype, false));
    let dst = b.param_ptr("dst", dtype, true);
    let old = with_old.then(|| b.param_ptr("old", dtype, true));
    let gi = b.view_global("gi", idx, DType::Int(32), vec![m.into()]);
    let gv = b.view_global("gv", val, dtype, vec![m.into()]);
    let gc = cmp.map(|c| b.view_global("gc", c, dtype, vec![m.into()]));
    let gd = b.view_global("gd", dst, dtype, vec![bins.into()]);
    let go = old.map(|o| b.view_global("go", o, dtype, vec![m.into()]));
    let step = |b: &mut ProgramBuilder, target, base: Expr| {
        let off = vec![base];
        let ix = b.load_global("ix", gi, tile(), off.clone());
        let v = b.load_global("v", gv, tile(), off.clone());
        let c = gc.map(|gc| b.load_global("c", gc, tile(), off.clone()));
        let dest = go.map(|_| "o".into());
        let o = b.atomic(op, target, ix, v, c, dest);
        if let (Some(o), Some(go)) = (o, go) {
            b.store_global(o, go, off);
        }
    };
    if shared {
        b.grid(vec![Expr::Int(1)]);
        let s = b.allocate_shared("s", dtype, SharedLayout::row_major(&[TILE as usize]));
        let init = b.load_global("init", gd, tile(), vec![0.into()]);
        b.store_shared(init, s, vec![0.into()]);
        b.synchronize();
        b.for_range("c", 0.into(), Expr::cdiv(m, TILE), |b, c| {
            step(b, s, Expr::from(c) * TILE)
        });
        b.synchronize();
        let r = b.load_shared("r", s, tile(), vec![0.into()]);
        b.store_global(r, gd, vec![0.into()]);
    } else {
        b.grid(vec![Expr::cdiv(m, TILE)]);
        let bi = b.block_indices(&["bi"])[0];
        step(&mut b, gd, Expr::from(bi) * TILE);
    }
    b.finish()
}

/// A paged lookup: block `bi` reads its page number `p = item(table[bi])` and a scale
/// `s = item(scales[bi])`, then copies page `p` of `pages` (`PAGE` f32 values each), scaled by
/// `s`, to row `bi` of `out`.
pub const PAGE: i32 = 256;

pub fn paged_program() -> Program {
    let mut b = ProgramBuilder::new("paged", 128);
    let blocks = b.param_i32("blocks");
    let npages = b.param_i32("npages");
    let table = b.param_ptr("table", DType::Int(32), false);
    let scales = b.param_ptr("scales", DType::F16, false);
    let pages = b.param_ptr("pages", DType::F32, false);
    let out = b.param_ptr("out", DType::F32, true);
    b.grid(vec![blocks.into()]);
    let bi = b.block_indices(&["bi"])[0];
    let gt = b.view_global("gt", table, DType::Int(32), vec![blocks.into()]);
    let gs = b.view_global("gs", scales, DType::F16, vec![blocks.into()]);
    let gp = b.view_global("gp", pages, DType::F32, vec![npages.into(), PAGE.into()]);
    let go = b.view_global("go", out, DType::F32, vec![blocks.into(), PAGE.into()]);
    let one = l("local(1)");
    let t = b.load_global("t", gt, one.clone(), vec![bi.into()]);
    let p = b.item("p", t);
    let sc = b.load_global("sc", gs, one, vec![bi.into()]);
    let s = b.item("s", sc);
    let row = l("local(1, 2).spatial(1, 128)");
    let r = b.load_global("r", gp, row, vec![p.into(), 0.into()]);
    let y = b.binary(
        "y",
        tilus_core::ir::ElementOp::Mul,
        r,
        Operand::Scalar(Expr::Var(s)),
    );
    b.store_global(y, go, vec![bi.into(), 0.into()]);
    b.finish()
}
