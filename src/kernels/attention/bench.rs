//! GPU measurements of decode attention (`tilus bench attention`): one decode step of a batch
//! of equally long sequences over a paged (or contiguous) cache of random values, timed with
//! CUDA events after an L2 flush, against the bytes it must move (K, V, Q and O; the block
//! table is counted too) and the copy bandwidth. `bench/torch_attention.py` measures torch's
//! `scaled_dot_product_attention` the same way and prints the same table.

use super::decode::{CacheLayout, DecodeAttention, DecodeShape, DecodeTuning, KvCache, KvFormat};
use crate::element::Activation;
use crate::kernels::timing::time_launches;
use tilus_runtime::{Context, DeviceBuffer, L2Flush, L2Mode, Timing};

/// One measured decode step.
#[derive(Clone, Debug)]
pub struct DecodeBench {
    pub batch: usize,
    pub kv_len: usize,
    pub shape: DecodeShape,
    pub tuning: DecodeTuning,
    pub splits: usize,
    pub timing: Timing,
    /// Bytes read plus written by one step.
    pub bytes: usize,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A device buffer of `len` values made by `gen` from a seeded LCG word: a random chunk made on
/// the host, copied over the buffer on the device (caches of tens of GB fill in milliseconds).
fn random_with<E: tilus_runtime::Element + Copy>(
    ctx: &Context,
    len: usize,
    seed: u64,
    gen: impl Fn(u64) -> E,
) -> Result<DeviceBuffer<E>, String> {
    let chunk_len = len.clamp(1, 1 << 22);
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let host: Vec<E> = (0..chunk_len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            gen(s >> 40)
        })
        .collect();
    let chunk = DeviceBuffer::from_host(ctx, &host).map_err(err)?;
    let mut buf = DeviceBuffer::<E>::zeros(ctx, len).map_err(err)?;
    let stream = ctx.stream().clone();
    let mut at = 0;
    while at < len {
        let n = chunk_len.min(len - at);
        let mut dst = buf.cuda_slice_mut().slice_mut(at..at + n);
        stream
            .memcpy_dtod(&chunk.cuda_slice().slice(0..n), &mut dst)
            .map_err(err)?;
        at += n;
    }
    Ok(buf)
}

/// Values in `[-1, 1)`.
fn random<T: Activation>(ctx: &Context, len: usize, seed: u64) -> Result<DeviceBuffer<T>, String> {
    random_with(ctx, len, seed, |w| {
        T::from_f32((w as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
    })
}

/// What `tilus bench attention` measures.
#[derive(Clone, Debug)]
pub struct DecodeBenchSpec {
    pub batches: Vec<usize>,
    pub kv_lens: Vec<usize>,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Tokens per page; 0 for a contiguous cache.
    pub page_size: usize,
    pub kv: KvFormat,
    /// Timed runs per point (after 3 warm-ups), each after an L2 flush leaving L2 as `l2` says.
    pub runs: usize,
    pub l2: L2Mode,
    /// Measure each point with each of [`sweep_tunings`], not only the default.
    pub sweep: bool,
}

/// Time decode steps of `batch` sequences of `kv_len` tokens each, for each batch size and
/// length of `spec`, over a cache of random values (quantized caches: random codes of small
/// magnitude and random scales).
pub fn bench_decode<T: Activation>(
    ctx: &Context,
    spec: &DecodeBenchSpec,
) -> Result<Vec<DecodeBench>, String> {
    let el = std::mem::size_of::<T>();
    let mut flush = L2Flush::with_mode(ctx, spec.l2).map_err(err)?;
    let mut out = Vec::new();
    let (q_heads, kv_heads, head_dim) = (spec.q_heads, spec.kv_heads, spec.head_dim);
    for &batch in &spec.batches {
        for &kv_len in &spec.kv_lens {
            let cache = if spec.page_size == 0 {
                CacheLayout::Contiguous { max_len: kv_len }
            } else {
                let max_pages = kv_len.div_ceil(spec.page_size);
                CacheLayout::Paged {
                    pages: batch * max_pages,
                    page_size: spec.page_size,
                    max_pages,
                }
            };
            let shape = DecodeShape {
                batch,
                q_heads,
                kv_heads,
                head_dim,
                cache,
                kv: spec.kv,
            };
            let scale = 1.0 / (head_dim as f32).sqrt();
            let q = random::<T>(ctx, shape.q_len(), 1)?;
            let cache_bytes = shape.cache_bytes(T::DTYPE);
            // Codes of small magnitude (no NaN codes in any 8-bit format); scales near 0.02.
            let (k, v) = (
                random_with(ctx, cache_bytes, 2, |w| (w & 0x3f) as u8)?,
                random_with(ctx, cache_bytes, 3, |w| (w & 0x3f) as u8)?,
            );
            let meta = match spec.kv {
                KvFormat::Quantized(_) => Some((
                    random_with(ctx, shape.meta_len(), 4, |w| 0.01 + (w % 97) as f32 * 1e-4)?,
                    random_with(ctx, shape.meta_len(), 5, |w| 0.01 + (w % 89) as f32 * 1e-4)?,
                )),
                KvFormat::Activation => None,
            };
            // An activation-type cache: random values (not the bytes above).
            let (kt, vt) = match spec.kv {
                KvFormat::Activation => (
                    Some(random::<T>(ctx, shape.cache_len(), 2)?),
                    Some(random::<T>(ctx, shape.cache_len(), 3)?),
                ),
                KvFormat::Quantized(_) => (None, None),
            };
            // Pages in order: sequence b owns pages b · max_pages ..
            let table = match cache {
                CacheLayout::Paged { max_pages, .. } => Some(
                    DeviceBuffer::from_host(
                        ctx,
                        &(0..(batch * max_pages) as i32).collect::<Vec<_>>(),
                    )
                    .map_err(err)?,
                ),
                CacheLayout::Contiguous { .. } => None,
            };
            let lens = DeviceBuffer::from_host(ctx, &vec![kv_len as i32; batch]).map_err(err)?;
            let mut o = DeviceBuffer::<T>::zeros(ctx, shape.q_len()).map_err(err)?;
            let tunings = if spec.sweep {
                sweep_tunings(&shape)
            } else {
                vec![None]
            };
            for tuning in &tunings {
                let mut attn =
                    DecodeAttention::new(shape.clone(), scale, None, kv_len).map_err(err)?;
                if let Some(t) = tuning {
                    attn = attn.with_tuning(*t).map_err(err)?;
                }
                let mut step = || match (&kt, &vt) {
                    (Some(kt), Some(vt)) => {
                        let c: KvCache<'_, _, DeviceBuffer<f32>, _> = KvCache {
                            k: kt,
                            v: vt,
                            meta: None,
                            block_table: table.as_ref(),
                            seq_lens: &lens,
                        };
                        attn.run(ctx, &q, &c, &mut o)
                    }
                    _ => {
                        let c = KvCache {
                            k: &k,
                            v: &v,
                            meta: meta.as_ref().map(|(a, b)| (a, b)),
                            block_table: table.as_ref(),
                            seq_lens: &lens,
                        };
                        attn.run(ctx, &q, &c, &mut o)
                    }
                };
                let timing = time_launches(ctx, &mut flush, spec.runs, || step().map_err(err))?;
                let splits = attn
                    .plan_for::<T>(ctx.device().multiprocessors as usize)
                    .map_err(err)?
                    .splits;
                let table_bytes = match cache {
                    CacheLayout::Paged { page_size, .. } => batch * kv_len.div_ceil(page_size) * 4,
                    CacheLayout::Contiguous { .. } => 0,
                };
                // K and V (codes and their scales), Q and O, the block table and lengths.
                let per_token = (2 * kv_heads * head_dim * spec.kv.bits(T::DTYPE)).div_ceil(8)
                    + match spec.kv {
                        KvFormat::Quantized(_) => 2 * kv_heads * 8,
                        KvFormat::Activation => 0,
                    };
                out.push(DecodeBench {
                    batch,
                    kv_len,
                    shape: shape.clone(),
                    tuning: *attn.tuning(),
                    splits,
                    timing,
                    bytes: batch * kv_len * per_token
                        + 2 * batch * q_heads * head_dim * el
                        + table_bytes
                        + batch * 4,
                });
            }
        }
    }
    Ok(out)
}

/// The table `tilus bench attention` prints (the same columns as `bench/torch_attention.py`).
pub fn table(
    copy_gbps: f64,
    dtype: &str,
    cache: &str,
    l2: L2Mode,
    results: &[DecodeBench],
) -> String {
    let kv = match results.first().map(|r| r.shape.kv) {
        Some(KvFormat::Quantized(t)) => format!("{t} KV cache (+ f32 scale, zero per token)"),
        _ => format!("{dtype} KV cache"),
    };
    let l2 = l2.label();
    let mut s = format!(
        "tilus decode attention, {dtype}, {kv}, {cache}, L2 flushed {l2}; copy bandwidth \
         {copy_gbps:.0} GB/s (1 GiB); %floor = bandwidth / that\n\
         {:<6} {:>8} {:>13} {:>16} {:>7} {:>10} {:>8} {:>7}\n",
        "batch",
        "kv_len",
        "heads q/kv/d",
        "tile/w/st/occ/wv",
        "splits",
        "time us",
        "GB/s",
        "%floor"
    );
    for r in results {
        let gbps = r.timing.gb_per_s(r.bytes as f64);
        s += &format!(
            "{:<6} {:>8} {:>13} {:>16} {:>7} {:>10.1} {:>8.0} {:>6.1}%\n",
            r.batch,
            r.kv_len,
            format!(
                "{}/{}/{}",
                r.shape.q_heads, r.shape.kv_heads, r.shape.head_dim
            ),
            {
                let t = &r.tuning;
                format!(
                    "{}/{}/{}/{}/{}",
                    t.tile, t.warps, t.stages, t.blocks_per_sm, t.waves
                )
            },
            r.splits,
            r.timing.median_us,
            gbps,
            100.0 * gbps / copy_gbps
        );
    }
    s
}

/// The tunings `tilus bench attention --sweep` measures for `shape`: the default, deeper
/// pipelines, fewer warps per block (more blocks resident), shorter tiles, two waves.
pub fn sweep_tunings(shape: &DecodeShape) -> Vec<Option<DecodeTuning>> {
    let d = DecodeTuning::default_for(shape);
    let mut v = vec![None];
    for t in [
        DecodeTuning { stages: 4, ..d },
        DecodeTuning { stages: 6, ..d },
        DecodeTuning {
            warps: 2,
            blocks_per_sm: 4,
            ..d
        },
        DecodeTuning {
            warps: 2,
            stages: 4,
            blocks_per_sm: 4,
            ..d
        },
        DecodeTuning {
            blocks_per_sm: 3,
            stages: 4,
            ..d
        },
        DecodeTuning {
            tile: 16,
            stages: 6,
            blocks_per_sm: 3,
            ..d
        },
        DecodeTuning {
            tile: 16,
            stages: 8,
            blocks_per_sm: 3,
            ..d
        },
        DecodeTuning { waves: 2, ..d },
        DecodeTuning {
            warps: 1,
            blocks_per_sm: 6,
            ..d
        },
        DecodeTuning {
            warps: 2,
            blocks_per_sm: 5,
            ..d
        },
        DecodeTuning {
            warps: 4,
            blocks_per_sm: 2,
            ..d
        },
    ] {
        v.push(Some(t));
    }
    v
}

/// A prefill shape: batch, tokens per sequence, query heads, KV heads, head dim.
pub type PrefillBenchShape = (usize, usize, usize, usize, usize);

/// One measured causal prefill.
#[derive(Clone, Debug)]
pub struct PrefillBench {
    pub batch: usize,
    pub tokens: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub config: String,
    pub timing: Timing,
}

impl PrefillBench {
    /// The causal attention's multiply-adds, counted as FlashAttention does: `4 · n² · d` per
    /// query head and sequence for full attention, half of it causal.
    pub fn flops(&self) -> f64 {
        2.0 * (self.batch * self.tokens * self.tokens * self.head_dim * self.q_heads) as f64
    }

    pub fn tflops(&self) -> f64 {
        self.flops() / self.timing.median_us * 1e-6
    }
}

/// Time causal prefills of `batch` sequences of `tokens` tokens each with `q_heads` /
/// `kv_heads` heads of `head_dim` (f16 or bf16 `T`), random inputs, `runs` timed runs after 3
/// warm-ups, each after an L2 flush as `l2` says; with `sweep`, every configuration of
/// [`super::prefill::prefill_configs`], else the default.
#[allow(clippy::too_many_arguments)]
pub fn bench_prefill<T: Activation>(
    ctx: &Context,
    shapes: &[PrefillBenchShape],
    runs: usize,
    l2: L2Mode,
    sweep: bool,
) -> Result<Vec<PrefillBench>, String> {
    use super::prefill::{default_config, prefill_attention, prefill_configs, PrefillShape};
    let el = std::mem::size_of::<T>();
    let mut flush = L2Flush::with_mode(ctx, l2).map_err(err)?;
    let mut out = Vec::new();
    for &(batch, tokens, q_heads, kv_heads, head_dim) in shapes {
        let cu: Vec<i32> = (0..=batch).map(|b| (b * tokens) as i32).collect();
        let n = batch * tokens;
        // The kernel takes bytes: random values of T, as bytes (two per f16/bf16 value).
        let bytes = |len: usize, seed: u64| -> Result<DeviceBuffer<u8>, String> {
            let vals = random::<T>(ctx, len, seed)?.to_host().map_err(err)?;
            DeviceBuffer::from_host(ctx, &T::to_bytes(&vals)).map_err(err)
        };
        let qb = bytes(n * q_heads * head_dim, 11)?;
        let kb = bytes(n * kv_heads * head_dim, 12)?;
        let vb = bytes(n * kv_heads * head_dim, 13)?;
        let mut ob = DeviceBuffer::<u8>::zeros(ctx, n * q_heads * head_dim * el).map_err(err)?;
        let dcu = DeviceBuffer::from_host(ctx, &cu).map_err(err)?;
        let shape = PrefillShape {
            cu_seqlens: &cu,
            q_heads,
            kv_heads,
            head_dim,
            dtype: T::DTYPE,
            scale: 1.0 / (head_dim as f32).sqrt(),
        };
        let configs = if sweep {
            prefill_configs(head_dim, T::DTYPE).map_err(err)?
        } else {
            vec![default_config(head_dim, T::DTYPE).map_err(err)?]
        };
        for cfg in configs {
            let mut run =
                || prefill_attention(ctx, Some(&cfg), &shape, &dcu, &qb, &kb, &vb, &mut ob);
            let timing = time_launches(ctx, &mut flush, runs, || run().map_err(err))?;
            out.push(PrefillBench {
                batch,
                tokens,
                q_heads,
                kv_heads,
                head_dim,
                config: cfg.to_string(),
                timing,
            });
        }
    }
    Ok(out)
}

/// The table `tilus bench attention --prefill` prints (the same columns as
/// `bench/torch_attention.py --prefill`).
pub fn prefill_table(dtype: &str, l2: L2Mode, results: &[PrefillBench]) -> String {
    let l2 = l2.label();
    let mut s = format!(
        "tilus causal prefill attention (mma.sync), {dtype}, L2 flushed {l2}; TFLOP/s counts \
         2·n²·d per query head and sequence\n{:<6} {:>7} {:>13} {:>10} {:>9}  config\n",
        "batch", "tokens", "heads q/kv/d", "time us", "TFLOP/s"
    );
    for r in results {
        s += &format!(
            "{:<6} {:>7} {:>13} {:>10.1} {:>9.1}  {}\n",
            r.batch,
            r.tokens,
            format!("{}/{}/{}", r.q_heads, r.kv_heads, r.head_dim),
            r.timing.median_us,
            r.tflops(),
            r.config
        );
    }
    s
}

/// One measured decode step over a CQ cache, with the f16 (activation-type) cache's step of
/// the same shape measured in the same run.
#[derive(Clone, Debug)]
pub struct CqDecodeBench {
    pub batch: usize,
    pub kv_len: usize,
    pub format: super::cq::CqFormat,
    pub tuning: super::cq::CqTuning,
    pub splits: usize,
    pub timing: Timing,
    /// The activation-type cache's step (contiguous, default tuning).
    pub dense: Timing,
    /// Bytes the CQ step must move: codes, codebooks, Q and O.
    pub bytes: usize,
}

/// Time decode steps over a CQ cache of random codes and codebooks (`tilus bench attention
/// --kv cq2`), and the same steps over an activation-type cache, each point after an L2 flush.
pub fn bench_decode_cq<T: Activation>(
    ctx: &Context,
    spec: &DecodeBenchSpec,
    format: super::cq::CqFormat,
) -> Result<Vec<CqDecodeBench>, String> {
    use super::cq::{CqCodebooks, CqDecodeAttention, CqShape, CqTuning, Kv};
    let el = std::mem::size_of::<T>();
    let mut flush = L2Flush::with_mode(ctx, spec.l2).map_err(err)?;
    let mut out = Vec::new();
    let (q_heads, kv_heads, head_dim) = (spec.q_heads, spec.kv_heads, spec.head_dim);
    let books = CqCodebooks::random(format, kv_heads, head_dim, 7).map_err(err)?;
    let kb = DeviceBuffer::from_host(ctx, &books.to_activation::<T>(Kv::K)).map_err(err)?;
    let vb = DeviceBuffer::from_host(ctx, &books.to_activation::<T>(Kv::V)).map_err(err)?;
    // (tile, codebook copies, blocks per multiprocessor); without --sweep the default only.
    let sweep: &[(usize, usize, usize)] = &[(32, 16, 1), (32, 8, 3), (16, 16, 1), (16, 8, 3)];
    let mut time = |step: &mut dyn FnMut() -> Result<(), String>| -> Result<Timing, String> {
        time_launches(ctx, &mut flush, spec.runs, step)
    };
    for &batch in &spec.batches {
        for &kv_len in &spec.kv_lens {
            let shape = CqShape {
                batch,
                q_heads,
                kv_heads,
                head_dim,
                max_len: kv_len,
            };
            let scale = 1.0 / (head_dim as f32).sqrt();
            let q = random::<T>(ctx, shape.q_len(), 1)?;
            let lens = DeviceBuffer::from_host(ctx, &vec![kv_len as i32; batch]).map_err(err)?;
            let mut o = DeviceBuffer::<T>::zeros(ctx, shape.q_len()).map_err(err)?;
            // The activation-type cache of the same shape first (then freed).
            let dense = {
                let dshape = DecodeShape {
                    batch,
                    q_heads,
                    kv_heads,
                    head_dim,
                    cache: CacheLayout::Contiguous { max_len: kv_len },
                    kv: KvFormat::Activation,
                };
                let kt = random::<T>(ctx, dshape.cache_len(), 2)?;
                let vt = random::<T>(ctx, dshape.cache_len(), 3)?;
                let attn = DecodeAttention::new(dshape, scale, None, kv_len).map_err(err)?;
                time(&mut || {
                    let c: KvCache<'_, _, DeviceBuffer<f32>, _> = KvCache {
                        k: &kt,
                        v: &vt,
                        meta: None,
                        block_table: None,
                        seq_lens: &lens,
                    };
                    attn.run(ctx, &q, &c, &mut o).map_err(err)
                })?
            };
            let codes = shape.code_bytes(format);
            let k = random_with(ctx, codes, 4, |w| w as u8)?;
            let v = random_with(ctx, codes, 5, |w| (w >> 8) as u8)?;
            let default = CqDecodeAttention::new(shape, format, scale, kv_len).map_err(err)?;
            let d = *default.tuning();
            let tunings: Vec<CqTuning> = if spec.sweep {
                sweep
                    .iter()
                    .map(|&(tile, replicas, blocks_per_sm)| CqTuning {
                        tile,
                        replicas,
                        blocks_per_sm,
                    })
                    .collect()
            } else {
                vec![d]
            };
            for tuning in tunings {
                let attn = CqDecodeAttention::new(shape, format, scale, kv_len)
                    .and_then(|a| a.with_tuning(tuning))
                    .map_err(err)?;
                let timing = time(&mut || {
                    attn.run(ctx, &q, &k, &v, &kb, &vb, &lens, &mut o)
                        .map_err(err)
                })?;
                out.push(CqDecodeBench {
                    batch,
                    kv_len,
                    format,
                    tuning,
                    splits: attn.splits_for(ctx.device().multiprocessors as usize),
                    timing,
                    dense,
                    bytes: 2 * codes
                        + books.bytes()
                        + 2 * batch * q_heads * head_dim * el
                        + batch * 4,
                });
            }
        }
    }
    Ok(out)
}

/// The table of [`bench_decode_cq`].
pub fn cq_table(copy_gbps: f64, dtype: &str, l2: L2Mode, results: &[CqDecodeBench]) -> String {
    let name = results.first().map_or(String::new(), |r| r.format.name());
    let mut s = format!(
        "tilus decode attention, {dtype} queries, {name} KV cache (contiguous) against a {dtype} \
         cache (contiguous), L2 flushed {}; copy bandwidth {copy_gbps:.0} GB/s (1 GiB); \
         %floor = the CQ step's bytes (codes, codebooks, Q, O) over time, over that\n\
         {:<6} {:>8} {:>11} {:>7} {:>10} {:>10} {:>8} {:>8} {:>7}\n",
        l2.label(),
        "batch",
        "kv_len",
        "tile/rep/occ",
        "splits",
        "dense us",
        "cq us",
        "speedup",
        "GB/s",
        "%floor"
    );
    for r in results {
        let gbps = r.timing.gb_per_s(r.bytes as f64);
        s += &format!(
            "{:<6} {:>8} {:>11} {:>7} {:>10.1} {:>10.1} {:>7.2}x {:>8.0} {:>6.1}%\n",
            r.batch,
            r.kv_len,
            format!(
                "{}/{}/{}",
                r.tuning.tile, r.tuning.replicas, r.tuning.blocks_per_sm
            ),
            r.splits,
            r.dense.median_us,
            r.timing.median_us,
            r.dense.median_us / r.timing.median_us,
            gbps,
            100.0 * gbps / copy_gbps
        );
    }
    s
}
