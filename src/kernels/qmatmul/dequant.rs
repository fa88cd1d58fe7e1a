//! The dequantization program of [`QMatmulMethod::DequantizeThenGemm`]: the re-laid-out weight
//! becomes a dense row-major `[k, n]` matrix of the activation type, which a GEMM then
//! multiplies (cuBLAS on the GPU, a host loop on the CPU runner).
//!
//! One block per `[bk, bn]` weight tile: the tile's bytes are loaded straight into registers in
//! the fused kernel's thread layout (`W`), reinterpreted as codes (`B3`), cast, shifted by the
//! zero points and scaled (per element: here every weight is written out anyway), then staged
//! through shared memory so that global stores are 16-byte rows instead of the mma fragment's
//! scattered pairs.
//!
//! [`QMatmulMethod::DequantizeThenGemm`]: super::config::QMatmulMethod

use super::config::{config_err, QMatmulConfig, QMatmulError};
use super::layouts::QMatmulLayouts;
use super::program::config_name;
use crate::DType;
use tilus_core::ir::{ElementOp, Expr, Operand, Program, ProgramBuilder};
use tilus_core::layout::{Layout, SharedLayout};

fn e(v: usize) -> Expr {
    Expr::Int(v as i32)
}

/// The row layout of a `[bk, bn]` tile for `threads` threads: eight consecutive elements
/// (16 bytes) per access, `bn / 8` threads per row.
fn row_layout(threads: usize, bk: usize, bn: usize) -> Result<Layout, QMatmulError> {
    let cols = bn / 8;
    if !bn.is_multiple_of(8) || cols == 0 || !threads.is_multiple_of(cols) {
        return Err(config_err(
            "bn",
            format!("{bn} does not split into 16-byte rows over {threads} threads"),
        ));
    }
    let rows = threads / cols;
    if !bk.is_multiple_of(rows) {
        return Err(config_err(
            "bk",
            format!("{bk} rows are not a multiple of the {rows} rows one pass of {threads} threads stores"),
        ));
    }
    Layout::local(&[bk / rows, 1])
        .compose(&Layout::spatial(&[rows, cols]))
        .and_then(|l| l.compose(&Layout::local(&[1, 8])))
        .map_err(|e| config_err("bn", e.to_string()))
}

/// Parameters: `n, k: i32`, `b: *u8` (re-laid-out weight), `scales: *adtype`, `zeros` (with
/// `has_zeros`), `w: *mut adtype [k, n]`. Grid `[k / bk, n / bn]`.
pub(crate) fn build_dequant(c: &QMatmulConfig) -> Result<Program, QMatmulError> {
    // One warp group along n: the replicas along m of the fused kernel hold the same weights.
    let lay = QMatmulLayouts::distinct(c)?;
    let t = lay.tiling;
    let threads = 32 * t.warps_n;
    let (ad, u8t) = (c.adtype, DType::UInt(8));
    let rows = row_layout(threads, c.bk, c.bn)?;
    let mut b = ProgramBuilder::new(
        &format!("qmatmul_dequant_{}", config_name(c)),
        threads as u32,
    );
    let n = b.param_i32("n");
    let k = b.param_i32("k");
    let w_ptr = b.param_ptr("b", u8t, false);
    let s_ptr = b.param_ptr("scales", ad, false);
    let z_ptr = c.has_zeros.then(|| b.param_ptr("zeros", ad, false));
    let out_ptr = b.param_ptr("w", ad, true);
    let (ne, ke) = (Expr::from(n), Expr::from(k));
    b.grid(vec![ke.clone() / e(c.bk), ne.clone() / e(c.bn)]);
    let idx = b.block_indices(&["bi", "bj"]);
    let (bi, bj) = (Expr::from(idx[0]), Expr::from(idx[1]));

    let gb = b.view_global(
        "gb",
        w_ptr,
        u8t,
        vec![ke.clone() / e(c.bk), ne.clone() / e(c.bn), e(t.tile_bytes)],
    );
    let rw = b.load_global(
        "rw",
        gb,
        lay.wbytes.clone(),
        vec![bi.clone(), bj.clone(), e(0)],
    );
    let wq = b.view("wq", rw, c.wdtype, lay.q3.clone());
    let mut wf = b.cast_to("wf", wq, ad, lay.b3.clone());
    // Scales and zero points of the tile's groups, `[gk, 1, bn]` (per channel: one group).
    let (groups, group_row) = match c.group_rows {
        Some(g) => (ke.clone() / e(g), bi.clone() * e(c.bk) / e(g)),
        None => (e(1), e(0)),
    };
    let col = bj.clone() * e(c.bn);
    let per_tile = |b: &mut ProgramBuilder, ptr, name: &str| {
        let view = b.view_global(
            &format!("g{name}"),
            ptr,
            ad,
            vec![groups.clone(), e(1), ne.clone()],
        );
        b.load_global(
            name,
            view,
            lay.scale.clone(),
            vec![group_row.clone(), e(0), col.clone()],
        )
    };
    if let Some(z) = z_ptr {
        let rz = per_tile(&mut b, z, "rz");
        wf = b.binary("wz", ElementOp::Sub, wf, Operand::Tensor(rz));
    }
    let rs = per_tile(&mut b, s_ptr, "rs");
    let ws = b.binary("ws", ElementOp::Mul, wf, Operand::Tensor(rs));
    let wb = b.view("wb", ws, ad, lay.b.clone());
    let tile = b.allocate_shared("tile", ad, SharedLayout::row_major(&[c.bk, c.bn]));
    b.store_shared(wb, tile, vec![e(0), e(0)]);
    b.synchronize();
    let out = b.load_shared("out", tile, rows, vec![e(0), e(0)]);
    let gw = b.view_global("gw", out_ptr, ad, vec![ke, ne]);
    b.store_global(out, gw, vec![bi * e(c.bk), col]);
    Ok(b.finish())
}
