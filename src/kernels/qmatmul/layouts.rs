//! The register layouts of the quantized matmul, all derived from the mma.m16n8k16 fragments.
//!
//! With the warp grid `wm x wn` (warp `w = wi * wn + wj`) and the repeats `rm, rn, rk` of
//! [`Tiling`]:
//!
//! ```text
//! C  [bm, bn] = spatial(wm, wn) . local(rm, rn)                . local(2,1).spatial(8,4).local(1,2)
//! A  [bm, bk] = spatial(wm, 1) . replicated(wn) . local(rm, rk) . column_local(2,2).spatial(8,4).local(1,2)
//! B  [bk, bn] = replicated(wm) . spatial(1, wn) . local(rk, rn) . local(2,1).column_spatial(4,8).local(2,1)
//! W  [tile_bytes] (u8) = replicated(wm) . local(bpt / v) . spatial(32 wn) . local(v)
//! Q  [bk, bn] (codes)    = B with each thread's locals reordered: see `pack_split`
//! B3 [gk, bk / gk, bn]   = B with dim 0 split into (group in tile, row in group); Q3 likewise
//! S  [gk, 1, bn]         = reduce(B3, [1])   (scales and zero points, replicated over rows)
//! Sc [1, bn]             = reduce(C, [0])    (per-channel scales, applied to the accumulator)
//! ```
//!
//! Warp `(wi, wj)` computes the contiguous `[bm / wm, bn / wn]` block of `C`. `A` is replicated
//! over the warps along n and `B` over the warps along m, so each warp holds exactly the
//! fragments its `C` tiles need (the mma condition of `tilus_core::verify`). With one warp
//! along m and four along n these are the `a_tile`, `b_tile`, `c_tile` and `weight_bytes` of
//! `tilus::programs` (Figure 2), so the default weight format is Figure 8's. `W`
//! is the weight tile as bytes: thread `t` holds `bpt` bytes in runs of `v` contiguous bytes
//! (16 where possible: one LDS.128 per run), and the offline re-layout puts there exactly the
//! packed bits of that thread's `B` locals, so `view(W, wdtype, B3)` needs no data movement.
//!
//! [`QMatmulMethod::Gemv`] computes `Cᵀ = Wᵀ · Aᵀ` with `bm / 8 = rm` token tiles of 8
//! activation rows and the weight as the mma's A operand; in the same `[k, n]` / `[m, k]` /
//! `[m, n]` coordinates (the token tiles are the inner locals, as in the kernel's B and C
//! operands):
//!
//! ```text
//! C  [bm, bn] = spatial(1, wn) . column_local(rm, rn) . mma_c_t   (the [n, bm] accumulator, transposed)
//! A  [bm, bk] = replicated(wn) . column_local(rm, rk) . mma_b_t   (B of the product, loaded n-major)
//! B  [bk, bn] = spatial(1, wn) . column_local(rk, rn) . mma_a_t   (A of the product, 16 x 16 per fragment)
//! ```

use super::config::{config_err, QMatmulConfig, QMatmulError, QMatmulMethod, Tiling};
use tilus_core::layout::fragments::fragment;
use tilus_core::layout::Layout;
use tilus_core::verify::{mma_fragments, MmaKind};
use tilus_core::DType;

/// Every layout the programs use, for one configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QMatmulLayouts {
    pub tiling: Tiling,
    /// The f32 accumulator `[bm, bn]`.
    pub c: Layout,
    /// The activation tile `[bm, bk]` (mma A operand).
    pub a: Layout,
    /// The dequantized weight tile `[bk, bn]` (mma B operand).
    pub b: Layout,
    /// The quantized codes `[bk, bn]`: `b`'s elements on the same threads, in the order the
    /// re-laid-out bytes pack them (see [`pack_split`]); `cast_to(view(W, Q3), B3)` dequantizes.
    pub q: Layout,
    /// `b` with dim 0 split per scale group: `[gk, bk / gk, bn]`.
    pub b3: Layout,
    /// `q` split the same way.
    pub q3: Layout,
    /// Scales and zero points of one k tile: `[gk, 1, bn]`.
    pub scale: Layout,
    /// Per-channel scales applied to the accumulator: `[1, bn]`.
    pub c_scale: Layout,
    /// The re-laid-out weight tile as bytes: `[tile_bytes]`.
    pub wbytes: Layout,
}

fn chain(parts: &[Layout]) -> Layout {
    parts[1..]
        .iter()
        .try_fold(parts[0].clone(), |acc, p| acc.compose(p))
        .expect("the qmatmul layouts are compositions of equal-rank layouts")
}

impl QMatmulLayouts {
    /// The layouts of `config` (validated first).
    pub fn new(config: &QMatmulConfig) -> Result<QMatmulLayouts, QMatmulError> {
        let t = config.tiling()?;
        QMatmulLayouts::with_warps_m(config, t, t.warps_m)
    }

    /// The layouts without replication over the warps along m: what one group of `warps_n`
    /// warps holds. The device re-layout program uses these (it needs no copies).
    pub fn distinct(config: &QMatmulConfig) -> Result<QMatmulLayouts, QMatmulError> {
        let t = config.tiling()?;
        QMatmulLayouts::with_warps_m(config, t, 1)
    }

    fn with_warps_m(
        config: &QMatmulConfig,
        t: Tiling,
        replicas_m: usize,
    ) -> Result<QMatmulLayouts, QMatmulError> {
        let kind = match config.adtype {
            tilus_core::DType::BF16 => MmaKind::Bf16,
            _ => MmaKind::F16,
        };
        let [fa, fb, fc] = mma_fragments(kind);
        let (wm, wn) = (t.warps_m, t.warps_n);
        let (local, spatial, rep) = (Layout::local, Layout::spatial, Layout::replicated);
        let (c, a, b) = if matches!(
            config.method,
            QMatmulMethod::GemvImma | QMatmulMethod::GemvIgmma
        ) {
            // The integer-mma gemvs: `P` codes a byte, code `f` of each byte in the k-range
            // `[f bk / P, (f + 1) bk / P)`, each range the 8-bit k32 A fragments of the transposed
            // product (`super::imma`): warps side by side (`mma.sync`), or warpgroup tiles of 64
            // weight columns with the k steps of 32 innermost (the register A of `wgmma .u8`).
            let named = |n: &str| fragment(n).expect("a named fragment");
            let p = super::imma::fields_per_byte(config.wdtype).expect("checked by tiling");
            let fields = if config.method == QMatmulMethod::GemvImma {
                chain(&[
                    spatial(&[1, wn]),
                    Layout::column_local(&[config.bk / p / 32, t.rep_n]),
                ])
            } else {
                chain(&[
                    spatial(&[1, wn / 4]),
                    local(&[1, t.rep_n]),
                    spatial(&[1, 4]),
                    local(&[t.rep_k, 1]),
                ])
            };
            (
                chain(&[
                    spatial(&[1, wn]),
                    Layout::column_local(&[t.rep_m, t.rep_n]),
                    named("mma_c_t"),
                ]),
                chain(&[
                    rep(2, wn),
                    Layout::column_local(&[t.rep_m, t.rep_k]),
                    named("mma_b_t"),
                ]),
                chain(&[local(&[p, 1]), fields, named("mma_a_f8_t")]),
            )
        } else if config.method == QMatmulMethod::GemvWgmma {
            // The warpgroup gemv: warpgroup tiles of 64 weight columns (four warps' 16-row
            // fragments), the k steps innermost; the activations stay in shared memory (`a`
            // is the tile as the mma.sync gemv would load it, for the host's shapes only).
            let named = |n: &str| fragment(n).expect("a named fragment");
            let groups = wn / 4;
            (
                chain(&[
                    spatial(&[1, groups]),
                    local(&[1, t.rep_n]),
                    spatial(&[1, 4]),
                    local(&[t.rep_m, 1]),
                    named("mma_c_t"),
                ]),
                chain(&[
                    rep(2, wn),
                    Layout::column_local(&[t.rep_m, t.rep_k]),
                    named("mma_b_t"),
                ]),
                chain(&[
                    spatial(&[1, groups]),
                    local(&[1, t.rep_n]),
                    spatial(&[1, 4]),
                    local(&[t.rep_k, 1]),
                    named("mma_a_t"),
                ]),
            )
        } else if config.method == QMatmulMethod::Gemv {
            // The transposed product: the weight tile is mma A (`mma_a_t` over [k, n]), the
            // activations B (loaded n-major, `mma_b_t` over [m, k]), and the accumulator
            // `mma_c` over [n, m], seen here as [m, n].
            let named = |n: &str| fragment(n).expect("a named fragment");
            (
                chain(&[
                    spatial(&[1, wn]),
                    Layout::column_local(&[t.rep_m, t.rep_n]),
                    named("mma_c_t"),
                ]),
                chain(&[
                    rep(2, wn),
                    Layout::column_local(&[t.rep_m, t.rep_k]),
                    named("mma_b_t"),
                ]),
                chain(&[
                    spatial(&[1, wn]),
                    Layout::column_local(&[t.rep_k, t.rep_n]),
                    named("mma_a_t"),
                ]),
            )
        } else {
            (
                chain(&[spatial(&[wm, wn]), local(&[t.rep_m, t.rep_n]), fc]),
                chain(&[
                    spatial(&[wm, 1]),
                    rep(2, wn),
                    local(&[t.rep_m, t.rep_k]),
                    fa,
                ]),
                chain(&[
                    rep(2, replicas_m),
                    spatial(&[1, wn]),
                    local(&[t.rep_k, t.rep_n]),
                    fb,
                ]),
            )
        };
        let rows = config.bk / t.groups_per_tile;
        let b3 = b
            .split_dim(0, rows)
            .map_err(|e| config_err("group_rows", e.to_string()))?;
        let q = if matches!(
            config.method,
            QMatmulMethod::GemvImma | QMatmulMethod::GemvIgmma
        ) {
            // Locals (field, i) -> (i, field): byte `i` packs code `f` of each field's local `i`.
            let p = super::imma::fields_per_byte(config.wdtype).expect("checked by tiling");
            b.swap_inner_locals(b.num_locals() / p, p)
                .map_err(|e| config_err("bk", e.to_string()))?
        } else {
            match pack_split(super::config::kernel_codes(config.wdtype), config.adtype) {
                Some(h) => b.swap_inner_locals(2, h).unwrap_or_else(|_| b.clone()),
                None => b.clone(),
            }
        };
        let q3 = q
            .split_dim(0, rows)
            .map_err(|e| config_err("group_rows", e.to_string()))?;
        let scale = b3.reduce(&[1]).expect("dim 1 exists");
        let c_scale = c.reduce(&[0]).expect("dim 0 exists");
        let v = t.vector_bytes;
        let wbytes = chain(&[
            rep(1, replicas_m),
            local(&[t.bytes_per_thread / v]),
            spatial(&[32 * wn]),
            local(&[v]),
        ]);
        Ok(QMatmulLayouts {
            tiling: t,
            c,
            a,
            b,
            q,
            b3,
            q3,
            scale,
            c_scale,
            wbytes,
        })
    }
}

/// How the re-laid-out weight packs each thread's codes: `Some(h)` puts the two codes of each
/// f16/bf16 pair of the B fragment `h` codes apart, the even ones of each block of `2h` first
/// (`Layout::swap_inner_locals(2, h)`), so that the in-register cast places both with masks
/// and shared shifts instead of a byte permute per pair (`tilus_core::codegen::cast::PackOrder`).
/// The split with the cheapest cast (by its instruction count) wins, if it beats the natural
/// order: for 1-, 2- and 4-bit integers `h * bits = 16` (a third fewer instructions), for
/// 3-bit `h = 8` (a sixth), for 5 and 6 bits a few percent; the float types keep the natural
/// order.
pub fn pack_split(wdtype: DType, adtype: DType) -> Option<usize> {
    use tilus_core::codegen::cast::{cast_op_count, cast_plan_ordered, PackOrder};
    let per_word = |order| {
        cast_plan_ordered(wdtype, adtype, order)
            .map(|p| cast_op_count(&p) as f64 / p.out_words as f64)
    };
    let natural = per_word(PackOrder::Natural)?;
    [2, 4, 8, 16]
        .into_iter()
        .filter_map(|h| per_word(PackOrder::Split(h)).map(|c| (c, h)))
        .filter(|&(c, _)| c < natural - 1e-9)
        .min_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|(_, h)| h)
}
