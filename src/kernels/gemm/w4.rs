//! A 4-bit-weight GEMM on the warpgroup MMA (`docs/gemm.md`): `c[m, n] = a[m, k] · Wᵀ` with
//! `W[n, k] = (code - 8) · scale[n, k / group]`, f16 activations and output, written with
//! `#[kernel]`.
//!
//! The weight stays 4-bit in memory; each step of 64 `k` the block dequantizes its `[BN, 64]`
//! tile in registers and stores it, f16, into a 128-byte-swizzled shared stage, the k-major B
//! operand of the same `dot_async` as the dense GEMM (`super::kernel`). Activations, codes and
//! scales stream through a ring of `STAGES` shared slots by `cp.async`, `STAGES - 2` steps
//! ahead (the bytes in flight a memory-bound small `m` needs); the dequantized tiles use 3
//! slots of their own. Step `t + 1` is dequantized while the tensor cores run step `t`, so a
//! step costs one barrier.
//!
//! **Format** ([`W4Weight`]): `codes[n, k / 8]` `u32`, code `i` of a word (LSB first) for `k = 8
//! word + i`; symmetric int4 `q = code - 8` in `-8..=7`; `scales[k / group, n]` f16 (one row
//! per group: a step's scales are one contiguous row) with `group` a multiple of 64 dividing
//! `k`.

use half::f16;

/// Errors of the host side, naming the argument.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum W4Error {
    #[error("argument `{arg}`: {reason}")]
    Arg { arg: &'static str, reason: String },
}

fn arg(arg: &'static str, reason: impl Into<String>) -> W4Error {
    W4Error::Arg {
        arg,
        reason: reason.into(),
    }
}

/// A `[n, k]` weight quantized to symmetric int4 with one f16 scale per `group` of `k`.
#[derive(Clone, Debug, PartialEq)]
pub struct W4Weight {
    pub n: usize,
    pub k: usize,
    pub group: usize,
    /// `[n, k / 8]`, eight codes per word, LSB first.
    pub codes: Vec<u32>,
    /// `[k / group, n]`: the scales of group `g` of every row are row `g`.
    pub scales: Vec<f16>,
}

impl W4Weight {
    /// Quantize `w` (`[n, k]` row-major f32): per row and group, `scale = max|w| / 7` (rounded to
    /// f16; 1 for an all-zero group), `q = clamp(round(w / scale), -8, 7)`.
    pub fn quantize(w: &[f32], n: usize, k: usize, group: usize) -> Result<W4Weight, W4Error> {
        if group == 0 || !group.is_multiple_of(64) {
            return Err(arg(
                "group",
                format!("{group} is not a positive multiple of 64"),
            ));
        }
        if k == 0 || !k.is_multiple_of(group) {
            return Err(arg(
                "k",
                format!("{k} is not a positive multiple of the group {group}"),
            ));
        }
        if n == 0 {
            return Err(arg("n", "must be positive"));
        }
        if k > i32::MAX as usize || n > i32::MAX as usize {
            return Err(arg("k", "n and k must fit an i32"));
        }
        let len = n
            .checked_mul(k)
            .ok_or_else(|| arg("n", "n x k overflows"))?;
        if w.len() != len {
            return Err(arg(
                "w",
                format!("holds {} values, expected n x k = {len}", w.len()),
            ));
        }
        if let Some(i) = w.iter().position(|x| !x.is_finite()) {
            return Err(arg("w", format!("element {i} is {}", w[i])));
        }
        let groups = k / group;
        let mut codes = vec![0u32; n * k / 8];
        let mut scales = vec![f16::ZERO; n * groups];
        for r in 0..n {
            for g in 0..groups {
                let vals = &w[r * k + g * group..r * k + (g + 1) * group];
                let amax = vals.iter().fold(0f32, |a, x| a.max(x.abs()));
                let s = if amax > 0.0 {
                    f16::from_f32(amax / 7.0)
                } else {
                    f16::ONE
                };
                let s = if s.to_f32() > 0.0 {
                    s
                } else {
                    f16::MIN_POSITIVE_SUBNORMAL
                };
                scales[g * n + r] = s;
                for (i, x) in vals.iter().enumerate() {
                    let q = (x / s.to_f32()).round().clamp(-8.0, 7.0) as i32;
                    let kk = g * group + i;
                    codes[r * k / 8 + kk / 8] |= ((q + 8) as u32) << (4 * (kk % 8));
                }
            }
        }
        Ok(W4Weight {
            n,
            k,
            group,
            codes,
            scales,
        })
    }

    /// The dequantized weight `[n, k]` as the kernel computes it: `f16((code - 8) · scale)`.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.n * self.k];
        for r in 0..self.n {
            for kk in 0..self.k {
                let code = (self.codes[r * self.k / 8 + kk / 8] >> (4 * (kk % 8))) & 15;
                let s = self.scales[(kk / self.group) * self.n + r].to_f64();
                out[r * self.k + kk] = f16::from_f64((code as f64 - 8.0) * s).to_f32();
            }
        }
        out
    }
}

#[tilus::kernel(
    grid = [cdiv(n, BN) * cdiv(m, BM)],
    warps = BM / 16,
    space(BM = [64, 128], BN = [256, 128], STAGES = [5, 4], GROUP = [8]),
)]
#[allow(clippy::too_many_arguments)]
pub fn gemm_w4_f16<const BM: i32, const BN: i32, const STAGES: i32, const GROUP: i32>(
    m: i32,
    n: i32,
    k: i32,
    group: i32,
    a: Global<f16>,
    w: Global<u32>,
    s: Global<f16>,
    c: GlobalMut<f16>,
) {
    let [pid] = block_indices();
    let rows = cdiv(m, BM);
    let cols = cdiv(n, BN);
    let (bi, bj) = grouped_tile(pid, rows, cols, GROUP);
    let ga = view_global(a, [m, k]);
    let gw = view_global(w, [n, k / 8]);
    let gs = view_global(s, [k / group, n]);
    // The ring of raw operands (activations, codes, scales), STAGES - 2 steps ahead; and the
    // 3 stages of the dequantized weight (step t is written while t - 1 may still be read by
    // wgmmas in flight and t - 2 is retired).
    let sa = shared::<f16>([STAGES, BM, 64], swizzle(3, 3, 3));
    let sq = shared::<u32>([STAGES, BN, 8]);
    let ss = shared::<f16>([STAGES, 1, BN]);
    let sw = shared::<f16>([3, BN, 64], swizzle(3, 3, 3));
    // Each thread dequantizes whole 64-element rows of the weight tile: 8 words of codes.
    // With BN < 2 BM (128 x 128) half the block holds copies of the rows.
    #[allow(replicated)]
    let codes_layout = layout!(local(max(1, BN / (BM * 2)), 1)
        .spatial(min(BN, BM * 2), 1)
        .local(1, 8));
    let row_layout = layout!(local(max(1, BN / (BM * 2)), 1)
        .spatial(min(BN, BM * 2), 1)
        .local(1, 64));
    #[allow(replicated)]
    let scale_layout = layout!(local(max(1, BN / (BM * 2)), 1).spatial(min(BN, BM * 2), 1));
    let mut acc = register::<f32>(
        layout!(spatial(BM / 64, 1).spatial(4, 1).local(1, BN / 8).mma_c),
        0.0,
    );
    let steps = cdiv(k, 64);
    // Steps in flight ahead of the one computed: the ring slot of step t - 1 is still read by
    // wgmmas of other warpgroups until the next barrier.
    let ahead = STAGES - 2;
    for st in 0..ahead {
        copy_async(
            ga,
            slice_shared(sa, [st, 0, 0], [BM, 64]),
            [bi * BM, st * 64],
        );
        copy_async(gw, slice_shared(sq, [st, 0, 0], [BN, 8]), [bj * BN, st * 8]);
        copy_async(
            gs,
            slice_shared(ss, [st, 0, 0], [1, BN]),
            [st * 64 / group, bj * BN],
        );
        commit_group();
    }
    // The dequantized weight of step 0.
    wait_group(ahead - 1);
    sync();
    #[allow(replicated)]
    let codes = load_shared(slice_shared(sq, [0, 0, 0], [BN, 8]), codes_layout, [0, 0]);
    #[allow(replicated)]
    let sc = load_shared(
        permute_shared(slice_shared(ss, [0, 0, 0], [1, BN]), [1, 0]),
        scale_layout,
        [0, 0],
    );
    let q = cast::<f16>(view::<u4>(codes, row_layout)) - 8.0;
    store_shared(q * sc, slice_shared(sw, [0, 0, 0], [BN, 64]), [0, 0]);
    for t in 0..steps {
        // After the barrier: the dequantized tile of step t and the raw operands of step t + 1
        // are visible to every thread (and, fenced, to the wgmmas), and every warpgroup retired
        // the wgmmas of step t - 2 (its dot_wait(1) of the previous step).
        wait_group(ahead - 2);
        sync();
        let ta = slice_shared(sa, [t % STAGES, 0, 0], [BM, 64]);
        let tw = permute_shared(slice_shared(sw, [t % 3, 0, 0], [BN, 64]), [1, 0]);
        acc = dot_async(ta, tw, acc);
        // Dequantize step t + 1 while the tensor cores run step t (its slot held step t - 2).
        let r = (t + 1) % STAGES;
        #[allow(replicated)]
        let codes = load_shared(slice_shared(sq, [r, 0, 0], [BN, 8]), codes_layout, [0, 0]);
        #[allow(replicated)]
        let sc = load_shared(
            permute_shared(slice_shared(ss, [r, 0, 0], [1, BN]), [1, 0]),
            scale_layout,
            [0, 0],
        );
        let q = cast::<f16>(view::<u4>(codes, row_layout)) - 8.0;
        store_shared(
            q * sc,
            slice_shared(sw, [(t + 1) % 3, 0, 0], [BN, 64]),
            [0, 0],
        );
        dot_wait(1);
        // Refill the ring slot of step t - 2, retired by every warpgroup before this step's
        // barrier.
        let next = t + ahead;
        copy_async(
            ga,
            slice_shared(sa, [next % STAGES, 0, 0], [BM, 64]),
            [bi * BM, next * 64],
        );
        copy_async(
            gw,
            slice_shared(sq, [next % STAGES, 0, 0], [BN, 8]),
            [bj * BN, next * 8],
        );
        copy_async(
            gs,
            slice_shared(ss, [next % STAGES, 0, 0], [1, BN]),
            [next * 64 / group, bj * BN],
        );
        commit_group();
    }
    dot_wait(0);
    store_global(cast::<f16>(acc), view_global(c, [m, n]), [bi * BM, bj * BN]);
}

/// Threads of a [`gemm_w4t_f16`] block (two warpgroups per 128 weight rows).
pub const fn w4t_threads(bn: usize) -> usize {
    bn * 2
}

/// The text of the wgmma A-fragment layout of a `[bn, 64]` weight tile in [`gemm_w4t_f16`]:
/// `bn / 64` warpgroups, each 64 weight rows by the 4 k steps of 16.
pub fn w4t_fragment_text(bn: usize) -> String {
    format!("spatial({}, 1).spatial(4, 1).local(1, 4).mma_a", bn / 64)
}

/// A [`W4Weight`] re-laid out for [`gemm_w4t_f16`]: for each step of 64 `k` and each block of
/// `bn` weight rows, the `[bn, 64]` tile's codes ordered by thread of the block and, inside a
/// thread, by the local order of the wgmma A fragment (`w4t_fragment_text`), two codes per
/// byte (the even local in the low nibble): `codes[k / 64, n / bn, threads, 16]` bytes. Each
/// thread then loads its 32 codes with one 16-byte access and they are its A fragments as they
/// are (a free `view`). The scales keep their layout.
#[derive(Clone, Debug, PartialEq)]
pub struct W4tWeight {
    pub n: usize,
    pub k: usize,
    pub group: usize,
    /// The block width the codes are laid out for (the kernel's `BN`).
    pub bn: usize,
    pub codes: Vec<u8>,
    pub scales: Vec<f16>,
}

impl W4tWeight {
    /// Re-lay `w` out for blocks of `bn` weight rows; `n` must be a multiple of `bn`, `k` of 64.
    pub fn from_w4(w: &W4Weight, bn: usize) -> Result<W4tWeight, W4Error> {
        if bn == 0 || !bn.is_multiple_of(64) || bn > 256 {
            return Err(arg("bn", format!("{bn} is not 64, 128, 192 or 256")));
        }
        if !w.n.is_multiple_of(bn) {
            return Err(arg(
                "n",
                format!("{} weight rows are not a multiple of the block's {bn}", w.n),
            ));
        }
        let layout = tilus_core::layout::parse(&w4t_fragment_text(bn))
            .map_err(|e| arg("bn", format!("the fragment layout: {e}")))?;
        let threads = w4t_threads(bn);
        let tile = threads * 16;
        let (kt, nt) = (w.k / 64, w.n / bn);
        let mut codes = vec![0u8; kt * nt * tile];
        // The fragment's (row, k) of each thread's 32 codes, once.
        let places: Vec<(usize, usize)> = (0..threads * 32)
            .map(|x| {
                let at = layout.eval(x / 32, x % 32);
                (at[0], at[1])
            })
            .collect();
        for s in 0..kt {
            for b in 0..nt {
                let out = &mut codes[(s * nt + b) * tile..][..tile];
                for (x, &(r, c)) in places.iter().enumerate() {
                    let (row, col) = (b * bn + r, s * 64 + c);
                    let code = (w.codes[row * w.k / 8 + col / 8] >> (4 * (col % 8))) & 15;
                    out[x / 2] |= (code as u8) << (4 * (x % 2));
                }
            }
        }
        Ok(W4tWeight {
            n: w.n,
            k: w.k,
            group: w.group,
            bn,
            codes,
            scales: w.scales.clone(),
        })
    }
}

/// The 4-bit GEMM as the transposed product on wgmma with the weight in registers:
/// `cᵀ[n, m] = W[n, k] · aᵀ`, `c = a · Wᵀ` as [`gemm_w4_f16`]. A block owns `BN` weight rows
/// (`BN / 64` warpgroups) and `BM` activation rows. Per 64 of `k` the copy engine brings the
/// activation tile (`[BM, 64]`, swizzled: wgmma's B operand through `permute_shared`), the
/// weight's codes in the thread order of [`W4tWeight`] and the step's scales into a stage of a
/// ring, on the stage's barrier; each thread loads its 16 bytes of codes, which a `view` makes
/// its A fragments, dequantizes them in registers (`(code - 8) · scale`) and the warpgroup
/// multiplies (`dot_async` with `a` in registers): no shared round trip of the weight. Two
/// register fragments alternate between steps, since the A registers of a wgmma in flight
/// must not be written. The `[BN, BM]` accumulator is stored transposed through shared memory.
/// `n` must be a multiple of `BN` and `k` of 64 (the host format's blocks).
#[tilus::kernel(
    grid = [cdiv(n, BN) * cdiv(m, BM)],
    warps = BN / 16,
    space(BN = [128], BM = [16, 64, 128, 256], STAGES = [4], GROUP = [8]),
)]
#[allow(clippy::too_many_arguments)]
pub fn gemm_w4t_f16<const BN: i32, const BM: i32, const STAGES: i32, const GROUP: i32>(
    m: i32,
    n: i32,
    k: i32,
    group: i32,
    a: Global<f16>,
    w: Global<u8>,
    s: Global<f16>,
    c: GlobalMut<f16>,
) {
    let [pid] = block_indices();
    let rows = cdiv(m, BM);
    let cols = cdiv(n, BN);
    let (bi, bj) = grouped_tile(pid, rows, cols, GROUP);
    let threads = BN * 2;
    let ga = view_global(a, [m, k]);
    let gw = view_global(w, [k / 64, n / BN, threads, 16]);
    let gs = view_global(s, [k / group, n]);
    let sa = shared::<f16>([STAGES, BM, 64], swizzle(3, 3, 3));
    let sq = shared::<u8>([STAGES, threads, 16]);
    let ss = shared::<f16>([STAGES, 1, BN]);
    // A stage is complete when its three copies have landed.
    let full = mbarriers(STAGES, 3);
    let frag = layout!(spatial(BN / 64, 1).spatial(4, 1).local(1, 4).mma_a);
    let raw_layout = layout!(spatial(threads, 1).local(1, 16));
    let scale_layout = layout!(reduce(frag, [1]));
    let mut acc = register::<f32>(
        layout!(spatial(BN / 64, 1).spatial(4, 1).local(1, BM / 8).mma_c),
        0.0,
    );
    let mut wa0 = register::<f16>(frag, 0.0);
    let mut wa1 = register::<f16>(frag, 0.0);
    let steps = k / 64;
    for q in 0..STAGES - 1 {
        if q < steps {
            tma_load(
                ga,
                slice_shared(sa, [q, 0, 0], [BM, 64]),
                [bi * BM, q * 64],
                full,
                q,
            );
            tma_load(
                gw,
                slice_shared(sq, [q, 0, 0], [threads, 16]),
                [q, bj, 0, 0],
                full,
                q,
            );
            tma_load(
                gs,
                slice_shared(ss, [q, 0, 0], [1, BN]),
                [q * 64 / group, bj * BN],
                full,
                q,
            );
        }
    }
    // Even steps dequantize into wa0, odd ones into wa1: a step's fragments are written only
    // after the wgmmas of the step before the last retired. Written out twice so that no
    // dot_async is inside a branch (the verifier's rule; an odd last step is a synchronous dot).
    for t2 in 0..steps / 2 {
        {
            let t = 2 * t2;
            let st = t % STAGES;
            mbarrier_wait(full, st, t / STAGES % 2);
            let raw = load_shared(
                slice_shared(sq, [st, 0, 0], [threads, 16]),
                raw_layout,
                [0, 0],
            );
            let sc = load_shared(
                permute_shared(slice_shared(ss, [st, 0, 0], [1, BN]), [1, 0]),
                scale_layout,
                [0, 0],
            );
            wa0 = (cast::<f16>(view::<u4>(raw, frag)) - 8.0) * sc;
            acc = dot_async(
                wa0,
                permute_shared(slice_shared(sa, [st, 0, 0], [BM, 64]), [1, 0]),
                acc,
            );
            dot_wait(1);
            // Every warpgroup retired step t - 1: refill its stage.
            sync();
            let q = t + STAGES - 1;
            if q < steps {
                let ns = q % STAGES;
                tma_load(
                    ga,
                    slice_shared(sa, [ns, 0, 0], [BM, 64]),
                    [bi * BM, q * 64],
                    full,
                    ns,
                );
                tma_load(
                    gw,
                    slice_shared(sq, [ns, 0, 0], [threads, 16]),
                    [q, bj, 0, 0],
                    full,
                    ns,
                );
                tma_load(
                    gs,
                    slice_shared(ss, [ns, 0, 0], [1, BN]),
                    [q * 64 / group, bj * BN],
                    full,
                    ns,
                );
            }
        }
        {
            let t = 2 * t2 + 1;
            let st = t % STAGES;
            mbarrier_wait(full, st, t / STAGES % 2);
            let raw = load_shared(
                slice_shared(sq, [st, 0, 0], [threads, 16]),
                raw_layout,
                [0, 0],
            );
            let sc = load_shared(
                permute_shared(slice_shared(ss, [st, 0, 0], [1, BN]), [1, 0]),
                scale_layout,
                [0, 0],
            );
            wa1 = (cast::<f16>(view::<u4>(raw, frag)) - 8.0) * sc;
            acc = dot_async(
                wa1,
                permute_shared(slice_shared(sa, [st, 0, 0], [BM, 64]), [1, 0]),
                acc,
            );
            dot_wait(1);
            // Every warpgroup retired step t - 1: refill its stage.
            sync();
            let q = t + STAGES - 1;
            if q < steps {
                let ns = q % STAGES;
                tma_load(
                    ga,
                    slice_shared(sa, [ns, 0, 0], [BM, 64]),
                    [bi * BM, q * 64],
                    full,
                    ns,
                );
                tma_load(
                    gw,
                    slice_shared(sq, [ns, 0, 0], [threads, 16]),
                    [q, bj, 0, 0],
                    full,
                    ns,
                );
                tma_load(
                    gs,
                    slice_shared(ss, [ns, 0, 0], [1, BN]),
                    [q * 64 / group, bj * BN],
                    full,
                    ns,
                );
            }
        }
    }
    dot_wait(0);
    if steps % 2 == 1 {
        // The odd last step: a synchronous dot, since nothing may be in flight across a branch.
        let t = steps - 1;
        let st = t % STAGES;
        mbarrier_wait(full, st, t / STAGES % 2);
        let raw = load_shared(
            slice_shared(sq, [st, 0, 0], [threads, 16]),
            raw_layout,
            [0, 0],
        );
        let sc = load_shared(
            permute_shared(slice_shared(ss, [st, 0, 0], [1, BN]), [1, 0]),
            scale_layout,
            [0, 0],
        );
        wa0 = (cast::<f16>(view::<u4>(raw, frag)) - 8.0) * sc;
        acc = dot(
            wa0,
            permute_shared(slice_shared(sa, [st, 0, 0], [BM, 64]), [1, 0]),
            acc,
        );
    }
    // cᵀ tile -> c: through shared memory, 8 consecutive columns of c per thread.
    let ct = shared::<f16>([BN, BM]);
    store_shared(cast::<f16>(acc), ct, [0, 0]);
    sync();
    let out = load_shared(
        permute_shared(ct, [1, 0]),
        layout!(local(BM / 16, 1).spatial(16, BN / 8).local(1, 8)),
        [0, 0],
    );
    store_global(out, view_global(c, [m, n]), [bi * BM, bj * BN]);
}
