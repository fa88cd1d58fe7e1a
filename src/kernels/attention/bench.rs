//! GPU measurements of decode attention (`tilus bench attention`): one decode step of a batch
//! of equally long sequences over a paged (or contiguous) cache of random values, timed with
//! CUDA events after an L2 flush, against the bytes it must move (K, V, Q and O; the block
//! table is counted too) and the copy bandwidth. `bench/torch_attention.py` measures torch's
//! `scaled_dot_product_attention` the same way and prints the same table.

use super::decode::{CacheLayout, DecodeAttention, DecodeShape, DecodeTuning};
use crate::element::Activation;
use tilus_runtime::{time_runs, Context, DeviceBuffer, L2Flush, L2Mode, Timing};

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

/// A device buffer of `len` random values in `[-1, 1)`: a random chunk made on the host, copied
/// over the buffer on the device (caches of tens of GB are filled in milliseconds).
fn random<T: Activation>(ctx: &Context, len: usize, seed: u64) -> Result<DeviceBuffer<T>, String> {
    let chunk_len = len.clamp(1, 1 << 22);
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let host: Vec<T> = (0..chunk_len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            T::from_f32(((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
        })
        .collect();
    let chunk = DeviceBuffer::from_host(ctx, &host).map_err(err)?;
    let mut buf = DeviceBuffer::<T>::zeros(ctx, len).map_err(err)?;
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

/// Time decode steps of `batch` sequences of `kv_len` tokens each, `q_heads` / `kv_heads`
/// heads of `head_dim`, for each batch size and length: `runs` timed steps after 3 warm-ups,
/// each after an L2 flush leaving L2 as `l2` says. `page_size` 0 is a contiguous cache. Each
/// point is measured with each of `tunings` (`None`: the default).
#[allow(clippy::too_many_arguments)]
pub fn bench_decode<T: Activation>(
    ctx: &Context,
    batches: &[usize],
    kv_lens: &[usize],
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    page_size: usize,
    runs: usize,
    l2: L2Mode,
    tunings: &[Option<DecodeTuning>],
) -> Result<Vec<DecodeBench>, String> {
    let el = std::mem::size_of::<T>();
    let mut flush = L2Flush::with_mode(ctx, l2).map_err(err)?;
    let mut out = Vec::new();
    for &batch in batches {
        for &kv_len in kv_lens {
            let cache = if page_size == 0 {
                CacheLayout::Contiguous { max_len: kv_len }
            } else {
                let max_pages = kv_len.div_ceil(page_size);
                CacheLayout::Paged {
                    pages: batch * max_pages,
                    page_size,
                    max_pages,
                }
            };
            let shape = DecodeShape {
                batch,
                q_heads,
                kv_heads,
                head_dim,
                cache,
            };
            let scale = 1.0 / (head_dim as f32).sqrt();
            let q = random::<T>(ctx, shape.q_len(), 1)?;
            let k = random::<T>(ctx, shape.cache_len(), 2)?;
            let v = random::<T>(ctx, shape.cache_len(), 3)?;
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
            for tuning in tunings {
                let mut attn =
                    DecodeAttention::new(shape.clone(), scale, None, kv_len).map_err(err)?;
                if let Some(t) = tuning {
                    attn = attn.with_tuning(*t).map_err(err)?;
                }
                let mut step = || attn.run(ctx, &q, &k, &v, table.as_ref(), &lens, &mut o);
                step().map_err(err)?;
                let mut failure = None;
                let timing = time_runs(ctx, 3, runs, Some(&mut flush), || {
                    if let Err(e) = step() {
                        failure = Some(e);
                    }
                    Ok(())
                })
                .map_err(err)?;
                if let Some(e) = failure {
                    return Err(err(e));
                }
                let splits = attn
                    .plan_for::<T>(ctx.device().multiprocessors as usize)
                    .map_err(err)?
                    .splits;
                let kv_bytes = 2 * batch * kv_len * kv_heads * head_dim * el;
                let table_bytes = match cache {
                    CacheLayout::Paged { page_size, .. } => batch * kv_len.div_ceil(page_size) * 4,
                    CacheLayout::Contiguous { .. } => 0,
                };
                out.push(DecodeBench {
                    batch,
                    kv_len,
                    shape: shape.clone(),
                    tuning: *attn.tuning(),
                    splits,
                    timing,
                    bytes: kv_bytes + 2 * batch * q_heads * head_dim * el + table_bytes + batch * 4,
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
    let l2 = match l2 {
        L2Mode::Clean => "clean",
        L2Mode::Dirty => "dirty",
    };
    let mut s = format!(
        "tilus decode attention, {dtype}, {cache} cache, L2 flushed {l2}; copy bandwidth \
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

/// The tunings `tilus bench attention --sweep` measures for head dim `head_dim`: the default,
/// deeper pipelines, fewer warps per block (more blocks resident), shorter tiles, two waves.
pub fn sweep_tunings(head_dim: usize) -> Vec<Option<DecodeTuning>> {
    let d = DecodeTuning::default_for(head_dim);
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
    ] {
        v.push(Some(t));
    }
    v
}
