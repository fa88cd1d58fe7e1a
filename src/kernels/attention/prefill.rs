//! Causal prefill attention (FlashAttention-2 on `mma.sync`), written with `#[kernel]`.
//!
//! A ragged batch ("varlen", as flash-attn's varlen API): `cu_seqlens [batch + 1]` holds the
//! prefix offsets of the sequences in the token dimension of `q [tokens, q_heads, D]`,
//! `k, v [tokens, kv_heads, D]` and `o [tokens, q_heads, D]`. Query `r` of a sequence attends
//! keys `0..=r` of the same sequence; query head `i` reads KV head `i / (q_heads / kv_heads)`.
//! Scores and the softmax are in f32, `P` is rounded to the input type for `P · V`, and the
//! output is rounded once from the f32 accumulator. Layouts and pipeline: `docs/attention.md`.

/// One block: `BM` queries (16 per warp) of one head of one sequence, against `BN`-key tiles
/// of K and V streamed through a `STAGES`-deep cp.async pipeline. `S = Q · K^T` accumulates
/// over `D / KC` chunks of the head dimension (Q stays in registers as up to 4 chunks), and
/// `O += P · V` over `D / DC` column chunks of V and O (up to 4 accumulators): knobs on how
/// much of a `[BN, D]` fragment is live at once (ptxas keeps even the unchunked D = 128
/// spill-free). `KC` (a multiple of 16) and `DC` (of 8) must divide `D` into at most 4 chunks.
///
/// Parameters: `batch`, `max_seqlen` (grid only), `tokens` (the extent of the token
/// dimension), `q_heads`, `kv_heads`, `scale` (of the scores, before the softmax),
/// `cu_seqlens [batch + 1]`, `q`, `k`, `v`, `o` as above. `OCC` is the occupancy hint
/// (`blocks_per_sm`).
#[tilus::kernel(
    lazy,
    grid = [cdiv(max_seqlen, BM), q_heads, batch],
    warps = BM / 16,
    blocks_per_sm = OCC,
    target = sm80,
    space(
        BM = [64, 128],
        BN = [64],
        D = [64, 128],
        KC = [32],
        DC = [32],
        STAGES = [2, 3],
        OCC = [1],
    ),
    dtypes(A = [f16, bf16]),
)]
#[allow(clippy::too_many_arguments)]
pub fn prefill_attention_kernel<
    const BM: i32,
    const BN: i32,
    const D: i32,
    const KC: i32,
    const DC: i32,
    const STAGES: i32,
    const OCC: i32,
    A: DTypeParam,
>(
    batch: i32,
    max_seqlen: i32,
    tokens: i32,
    q_heads: i32,
    kv_heads: i32,
    scale: f32,
    cu_seqlens: Global<i32>,
    q: Global<A>,
    k: Global<A>,
    v: Global<A>,
    o: GlobalMut<A>,
) {
    let nw = BM / 16;
    // Warp w owns query rows 16w..16w+16 of every [BM, *] tile; K and V fragments are
    // replicated over the warps (each warp multiplies its rows by the whole tile).
    let lq = layout!(spatial(nw, 1).local(1, KC / 16).mma_a);
    let ls = layout!(spatial(nw, 1).local(1, BN / 8).mma_c);
    let lrow = layout!(reduce(ls, [1]));
    // K [BN, KC] in shared memory, loaded so that each thread holds pairs of consecutive d
    // (plain ldmatrix); the same registers in the same order are the B fragment of K^T.
    let lk = layout!(replicated(nw).column_local(BN / 8, KC / 16).mma_b_t);
    let lkt = layout!(replicated(nw).local(KC / 16, BN / 8).mma_b);
    // Two adjacent n-tiles of the S fragment are one A fragment of P (same local order).
    let lp = layout!(spatial(nw, 1).local(1, BN / 16).mma_a);
    let lv = layout!(replicated(nw).local(BN / 16, DC / 8).mma_b);
    let lo = layout!(spatial(nw, 1).local(1, DC / 8).mma_c);
    // The output tile staged through shared memory for 16-byte row stores.
    let lout = layout!(local(D / 16, 1).spatial(16 * BM / D, D / 8).local(1, 8));
    let nq = D / KC;
    let no = D / DC;
    // At most 4 chunks of each (the tensors q_0..q_3, o_0..o_3 below): more fail here, at
    // instantiation ("extent must be positive"), instead of computing with chunks missing.
    let _at_most_4_chunks = layout!(local(max(0, 5 - nq), max(0, 5 - no)));
    // Rows of 64 elements (128 bytes) swizzle with shift 3, rows of 128 with shift 4: the XOR
    // takes the 16-byte chunk index from the row index.
    let sws = if D == 128 { 4 } else { 3 };

    let [bx, h, b] = block_indices();
    // The last query blocks of a sequence have the most keys: launch them first, so that the
    // short ones fill the tail of the grid (causal work is a triangle).
    let bi = cdiv(max_seqlen, BM) - 1 - bx;
    let gcu = view_global(cu_seqlens, [batch + 1]);
    let start = item(load_global(gcu, layout!(local(1)), [b]));
    // Clamped so that a bad offset on the device can never address past the buffers.
    let end = min(item(load_global(gcu, layout!(local(1)), [b + 1])), tokens);
    let len = end - start;
    let q0 = bi * BM;
    if q0 >= len {
        exit();
    }
    let kvh = h / (q_heads / kv_heads);
    // Views end at the sequence's last token: loads past it read zeros, stores are dropped.
    let gq = view_global(q, [end, q_heads * D]);
    let gk = view_global(k, [end, kv_heads * D]);
    let gv = view_global(v, [end, kv_heads * D]);
    let go = view_global(o, [end, q_heads * D]);

    let sq = shared::<A>([BM, D], swizzle(3, 3, sws));
    let sk = shared::<A>([STAGES, BN, D], swizzle(3, 3, sws));
    let sv = shared::<A>([STAGES, BN, D], swizzle(3, 3, sws));

    // Keys the block needs (causal: up to its last query) and how many tiles of them lie
    // wholly at or before its first query (no mask needed).
    let kv_len = min(q0 + BM, len);
    let ntiles = cdiv(kv_len, BN);
    let nfull = (q0 + 1) / BN;

    copy_async(gq, sq, [start + q0, h * D]);
    commit_group();
    let issue = |tile: i32, stage: i32| {
        let row = start + tile * BN;
        copy_async(gk, slice_shared(sk, [stage, 0, 0], [BN, D]), [row, kvh * D]);
        copy_async(gv, slice_shared(sv, [stage, 0, 0], [BN, D]), [row, kvh * D]);
    };
    // Prologue: STAGES - 1 tiles in flight, one commit group each (empty past the end, so
    // that the wait counts stay exact).
    #[unroll]
    for st in 0..STAGES - 1 {
        if st < ntiles {
            issue(st, st);
        }
        commit_group();
    }
    // Q has landed once the STAGES - 1 newer groups may still be in flight.
    wait_group(STAGES - 1);
    sync();
    let load_q = |c: i32| load_shared(sq, lq, [0, c * KC]);
    let q_0 = load_q(0);
    let q_1 = if nq > 1 { load_q(1) } else { () };
    let q_2 = if nq > 2 { load_q(2) } else { () };
    let q_3 = if nq > 3 { load_q(3) } else { () };

    // Scores in log2 units: exp2(s · scale · log2 e - m) = exp(scale · s - m').
    let qk_scale = scale * 1.4426950408889634;
    let mut m = register::<f32>(lrow, -1.0e30);
    let mut l = register::<f32>(lrow, 0.0);
    let mut o_0 = register::<f32>(lo, 0.0);
    let mut o_1 = if no > 1 { register::<f32>(lo, 0.0) } else { () };
    let mut o_2 = if no > 2 { register::<f32>(lo, 0.0) } else { () };
    let mut o_3 = if no > 3 { register::<f32>(lo, 0.0) } else { () };

    // One KV tile: wait for it, refill the stage read in the previous step, S = Q K^T, the
    // online softmax update, O = O · alpha + P V. `masked` (a constant) applies the causal
    // mask, needed only on the tiles that reach past the block's first query.
    let step = |j: i32, masked: bool| {
        wait_group(STAGES - 2);
        sync();
        let stage = j % STAGES;
        let next = j + (STAGES - 1);
        if next < ntiles {
            issue(next, next % STAGES);
        }
        commit_group();
        let kt = slice_shared(sk, [stage, 0, 0], [BN, D]);
        let vt = slice_shared(sv, [stage, 0, 0], [BN, D]);
        let k_chunk = |c: i32| view::<A>(load_shared(kt, lk, [0, c * KC]), lkt);
        let mut s = register::<f32>(ls, 0.0);
        s = dot(q_0, k_chunk(0), s);
        if nq > 1 {
            s = dot(q_1, k_chunk(1), s);
        }
        if nq > 2 {
            s = dot(q_2, k_chunk(2), s);
        }
        if nq > 3 {
            s = dot(q_3, k_chunk(3), s);
        }
        s = s * qk_scale;
        if masked {
            let key = arange(ls, 1, j * BN);
            let query = arange(ls, 0, q0);
            s = select(le(key, query), s, f32::NEG_INFINITY);
        }
        let m_new = max(m, reduce_max(s, 1));
        let p = exp2(s - m_new);
        let alpha = exp2(m - m_new);
        l = l * alpha + sum(p, 1);
        m = m_new;
        let pa = view::<A>(cast::<A>(p), lp);
        let v_chunk = |c: i32| load_shared(vt, lv, [0, c * DC]);
        o_0 = dot(pa, v_chunk(0), o_0 * alpha);
        if no > 1 {
            o_1 = dot(pa, v_chunk(1), o_1 * alpha);
        }
        if no > 2 {
            o_2 = dot(pa, v_chunk(2), o_2 * alpha);
        }
        if no > 3 {
            o_3 = dot(pa, v_chunk(3), o_3 * alpha);
        }
    };
    for j in 0..nfull {
        step(j, false);
    }
    for j in nfull..ntiles {
        step(j, true);
    }
    wait_group(0);

    // O / l, staged through the Q tile (every warp is done with it) for row-wise stores.
    let inv_l = 1.0 / max(l, 1.0e-30);
    let put = |c: i32, oc: Tensor| {
        store_shared(cast::<A>(oc * inv_l), sq, [0, c * DC]);
    };
    put(0, o_0);
    if no > 1 {
        put(1, o_1);
    }
    if no > 2 {
        put(2, o_2);
    }
    if no > 3 {
        put(3, o_3);
    }
    sync();
    store_global(load_shared(sq, lout, [0, 0]), go, [start + q0, h * D]);
}

use crate::macro_support::KernelError;
use crate::DType;
use tilus_core::ir::Program;
use tilus_runtime::{Context, DeviceRead, DeviceWrite, KernelArg, KernelArgMut};

/// A configuration of [`prefill_attention_kernel`]: tiles `BM` (queries, 16 per warp) and `BN`
/// (keys), the head dimension `D`, the chunks `KC` (of D in `Q · K^T`) and `DC` (of D in
/// `P · V`), `STAGES` of the K/V pipeline, the occupancy hint `OCC` (blocks per SM the
/// compiler keeps registers low enough for; 1: no limit), and the element type `A`.
pub type PrefillConfig = prefill_attention_kernel::Config;

const KERNEL: &str = "prefill_attention";

fn bad(config: String, message: String) -> KernelError {
    KernelError::BadArgument {
        kernel: KERNEL,
        config,
        message,
    }
}

fn check_dtype_dim(head_dim: usize, dtype: DType) -> Result<(), KernelError> {
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(bad(
            "-".into(),
            format!("dtype = {dtype}: prefill attention runs on f16 or bf16"),
        ));
    }
    if head_dim != 64 && head_dim != 128 {
        return Err(bad(
            "-".into(),
            format!("head_dim = {head_dim}: supported head dimensions are 64 and 128"),
        ));
    }
    Ok(())
}

fn config(bm: i32, stages: i32, chunk: i32, d: usize, dtype: DType) -> PrefillConfig {
    PrefillConfig {
        BM: bm,
        BN: 64,
        D: d as i32,
        KC: chunk,
        DC: chunk,
        STAGES: stages,
        OCC: 1,
        A: dtype,
    }
}

/// The configurations worth sweeping for head dimension `d` (64 or 128) and `dtype` (f16 or
/// bf16), 64-key tiles each: 128 or 64 queries per block (8 or 4 warps) with 2 or 3 pipeline
/// stages and D in chunks of 32 (these four are the space checked when the crate is built),
/// then 128 queries with chunks of 64 and, at D = 128, unchunked (instantiated on first use;
/// `tests/codegen_cuda.rs` checks that every one compiles without spills). The first is
/// [`default_config`]. `OCC` stays 1: at D = 64, `BM = 64` holds three blocks per SM by its
/// registers anyway, and `OCC = 4` (128 registers) spills a few bytes.
pub fn prefill_configs(d: usize, dtype: DType) -> Result<Vec<PrefillConfig>, KernelError> {
    let first = default_config(d, dtype)?;
    let mut v = vec![first];
    for (bm, st) in [(128, 3), (128, 2), (64, 3), (64, 2)] {
        let c = config(bm, st, 32, d, dtype);
        if c != first {
            v.push(c);
        }
    }
    v.push(config(128, 3, 64, d, dtype));
    if d == 128 {
        v.push(config(128, 3, 128, d, dtype));
    }
    Ok(v)
}

/// The default configuration for head dimension `d`, chunks of 32: at D = 128, 64 queries on
/// 4 warps and 3 stages (measured on the H100 at the issue's shapes: 485 us against 540 us for
/// 128 queries at 4096 tokens, 3531 against 3709 at 8192; more blocks per query row beat the
/// halved L2 traffic of 128 queries); at D = 64, 128 queries on 8 warps and 3 stages.
pub fn default_config(d: usize, dtype: DType) -> Result<PrefillConfig, KernelError> {
    check_dtype_dim(d, dtype)?;
    Ok(if d == 128 {
        config(64, 3, 32, d, dtype)
    } else {
        config(128, 3, 32, d, dtype)
    })
}

/// The verified program of `cfg` (instantiated on first use and cached).
pub fn program(cfg: &PrefillConfig) -> Result<Program, KernelError> {
    prefill_attention_kernel::program(cfg)
}

/// The shape of one call: the ragged batch and the heads.
#[derive(Clone, Copy, Debug)]
pub struct PrefillShape<'a> {
    /// `batch + 1` non-decreasing token offsets (flash-attn's varlen `cu_seqlens`), on the
    /// host: sequence `b` is tokens `cu_seqlens[b]..cu_seqlens[b + 1]`.
    pub cu_seqlens: &'a [i32],
    pub q_heads: usize,
    pub kv_heads: usize,
    /// 64 or 128.
    pub head_dim: usize,
    /// f16 or bf16: the element type of q, k, v and o.
    pub dtype: DType,
    /// The softmax scale of the scores (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
}

/// The kernel's scalar arguments, checked.
#[derive(Clone, Copy, Debug)]
struct Checked {
    cfg: PrefillConfig,
    batch: i32,
    max_seqlen: i32,
    tokens: i32,
    q_heads: i32,
    kv_heads: i32,
}

/// Checks `shape` and the byte lengths of q, k, v and o (and the device `cu_seqlens`' length
/// when given), picks the configuration; every error names the argument.
fn check(
    cfg: Option<&PrefillConfig>,
    s: &PrefillShape,
    bytes: [usize; 4],
    cu_len: usize,
) -> Result<Checked, KernelError> {
    check_dtype_dim(s.head_dim, s.dtype)?;
    let cfg = match cfg {
        Some(c) => *c,
        None => default_config(s.head_dim, s.dtype)?,
    };
    // The configuration's name is formatted only for an error: a good call allocates nothing.
    let e = |m: String| bad(cfg.to_string(), m);
    if cfg.D as usize != s.head_dim || cfg.A != s.dtype {
        return Err(e(format!(
            "config is for D = {}, {} but head_dim = {}, dtype = {}",
            cfg.D, cfg.A, s.head_dim, s.dtype
        )));
    }
    let chunks = |c: i32, m: i32| c > 0 && c % m == 0 && cfg.D % c == 0 && cfg.D / c <= 4;
    if !chunks(cfg.KC, 16) || !chunks(cfg.DC, 8) {
        return Err(e(format!(
            "config: KC = {} (a multiple of 16) and DC = {} (of 8) must divide D = {} into at most 4 chunks",
            cfg.KC, cfg.DC, cfg.D
        )));
    }
    if s.q_heads == 0 || s.kv_heads == 0 {
        return Err(e(format!(
            "q_heads = {} and kv_heads = {} must both be positive",
            s.q_heads, s.kv_heads
        )));
    }
    if !s.q_heads.is_multiple_of(s.kv_heads) {
        return Err(e(format!(
            "q_heads = {} is not a multiple of kv_heads = {}",
            s.q_heads, s.kv_heads
        )));
    }
    // Grid dimensions y and z are at most 65535.
    if s.q_heads > 65535 {
        return Err(e(format!("q_heads = {} exceeds 65535", s.q_heads)));
    }
    if !s.scale.is_finite() {
        return Err(e(format!("scale = {} is not finite", s.scale)));
    }
    let cu = s.cu_seqlens;
    if cu.len() < 2 {
        return Err(e(format!(
            "cu_seqlens has {} entries; it needs batch + 1 >= 2",
            cu.len()
        )));
    }
    let batch = cu.len() - 1;
    if batch > 65535 {
        return Err(e(format!(
            "cu_seqlens describes {batch} sequences; at most 65535 are supported"
        )));
    }
    if cu[0] < 0 {
        return Err(e(format!("cu_seqlens[0] = {} is negative", cu[0])));
    }
    let mut max_seqlen = 0;
    for (i, w) in cu.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(e(format!(
                "cu_seqlens is not non-decreasing: cu_seqlens[{}] = {} < cu_seqlens[{i}] = {}",
                i + 1,
                w[1],
                w[0]
            )));
        }
        max_seqlen = max_seqlen.max(w[1] - w[0]);
    }
    let tokens = cu[batch] as usize;
    let esize = 2;
    let row = |heads: usize| heads * s.head_dim;
    // Rows of q and o ([tokens, q_heads * head_dim]) are indexed with i32 strides.
    for (what, heads) in [("q_heads", s.q_heads), ("kv_heads", s.kv_heads)] {
        if i32::try_from(row(heads)).is_err() {
            return Err(e(format!(
                "{what} = {heads}: a token's row of {heads} x {} elements does not fit an i32",
                s.head_dim
            )));
        }
    }
    for ((what, heads), have) in [
        ("q", s.q_heads),
        ("k", s.kv_heads),
        ("v", s.kv_heads),
        ("o", s.q_heads),
    ]
    .into_iter()
    .zip(bytes)
    {
        let need = tokens
            .checked_mul(row(heads))
            .and_then(|n| n.checked_mul(esize))
            .ok_or_else(|| e(format!("{what}: {tokens} tokens overflow usize")))?;
        if have < need {
            return Err(e(format!(
                "{what} holds {have} bytes, but {tokens} tokens x {heads} heads x {} x {} need {need}",
                s.head_dim, s.dtype
            )));
        }
    }
    if cu_len < cu.len() * 4 {
        return Err(e(format!(
            "the device cu_seqlens holds {cu_len} bytes, fewer than the {} of batch + 1 = {} offsets",
            cu.len() * 4,
            cu.len()
        )));
    }
    Ok(Checked {
        cfg,
        batch: batch as i32,
        max_seqlen,
        tokens: cu[batch],
        q_heads: s.q_heads as i32,
        kv_heads: s.kv_heads as i32,
    })
}

/// Causal attention of a ragged batch on the GPU: `o = softmax(scale · q k^T + causal mask) v`
/// per sequence and query head, with grouped-query KV heads. `q`, `o`: `[tokens, q_heads,
/// head_dim]`, `k`, `v`: `[tokens, kv_heads, head_dim]` of `shape.dtype`, as bytes;
/// `cu_seqlens` is the device copy of `shape.cu_seqlens` (the kernel reads the offsets from
/// it; the host copy gives the grid and is checked). `cfg: None` picks [`default_config`].
/// Checks every argument before launching (errors name it), allocates nothing; returns when
/// the work is queued on `ctx`'s stream.
#[allow(clippy::too_many_arguments)]
pub fn prefill_attention(
    ctx: &Context,
    cfg: Option<&PrefillConfig>,
    shape: &PrefillShape,
    cu_seqlens: &impl DeviceRead<i32>,
    q: &impl DeviceRead<u8>,
    k: &impl DeviceRead<u8>,
    v: &impl DeviceRead<u8>,
    o: &mut impl DeviceWrite<u8>,
) -> Result<(), KernelError> {
    let bytes = [
        KernelArg::size_bytes(q),
        KernelArg::size_bytes(k),
        KernelArg::size_bytes(v),
        KernelArgMut::size_bytes(o),
    ];
    let c = check(cfg, shape, bytes, KernelArg::size_bytes(cu_seqlens))?;
    if c.max_seqlen == 0 {
        return Ok(()); // only empty sequences: nothing to write
    }
    prefill_attention_kernel::launch(
        ctx,
        &c.cfg,
        c.batch,
        c.max_seqlen,
        c.tokens,
        c.q_heads,
        c.kv_heads,
        shape.scale,
        cu_seqlens,
        q,
        k,
        v,
        o,
    )
}

/// [`prefill_attention`] on the CPU interpreter (the oracle), with host byte slices; the
/// offsets come from `shape.cu_seqlens`.
pub fn prefill_attention_cpu(
    cfg: Option<&PrefillConfig>,
    shape: &PrefillShape,
    q: &[u8],
    k: &[u8],
    v: &[u8],
    o: &mut [u8],
) -> Result<(), KernelError> {
    let bytes = [q.len(), k.len(), v.len(), o.len()];
    let c = check(cfg, shape, bytes, shape.cu_seqlens.len() * 4)?;
    if c.max_seqlen == 0 {
        return Ok(());
    }
    prefill_attention_kernel::interpret(
        &c.cfg,
        c.batch,
        c.max_seqlen,
        c.tokens,
        c.q_heads,
        c.kv_heads,
        shape.scale,
        shape.cu_seqlens,
        q,
        k,
        v,
        o,
    )
}
