//! Programs of the data-dependent addressing instructions (`item`, `gather`, `gather_rows`,
//! `scatter`, `scatter_rows`, atomics), shared by `tilus-core/tests/addressing.rs` (interpreter), the workspace's
//! `tests/codegen_cuda.rs` (NVRTC) and `tests/gpu_codegen.rs` (GPU vs interpreter).
//!
//! Every program works in tiles of [`TILE`] elements held by 128 threads.

use tilus_core::ir::{
    gather_rows_layout, AtomicOp, ElementOp, Expr, Operand, Program, ProgramBuilder,
};
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

/// Where [`gather_rows_program`] reads its `[rows, w]` table from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowSrc {
    /// The kernel argument itself (`rows` a run-time extent).
    Global,
    /// A row-major shared copy of the first [`SH_TABLE_ROWS`] rows.
    Shared,
    /// The same, swizzled (rows are not contiguous: read per element).
    Swizzled,
    /// The second half of a `[2, rows, w]` allocation (a constant origin, still compact).
    Slice,
    /// Columns `w..2w` of a `[rows, 2w]` allocation (not compact: read per element).
    Wide,
}

impl RowSrc {
    pub const ALL: [RowSrc; 5] = [
        RowSrc::Global,
        RowSrc::Shared,
        RowSrc::Swizzled,
        RowSrc::Slice,
        RowSrc::Wide,
    ];
}

/// Index layouts of 128 threads for [`gather_rows_program`], with the dims to widen: plain;
/// replicated (64 layout threads, each element on 2 block threads); an explicit replication
/// digit inside; rank 1; rank 3; the column-spatial form of the VQ kernels' B fragments.
pub const ROW_INDEX_LAYOUTS: &[(&str, &[usize])] = &[
    ("spatial(32, 4).local(2, 1)", &[0, 1]),
    ("local(2, 2).spatial(8, 8)", &[0, 1]),
    (
        "spatial(4, 1).replicated(2).spatial(4, 4).local(1, 2)",
        &[0, 1],
    ),
    ("local(2).spatial(128)", &[0]),
    ("spatial(2, 8, 8).local(1, 2, 1)", &[0, 1, 2]),
    ("spatial(1, 4).local(2, 2).column_spatial(4, 8)", &[0, 1]),
];

/// The result of `gather_rows` on host data: `out[.., i * w + c, ..] = table[idx[.., i, ..],
/// c]` (0 for an index outside `[0, rows)`), row-major over `shape` (the index's) with
/// dimension `dim` times `w`.
pub fn gather_rows_reference(
    table: &[u32],
    w: usize,
    idx: &[i32],
    shape: &[usize],
    dim: usize,
) -> Vec<u32> {
    let rows = (table.len() / w) as i64;
    let mut out_shape = shape.to_vec();
    out_shape[dim] *= w;
    let total: usize = out_shape.iter().product();
    (0..total)
        .map(|o| {
            // Unravel `o` over `out_shape`, and ravel the index position over `shape`.
            let (mut rest, mut flat, mut scale, mut c) = (o, 0, 1, 0);
            for d in (0..shape.len()).rev() {
                let mut x = rest % out_shape[d];
                rest /= out_shape[d];
                if d == dim {
                    c = x % w;
                    x /= w;
                }
                flat += x * scale;
                scale *= shape[d];
            }
            let r = idx[flat] as i64;
            if (0..rows).contains(&r) {
                table[r as usize * w + c]
            } else {
                0
            }
        })
        .collect()
}

/// Rows of the shared tables of [`gather_rows_program`] (the kernel argument must hold them).
pub const SH_TABLE_ROWS: usize = 256;

/// Blocks of [`gather_rows_program`]: block `b` handles index tile `b` along dimension 0.
pub const ROW_BLOCKS: usize = 2;

/// `out = gather_rows(table, idx, dim)` with `table` a `[rows, w]` tensor of `dtype` (see
/// [`RowSrc`]) and `idx` tiles of `layout` (128 threads): block `b` gathers index tile `b`
/// (the tiles are stacked along dimension 0 of `idx`, of shape `[ROW_BLOCKS * s0, s1, ..]`)
/// into tile `b` of `out` (its shape with dimension `dim` times `w`, stacked the same way).
/// Parameters: `rows`, `table`, `idx`, `out`.
pub fn gather_rows_program(
    dtype: DType,
    w: usize,
    layout: &str,
    dim: usize,
    src: RowSrc,
) -> Program {
    let lay = l(layout);
    let shape = lay.shape().to_vec();
    let mut out_shape = shape.clone();
    out_shape[dim] *= w;
    let stacked = |s: &[usize]| -> Vec<Expr> {
        s.iter()
            .enumerate()
            .map(|(d, &n)| Expr::Int((if d == 0 { ROW_BLOCKS * n } else { n }) as i32))
            .collect()
    };
    let mut b = ProgramBuilder::new("gather_rows", 128);
    let rows = b.param_i32("rows");
    let table = b.param_ptr("table", dtype, false);
    let idx = b.param_ptr("idx", DType::Int(32), false);
    let out = b.param_ptr("out", dtype, true);
    b.grid(vec![Expr::Int(ROW_BLOCKS as i32)]);
    let bi = b.block_indices(&["bi"])[0];
    let at = |n: usize| {
        let mut v = vec![Expr::from(bi) * n as i32];
        v.resize(shape.len(), Expr::Int(0));
        v
    };
    let wi = w as i32;
    let gt = b.view_global("gt", table, dtype, vec![rows.into(), wi.into()]);
    let gi = b.view_global("gi", idx, DType::Int(32), stacked(&shape));
    let go = b.view_global("go", out, dtype, stacked(&out_shape));
    let ix = b.load_global("ix", gi, lay, at(shape[0]));
    let n = SH_TABLE_ROWS;
    let table = if src == RowSrc::Global {
        gt
    } else {
        let copy = l(&format!("spatial(128, 1).local({}, {w})", n / 128));
        let t = b.load_global("t", gt, copy, vec![0.into(), 0.into()]);
        let st = match src {
            RowSrc::Shared | RowSrc::Swizzled => {
                let mut layout = SharedLayout::row_major(&[n, w]);
                if src == RowSrc::Swizzled {
                    layout = layout.with_swizzle(Swizzle::new(2, 0, 3).unwrap());
                }
                b.allocate_shared("st", dtype, layout)
            }
            RowSrc::Slice => {
                let root = b.allocate_shared("root", dtype, SharedLayout::row_major(&[2, n, w]));
                b.slice_shared("st", root, vec![1.into(), 0.into(), 0.into()], vec![n, w])
            }
            _ => {
                let root = b.allocate_shared("root", dtype, SharedLayout::row_major(&[n, 2 * w]));
                b.slice_shared("st", root, vec![0.into(), wi.into()], vec![n, w])
            }
        };
        b.store_shared(t, st, vec![0.into(), 0.into()]);
        b.synchronize();
        st
    };
    let g = b.gather_rows("g", table, ix, dim);
    b.store_global(g, go, at(out_shape[0]));
    b.finish()
}

/// Rows of the shared table of each block of [`scatter_rows_program`].
pub const SC_TABLE_ROWS: usize = 512;

/// The layout of `scatter_rows`'s value for index tiles of `layout` and rows of `w` along
/// `dim` (`gather_rows`'s result layout).
pub fn scatter_rows_value_layout(layout: &str, w: usize, dim: usize) -> Layout {
    gather_rows_layout(&l(layout), w, dim).expect("a representable value layout")
}

/// `scatter_rows(x, table, idx, dim)` with `table` a `[rows, w]` tensor of `dtype` and `idx`
/// tiles of `layout` (128 threads), stacked as in [`gather_rows_program`] (block `b` scatters
/// index tile `b` with value tile `b`; `x` has the index's shape with dimension `dim` times
/// `w`). [`RowSrc`] says where the table is: `Global` scatters into `out` (`[rows, w]`)
/// itself; the shared kinds give block `b` rows `b * SC_TABLE_ROWS ..` of `out` (`rows` must
/// be `ROW_BLOCKS * SC_TABLE_ROWS`): it copies them into shared memory, scatters the indices
/// of its rows (its index minus `b * SC_TABLE_ROWS`: the other blocks' rows are out of range
/// there), and copies them back. Either way `out` row `idx[k]` becomes index element `k`'s row
/// where it is one of the block's rows, and no other row changes.
/// Parameters: `rows`, `x`, `idx`, `out`.
pub fn scatter_rows_program(
    dtype: DType,
    w: usize,
    layout: &str,
    dim: usize,
    dst: RowSrc,
) -> Program {
    let lay = l(layout);
    let shape = lay.shape().to_vec();
    let mut x_shape = shape.clone();
    x_shape[dim] *= w;
    let stacked = |s: &[usize]| -> Vec<Expr> {
        s.iter()
            .enumerate()
            .map(|(d, &n)| Expr::Int((if d == 0 { ROW_BLOCKS * n } else { n }) as i32))
            .collect()
    };
    let mut b = ProgramBuilder::new("scatter_rows", 128);
    let rows = b.param_i32("rows");
    let x = b.param_ptr("x", dtype, false);
    let idx = b.param_ptr("idx", DType::Int(32), false);
    let out = b.param_ptr("out", dtype, true);
    b.grid(vec![Expr::Int(ROW_BLOCKS as i32)]);
    let bi = b.block_indices(&["bi"])[0];
    let at = |n: usize| {
        let mut v = vec![Expr::from(bi) * n as i32];
        v.resize(shape.len(), Expr::Int(0));
        v
    };
    let wi = w as i32;
    let go = b.view_global("go", out, dtype, vec![rows.into(), wi.into()]);
    let gi = b.view_global("gi", idx, DType::Int(32), stacked(&shape));
    let gx = b.view_global("gx", x, dtype, stacked(&x_shape));
    let ix = b.load_global("ix", gi, lay, at(shape[0]));
    let xl = scatter_rows_value_layout(layout, w, dim);
    let v = b.load_global("v", gx, xl, at(x_shape[0]));
    if dst == RowSrc::Global {
        b.scatter_rows(v, go, ix, dim);
        return b.finish();
    }
    let n = SC_TABLE_ROWS;
    let first = Expr::from(bi) * n as i32;
    let copy = l(&format!("spatial(128, 1).local({}, {w})", n / 128));
    let t = b.load_global("t", go, copy.clone(), vec![first.clone(), 0.into()]);
    let st = match dst {
        RowSrc::Shared | RowSrc::Swizzled => {
            let mut layout = SharedLayout::row_major(&[n, w]);
            if dst == RowSrc::Swizzled {
                layout = layout.with_swizzle(Swizzle::new(2, 0, 3).unwrap());
            }
            b.allocate_shared("st", dtype, layout)
        }
        RowSrc::Slice => {
            let root = b.allocate_shared("root", dtype, SharedLayout::row_major(&[2, n, w]));
            b.slice_shared("st", root, vec![1.into(), 0.into(), 0.into()], vec![n, w])
        }
        _ => {
            let root = b.allocate_shared("root", dtype, SharedLayout::row_major(&[n, 2 * w]));
            b.slice_shared("st", root, vec![0.into(), wi.into()], vec![n, w])
        }
    };
    b.store_shared(t, st, vec![0.into(), 0.into()]);
    b.synchronize();
    let local = b.binary("local", ElementOp::Sub, ix, Operand::Scalar(first.clone()));
    b.scatter_rows(v, st, local, dim);
    b.synchronize();
    let r = b.load_shared("r", st, copy, vec![0.into(), 0.into()]);
    b.store_global(r, go, vec![first, 0.into()]);
    b.finish()
}

/// Codebook entries copied by [`book_copies_program`].
pub const BOOK_ENTRIES: usize = 256;

/// The VQ kernels' codebook staging: `out` (`[BOOK_ENTRIES * copies, w]`) gets `copies` copies
/// of each row of `book` (`[BOOK_ENTRIES, w]`), entry `e`'s at rows `e * copies ..`, written
/// into a shared table by `copies` `scatter_rows`, pass `c` putting each entry into copy
/// `(e + c) % copies` (so a warp's lanes spread over the copies), then copied out. Its only
/// shared stores are the `scatter_rows`. Parameters: `book`, `out`.
pub fn book_copies_program(dtype: DType, w: usize, copies: usize) -> Program {
    let n = BOOK_ENTRIES;
    let mut b = ProgramBuilder::new("book_copies", 128);
    let book = b.param_ptr("book", dtype, false);
    let out = b.param_ptr("out", dtype, true);
    b.grid(vec![Expr::Int(1)]);
    let wi = w as i32;
    let gb = b.view_global("gb", book, dtype, vec![(n as i32).into(), wi.into()]);
    let go = b.view_global(
        "go",
        out,
        dtype,
        vec![((n * copies) as i32).into(), wi.into()],
    );
    // Entries `t` and `t + 128` on thread `t` (the index layout); their rows in its
    // `.local(1, w)`, as `scatter_rows` along dim 1 wants them.
    let li = "local(2, 1).spatial(128, 1)";
    let rows = b.load_global(
        "rows",
        gb,
        scatter_rows_value_layout(li, w, 1),
        vec![0.into(), 0.into()],
    );
    let s = b.allocate_shared("sbook", dtype, SharedLayout::row_major(&[n * copies, w]));
    let entry = b.arange("entry", l(li), 0, 0);
    let base = b.binary("base", ElementOp::Mul, entry, Operand::Imm(copies as f64));
    for c in 0..copies {
        let k = b.binary("k", ElementOp::Add, entry, Operand::Imm(c as f64));
        let copy = b.binary("copy", ElementOp::Mod, k, Operand::Imm(copies as f64));
        let at = b.binary("at", ElementOp::Add, base, Operand::Tensor(copy));
        b.scatter_rows(rows, s, at, 1);
    }
    b.synchronize();
    let chunk = l(&format!("spatial(128, 1).local(1, {w})"));
    b.for_range("k", 0.into(), ((n * copies / 128) as i32).into(), |b, k| {
        let at = vec![Expr::from(k) * 128, 0.into()];
        let r = b.load_shared("r", s, chunk.clone(), at.clone());
        b.store_global(r, go, at);
    });
    b.finish()
}

/// The table after [`scatter_rows_program`] on host data: `table` (`[rows, w]` codes) with row
/// `idx[k]` replaced by `x[.., i * w + c, ..]` (`c < w`, `i` index element `k`'s coordinate
/// along `dim`) for every index element `k` whose row the program writes: any row in
/// `[0, rows)` for `RowSrc::Global`, a row of the block's own `SC_TABLE_ROWS` for the shared
/// kinds (`idx`'s elements are the blocks' tiles in turn, each `tile` elements). Panics when
/// two written elements name one row (the interpreter reports it).
pub fn scatter_rows_reference(
    table: &[u32],
    w: usize,
    x: &[u32],
    idx: &[i32],
    shape: &[usize],
    dim: usize,
    dst: RowSrc,
) -> Vec<u32> {
    let rows = (table.len() / w) as i64;
    let tile = idx.len() / ROW_BLOCKS;
    let mut x_shape = shape.to_vec();
    x_shape[dim] *= w;
    let mut out = table.to_vec();
    let mut written = std::collections::HashSet::new();
    for (k, &r) in idx.iter().enumerate() {
        let r = r as i64;
        let ok = match dst {
            RowSrc::Global => (0..rows).contains(&r),
            _ => {
                let n = SC_TABLE_ROWS as i64;
                let first = (k / tile) as i64 * n;
                (first..first + n).contains(&r)
            }
        };
        if !ok {
            continue;
        }
        assert!(written.insert(r), "row {r} written twice");
        // The index element's coordinates, then its row's `w` positions in `x`.
        let mut at = vec![0; shape.len()];
        let mut rest = k;
        for d in (0..shape.len()).rev() {
            at[d] = rest % shape[d];
            rest /= shape[d];
        }
        for c in 0..w {
            let mut flat = 0;
            for d in 0..shape.len() {
                let coord = if d == dim { at[d] * w + c } else { at[d] };
                flat = flat * x_shape[d] + coord;
            }
            out[r as usize * w + c] = x[flat];
        }
    }
    out
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
