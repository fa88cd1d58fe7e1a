//! The VM programs of the quantized matmul: the main pipeline (paper Figure 2 generalized) and
//! the split-k reduction.

use super::config::{config_err, QMatmulConfig, QMatmulError, QMatmulMethod};
use super::layouts::QMatmulLayouts;
use crate::DType;
use tilus_core::ir::{ElementOp, Expr, Operand, Program, ProgramBuilder, ScalarType, VarId};
use tilus_core::layout::{Layout, SharedLayout, Swizzle};
use tilus_core::verify::{self, Target};

/// The shared-memory target the programs are checked against (sm_80, the smallest we support).
pub const TARGET: Target = Target::SM80;

/// A built member of the family: the verified programs and the layouts they use.
#[derive(Clone, Debug)]
pub struct QMatmulKernel {
    pub config: QMatmulConfig,
    pub layouts: QMatmulLayouts,
    /// The matmul. Parameters: `m, n, k: i32`, `a: *adtype [m, k]`, `b: *u8` (re-laid-out
    /// weight), `scales: *adtype [k / group, n]`, `zeros` (same, only with `has_zeros`), then
    /// `c: *mut adtype [m, n]`, or with `split_k > 1` `workspace: *mut f32 [split_k, m, n]`.
    /// Grid `[cdiv(m, bm), n / bn, split_k]`.
    pub main: Program,
    /// With `split_k > 1`: sums the workspace into `c`. Parameters `m, n: i32`,
    /// `workspace: *f32`, `c: *mut adtype`. Grid `[cdiv(m, rows), n / bn]`.
    pub reduce: Option<Program>,
    /// With [`QMatmulMethod::DequantizeThenGemm`]: writes the dense weight for the GEMM.
    /// Parameters `n, k: i32`, `b: *u8`, `scales`, `zeros` (with `has_zeros`), `w: *mut
    /// adtype [k, n]`. Grid `[k / bk, n / bn]`.
    pub dequant: Option<Program>,
}

/// A short name of the configuration, used for the program names.
pub fn config_name(c: &QMatmulConfig) -> String {
    let group = c.group_rows.map_or("pc".to_string(), |g| format!("g{g}"));
    let zeros = if c.has_zeros { "_z" } else { "" };
    let method = match c.method {
        QMatmulMethod::Fused => "",
        QMatmulMethod::DequantizeThenGemm => "_dq",
    };
    format!(
        "{}_{}_{group}{zeros}_{}x{}x{}_w{}_s{}_k{}{method}",
        c.adtype, c.wdtype, c.bm, c.bn, c.bk, c.warps, c.stages, c.split_k
    )
}

/// Build and verify the programs of `config`.
pub fn build(config: &QMatmulConfig) -> Result<QMatmulKernel, QMatmulError> {
    let layouts = QMatmulLayouts::new(config)?;
    let main = build_main(config, &layouts);
    check(&main)?;
    let shared = verify::shared_bytes(&main);
    if shared > TARGET.max_shared_bytes {
        return Err(config_err(
            "stages",
            format!(
                "{} stages of the A, weight and scale tiles need {shared} bytes of shared memory, more than {}",
                config.stages, TARGET.max_shared_bytes
            ),
        ));
    }
    let reduce = if config.split_k > 1 {
        let p = build_reduce(config)?;
        check(&p)?;
        Some(p)
    } else {
        None
    };
    let dequant = match config.method {
        QMatmulMethod::Fused => None,
        QMatmulMethod::DequantizeThenGemm => {
            let p = super::dequant::build_dequant(config)?;
            check(&p)?;
            Some(p)
        }
    };
    Ok(QMatmulKernel {
        config: *config,
        layouts,
        main,
        reduce,
        dequant,
    })
}

/// Verify a generated program; a failure is a bug here, reported with every diagnostic.
pub(crate) fn check(p: &Program) -> Result<(), QMatmulError> {
    // Shared memory is checked separately so that its error names the config field.
    let target = Target {
        max_shared_bytes: usize::MAX,
        ..TARGET
    };
    verify::verify(p, &target).map_err(|diags| QMatmulError::Verify {
        program: p.name.clone(),
        diagnostics: diags
            .iter()
            .map(|d| d.message.clone())
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// The XOR swizzle of the `[bm, bk]` activation tile in shared memory (16-bit elements), so that
/// the eight 16-byte rows one `ldmatrix` reads fall into distinct banks; `None` when `bk` is not
/// a power of two. With `c = bk / 8` 16-byte chunks per row, the chunk index is XORed with the
/// row index (divided by the rows per 128-byte line when a row is shorter than 128 bytes).
pub fn a_swizzle(bk: usize) -> Option<Swizzle> {
    if !bk.is_power_of_two() || bk < 16 {
        return None;
    }
    let chunks = (bk / 8).trailing_zeros();
    Swizzle::new(chunks.min(3), 3, chunks.max(3)).ok()
}

fn e(v: usize) -> Expr {
    Expr::Int(v as i32)
}

/// Shared buffers of the pipeline and the global views they are filled from.
struct Pipeline {
    ga: VarId,
    gb: VarId,
    /// Scale and zero-point views and buffers (grouped quantization only).
    gs: Option<VarId>,
    gz: Option<VarId>,
    sa: VarId,
    sb: VarId,
    ss: Option<VarId>,
    sz: Option<VarId>,
    bi: VarId,
    bj: VarId,
}

impl Pipeline {
    /// Issue the cp.async copies of k tile `tile` into pipeline stage `stage`.
    fn issue(
        &self,
        b: &mut ProgramBuilder,
        c: &QMatmulConfig,
        tb: usize,
        gk: usize,
        tile: Expr,
        stage: Expr,
    ) {
        let z = || e(0);
        let dst = b.slice_shared(
            "sa_dst",
            self.sa,
            vec![stage.clone(), z(), z()],
            vec![c.bm, c.bk],
        );
        let row = Expr::from(self.bi) * e(c.bm);
        b.copy_async(dst, self.ga, vec![row, tile.clone() * e(c.bk)]);
        let dst = b.slice_shared("sb_dst", self.sb, vec![stage.clone(), z()], vec![tb]);
        b.copy_async(dst, self.gb, vec![tile.clone(), self.bj.into(), z()]);
        let g = c.group_rows.unwrap_or(c.bk);
        for (shared, global, name) in [(self.ss, self.gs, "ss_dst"), (self.sz, self.gz, "sz_dst")] {
            if let (Some(shared), Some(global)) = (shared, global) {
                let dst = b.slice_shared(
                    name,
                    shared,
                    vec![stage.clone(), z(), z(), z()],
                    vec![gk, 1, c.bn],
                );
                let group = tile.clone() * e(c.bk) / e(g);
                b.copy_async(dst, global, vec![group, z(), Expr::from(self.bj) * e(c.bn)]);
            }
        }
    }
}

fn build_main(c: &QMatmulConfig, lay: &QMatmulLayouts) -> Program {
    let t = lay.tiling;
    let (ad, wd, u8t) = (c.adtype, c.wdtype, DType::UInt(8));
    let (tb, gk, s) = (t.tile_bytes, t.groups_per_tile, c.stages);
    let split = c.split_k > 1;
    let mut b = ProgramBuilder::new(
        &format!("qmatmul_{}", config_name(c)),
        (c.warps * 32) as u32,
    );
    let m = b.param_i32("m");
    let n = b.param_i32("n");
    let k = b.param_i32("k");
    let a_ptr = b.param_ptr("a", ad, false);
    let w_ptr = b.param_ptr("b", u8t, false);
    let s_ptr = b.param_ptr("scales", ad, false);
    let z_ptr = c.has_zeros.then(|| b.param_ptr("zeros", ad, false));
    let out_ptr = if split {
        b.param_ptr("workspace", DType::F32, true)
    } else {
        b.param_ptr("c", ad, true)
    };
    let (me, ne, ke) = (Expr::from(m), Expr::from(n), Expr::from(k));
    b.grid(vec![
        Expr::cdiv(me.clone(), e(c.bm)),
        ne.clone() / e(c.bn),
        e(c.split_k),
    ]);
    let idx = b.block_indices(&["bi", "bj", "bs"]);
    let (bi, bj, bs) = (idx[0], idx[1], idx[2]);

    // Global views: activations row-major, the weight as tiles of re-laid-out bytes, and the
    // scales / zero points as [groups, 1, n] so that a tile of them broadcasts over its rows.
    let ga = b.view_global("ga", a_ptr, ad, vec![me.clone(), ke.clone()]);
    let gb = b.view_global(
        "gb",
        w_ptr,
        u8t,
        vec![ke.clone() / e(c.bk), ne.clone() / e(c.bn), e(tb)],
    );
    let grouped = c.group_rows;
    let groups = match grouped {
        Some(g) => ke.clone() / e(g),
        None => e(1),
    };
    // Per-channel scales are read once, after the loop (`gsc` below).
    let gs =
        grouped.map(|_| b.view_global("gs", s_ptr, ad, vec![groups.clone(), e(1), ne.clone()]));
    let gz = z_ptr.map(|z| b.view_global("gz", z, ad, vec![groups.clone(), e(1), ne.clone()]));

    let mut a_layout = SharedLayout::row_major(&[s, c.bm, c.bk]);
    if let Some(sw) = a_swizzle(c.bk) {
        a_layout = a_layout.with_swizzle(sw);
    }
    let sa = b.allocate_shared("sa", ad, a_layout);
    let sb = b.allocate_shared("sb", u8t, SharedLayout::row_major(&[s, tb]));
    let scale_tile = SharedLayout::row_major(&[s, gk, 1, c.bn]);
    let ss = grouped.map(|_| b.allocate_shared("ss", ad, scale_tile.clone()));
    let sz = match (grouped, gz) {
        (Some(_), Some(_)) => Some(b.allocate_shared("sz", ad, scale_tile.clone())),
        _ => None,
    };
    let acc = b.allocate_register("acc", DType::F32, lay.c.clone(), Some(0.0));
    let col0 = Expr::from(bj) * e(c.bn);

    let ktiles = b.let_("ktiles", ScalarType::I32, ke.clone() / e(c.bk * c.split_k));
    let kt0 = b.let_("kt0", ScalarType::I32, Expr::from(bs) * ktiles);
    let pipe = Pipeline {
        ga,
        gb,
        gs,
        gz: if grouped.is_some() { gz } else { None },
        sa,
        sb,
        ss,
        sz,
        bi,
        bj,
    };
    // Prologue: the first stages - 1 tiles in flight, one commit group each (empty past the
    // end, so that the wait counts below stay exact).
    for st in 0..s - 1 {
        let cond = Expr::binary(tilus_core::ir::BinaryOp::Lt, e(st), ktiles);
        b.if_else(
            cond,
            |b| pipe.issue(b, c, tb, gk, Expr::from(kt0) + e(st), e(st)),
            |_| {},
        );
        b.copy_async_commit_group();
    }
    // Grouped scales with whole k tiles per group are applied to the f32 accumulator once per
    // group (`acc += acc_g * s`, one FFMA), not to each dequantized weight: the dot runs on the unscaled
    // codes (minus zero points), which saves one packed multiply (and its saturation clamp) per
    // two weights. Groups shorter than a k tile scale each weight, per-channel scales the final
    // accumulator.
    let tiles_per_group = match grouped {
        Some(g) if g % c.bk == 0 => Some(g / c.bk),
        _ => None,
    };
    // Zero points, where the scale is applied to the accumulator (whole-tile groups, or per
    // channel), come off the accumulator too: sum_k a (q - z) = sum_k a q - z sum_k a. The
    // row sums of A come from a second mma against a tile of ones, which costs one HMMA per
    // mma of the dot instead of a saturating subtraction (three instructions) per two weights.
    let fold_zeros = c.has_zeros && (tiles_per_group.is_some() || grouped.is_none());
    let ones = fold_zeros.then(|| b.allocate_register("ones", ad, lay.b.clone(), Some(1.0)));
    let step =
        |b: &mut ProgramBuilder, kt: Expr, acc: VarId, asum: Option<VarId>, scale_weights: bool| {
            // Tile kt has landed once at most stages - 2 newer groups are in flight.
            b.copy_async_wait_group((s - 2) as u32);
            b.synchronize();
            let stage = b.let_("stage", ScalarType::I32, kt.clone() % e(s));
            let z = || e(0);
            let st = || Expr::from(stage);
            let a_s = b.slice_shared("a_s", sa, vec![st(), z(), z()], vec![c.bm, c.bk]);
            let ra = b.load_shared("ra", a_s, lay.a.clone(), vec![z(), z()]);
            let w_s = b.slice_shared("w_s", sb, vec![st(), z()], vec![tb]);
            let rw = b.load_shared("rw", w_s, lay.wbytes.clone(), vec![z()]);
            let load_group = |b: &mut ProgramBuilder, buf: Option<VarId>, name: &str| {
                buf.map(|buf| {
                    let sl = b.slice_shared(
                        &format!("{name}_s"),
                        buf,
                        vec![st(), z(), z(), z()],
                        vec![gk, 1, c.bn],
                    );
                    b.load_shared(name, sl, lay.scale.clone(), vec![z(), z(), z()])
                })
            };
            let rs = if scale_weights {
                load_group(b, ss, "rs")
            } else {
                None
            };
            // Groups shorter than a k tile subtract zero points per weight; the others (and
            // per-channel zero points) come off the accumulator.
            let rz = if asum.is_some() {
                None
            } else {
                load_group(b, sz, "rz")
            };
            // Refill the stage read in the previous iteration (everyone passed the barrier above).
            let next = b.let_("next", ScalarType::I32, kt.clone() + e(s - 1));
            let cond = Expr::binary(tilus_core::ir::BinaryOp::Lt, next, ktiles);
            b.if_else(
                cond,
                |b| {
                    pipe.issue(
                        b,
                        c,
                        tb,
                        gk,
                        Expr::from(kt0) + next,
                        Expr::from(next) % e(s),
                    )
                },
                |_| {},
            );
            b.copy_async_commit_group();
            // Dequantize in registers: bytes -> codes -> activation type, minus zero, times scale.
            let wq = b.view("wq", rw, wd, lay.q3.clone());
            let mut wf = b.cast_to("wf", wq, ad, lay.b3.clone());
            if let Some(rz) = rz {
                wf = b.binary("wz", ElementOp::Sub, wf, Operand::Tensor(rz));
            }
            if let Some(rs) = rs {
                wf = b.binary("ws", ElementOp::Mul, wf, Operand::Tensor(rs));
            }
            let wb = b.view("wb", wf, ad, lay.b.clone());
            b.dot(acc, ra, wb, acc);
            if let (Some(asum), Some(ones)) = (asum, ones) {
                b.dot(asum, ra, ones, asum);
            }
            stage
        };
    // `acc += asum * -z` (one FFMA each) with the zero points `[1, bn]` of shared slice `zs`, or
    // per channel from global memory.
    let subtract_zeros = |b: &mut ProgramBuilder, acc: VarId, asum: VarId, zs: Option<VarId>| {
        let z = match zs {
            Some(zs) => b.load_shared("zc", zs, lay.c_scale.clone(), vec![e(0), e(0)]),
            None => {
                let z_ptr = z_ptr.expect("zero points exist when they are folded");
                let gzc = b.view_global("gzc", z_ptr, ad, vec![e(1), ne.clone()]);
                let col0 = Expr::from(bj) * e(c.bn);
                b.load_global("zc", gzc, lay.c_scale.clone(), vec![e(0), col0])
            }
        };
        let z32 = b.cast("zc32", z, DType::F32);
        let neg_z = b.neg("neg_zc32", z32);
        b.mul_add(acc, asum, Operand::Tensor(neg_z), acc);
    };
    match (tiles_per_group, ss) {
        (Some(tpg), Some(ss)) => {
            let ngroups = b.let_("ngroups", ScalarType::I32, Expr::from(ktiles) / e(tpg));
            b.for_range("g", e(0), ngroups.into(), |b, g| {
                let acc_g = b.allocate_register("acc_g", DType::F32, lay.c.clone(), Some(0.0));
                let asum = fold_zeros
                    .then(|| b.allocate_register("asum_g", DType::F32, lay.c.clone(), Some(0.0)));
                let first = Expr::from(g) * e(tpg);
                let last_stage = if tpg == 1 {
                    step(b, first, acc_g, asum, false)
                } else {
                    b.for_range("t", e(0), e(tpg - 1), |b, t| {
                        step(b, first.clone() + Expr::from(t), acc_g, asum, false);
                    });
                    step(b, first + e(tpg - 1), acc_g, asum, false)
                };
                // The group's scales (and zero points) came with its last tile, whose stage is
                // not refilled before the next barrier.
                if let (Some(asum), Some(sz)) = (asum, sz) {
                    let zs = b.slice_shared(
                        "zc_s",
                        sz,
                        vec![last_stage.into(), e(0), e(0), e(0)],
                        vec![1, c.bn],
                    );
                    subtract_zeros(b, acc_g, asum, Some(zs));
                }
                let sl = b.slice_shared(
                    "sc_s",
                    ss,
                    vec![last_stage.into(), e(0), e(0), e(0)],
                    vec![1, c.bn],
                );
                let sc = b.load_shared("sc", sl, lay.c_scale.clone(), vec![e(0), e(0)]);
                let sc32 = b.cast("sc32", sc, DType::F32);
                b.mul_add(acc, acc_g, Operand::Tensor(sc32), acc);
            });
        }
        _ => {
            let asum = fold_zeros
                .then(|| b.allocate_register("asum", DType::F32, lay.c.clone(), Some(0.0)));
            b.for_range("kt", e(0), ktiles.into(), |b, kt| {
                step(b, kt.into(), acc, asum, true);
            });
            if let Some(asum) = asum {
                subtract_zeros(&mut b, acc, asum, None);
            }
        }
    }
    b.copy_async_wait_group(0);

    // Per-channel scales multiply the accumulator once, in f32.
    if grouped.is_none() {
        let gsc = b.view_global("gsc", s_ptr, ad, vec![e(1), ne.clone()]);
        let sc = b.load_global("sc", gsc, lay.c_scale.clone(), vec![e(0), col0.clone()]);
        let sc32 = b.cast("sc32", sc, DType::F32);
        b.binary(acc, ElementOp::Mul, acc, Operand::Tensor(sc32));
    }
    let row0 = Expr::from(bi) * e(c.bm);
    if split {
        let gw = b.view_global("gw", out_ptr, DType::F32, vec![e(c.split_k), me, ne]);
        b.store_global(acc, gw, vec![bs.into(), row0, col0]);
    } else {
        let out = b.cast("out", acc, ad);
        let gc = b.view_global("gc", out_ptr, ad, vec![me, ne]);
        b.store_global(out, gc, vec![row0, col0]);
    }
    b.finish()
}

/// The layout of the split-k reduction over a `[rows, bn]` tile: four consecutive f32 per
/// thread (one 16-byte access), `bn / 4` threads per row, and enough rows for at least 128
/// threads.
pub fn reduce_layout(c: &QMatmulConfig) -> Result<Layout, QMatmulError> {
    let cols = c.bn / 4;
    if !c.bn.is_multiple_of(4) || cols == 0 {
        return Err(config_err("bn", format!("{} is not a multiple of 4", c.bn)));
    }
    let mut rows = 32 / gcd(cols, 32);
    while rows * cols < 128 {
        rows *= 2;
    }
    if rows * cols > 1024 {
        return Err(config_err(
            "bn",
            format!("split_k > 1 reduces [rows, bn] tiles with bn / 4 threads per row; {} does not fit a block", c.bn),
        ));
    }
    Layout::spatial(&[rows, cols])
        .compose(&Layout::local(&[1, 4]))
        .map_err(|e| config_err("bn", e.to_string()))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn build_reduce(c: &QMatmulConfig) -> Result<Program, QMatmulError> {
    let layout = reduce_layout(c)?;
    let rows = layout.shape()[0];
    let mut b = ProgramBuilder::new(
        &format!("qmatmul_reduce_{}", config_name(c)),
        layout.num_threads() as u32,
    );
    let m = b.param_i32("m");
    let n = b.param_i32("n");
    let ws = b.param_ptr("workspace", DType::F32, false);
    let out = b.param_ptr("c", c.adtype, true);
    let (me, ne) = (Expr::from(m), Expr::from(n));
    b.grid(vec![Expr::cdiv(me.clone(), e(rows)), ne.clone() / e(c.bn)]);
    let idx = b.block_indices(&["bi", "bj"]);
    let (row0, col0) = (Expr::from(idx[0]) * e(rows), Expr::from(idx[1]) * e(c.bn));
    let gw = b.view_global(
        "gw",
        ws,
        DType::F32,
        vec![e(c.split_k), me.clone(), ne.clone()],
    );
    let acc = b.allocate_register("acc", DType::F32, layout.clone(), Some(0.0));
    b.for_range("split", e(0), e(c.split_k), |b, sp| {
        let part = b.load_global(
            "part",
            gw,
            layout.clone(),
            vec![sp.into(), row0.clone(), col0.clone()],
        );
        b.binary(acc, ElementOp::Add, acc, Operand::Tensor(part));
    });
    let res = b.cast("out", acc, c.adtype);
    let gc = b.view_global("gc", out, c.adtype, vec![me, ne]);
    b.store_global(res, gc, vec![row0, col0]);
    Ok(b.finish())
}
