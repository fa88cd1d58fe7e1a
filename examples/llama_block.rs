//! One Llama-3 decoder layer in candle with tilus's quantized linear layers, loaded from a GPTQ
//! checkpoint, decoding tokens; every step is checked against the same layer in f32 on the CPU.
//!
//! ```text
//! cargo run --release --features candle --example llama_block                  # CPU interpreter
//! cargo run --release --features candle-cuda --example llama_block -- --shape 8b --bench
//! ```
//!
//! No model can be downloaded here, so the example makes its own checkpoint: random weights
//! (scaled like a trained layer's, 1/sqrt(fan-in)) quantized GPTQ-style (asymmetric, 128 rows per
//! group, `checkpoint_format: gptq`, i.e. v1 zero points) and written as a safetensors file with
//! the tensor names of a Hugging Face Llama checkpoint (`model.layers.0.self_attn.q_proj.qweight`
//! ...). It then imports that file with [`tilus::checkpoint`] as any GPTQ checkpoint.
//!
//! The layer: RMSNorm, q/k/v projections, rotary embedding (NeoX halves, theta 500000), grouped
//! query attention over a KV cache, o projection, residual; RMSNorm, gate/up projections,
//! SiLU-gated product, down projection, residual. The linears are [`QLinear`]s: q/k/v fused into
//! one layer and gate/up into another (their columns side by side,
//! `QuantizedWeight::concat_columns`, as serving engines do), or seven layers with `--unfused`.
//! RMSNorm and SiLU-and-mul are [`tilus::candle::ops`]; attention is candle's tensor operations.
//!
//! Decoding: a prompt of `--prompt` tokens runs as one prefill step (m = prompt), then
//! `--tokens` steps of one token (m = 1), each choosing the next token as the argmax of the
//! output times an LM head over a toy vocabulary of 256 embeddings. The reference (f32 on the CPU, the
//! checkpoint's dequantized weights) is fed the same tokens, and each step's output is compared:
//! the largest error relative to the output's largest magnitude must stay under 2e-2 (f16
//! activations through a whole layer). The reference's own choice of token is reported too.
//!
//! `--bench` (CUDA): the decode step at m = 1 and 16, and every linear layer of the block
//! beside candle's own quantized matmul (`QMatMul` with Q4_0, Q4_K and Q8_0) on the same GPU in
//! the same run, L2 flushed (clean) before each timed call.

#[cfg(feature = "candle-cuda")]
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor, D};
use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tilus::candle::{ops, DecodeAttn, QLinear};
use tilus::checkpoint::{Checkpoint, ImportOptions, ImportedLayer};
use tilus::kernels::linear::QuantizedLinear;

#[derive(Parser, Debug)]
#[command(about = "One Llama-3 decoder layer in candle with tilus's quantized linears")]
struct Args {
    /// Layer shape: tiny (hidden 512), 8b (Llama-3-8B) or 70b (Llama-3-70B).
    #[arg(long, default_value = "tiny")]
    shape: String,
    /// GPTQ bits per weight: 2, 4 or 8.
    #[arg(long, default_value_t = 4)]
    bits: usize,
    /// Prompt length (one prefill step).
    #[arg(long, default_value_t = 16)]
    prompt: usize,
    /// Tokens to decode after the prompt.
    #[arg(long, default_value_t = 8)]
    tokens: usize,
    /// cpu, cuda or auto (CUDA when built with `candle-cuda` and a GPU is there).
    #[arg(long, default_value = "auto")]
    device: String,
    /// Where to write the checkpoint (default: a file in the system temp directory).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Time the decode step and each linear layer against candle's quantized matmul (CUDA).
    #[arg(long)]
    bench: bool,
    /// Keep q/k/v and gate/up as separate layers (by default each group is fused into one
    /// layer of their columns side by side, as serving engines do: fewer, larger matmuls).
    #[arg(long)]
    unfused: bool,
    /// Seed of the weights and the prompt.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Clone, Copy, Debug)]
struct Config {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    intermediate: usize,
    vocab: usize,
    eps: f64,
    rope_theta: f64,
}

impl Config {
    fn named(name: &str) -> Option<Config> {
        let (hidden, heads, kv_heads, intermediate) = match name {
            "tiny" => (512, 4, 2, 1536),
            "8b" => (4096, 32, 8, 14336),
            "70b" => (8192, 64, 8, 28672),
            _ => return None,
        };
        Some(Config {
            hidden,
            heads,
            kv_heads,
            head_dim: 128,
            intermediate,
            vocab: 256,
            eps: 1e-5,
            rope_theta: 500000.0,
        })
    }

    /// `(name, k, n)` of every linear layer, in the checkpoint's names.
    fn linears(&self) -> Vec<(&'static str, usize, usize)> {
        let (h, d, i) = (self.hidden, self.head_dim, self.intermediate);
        vec![
            ("self_attn.q_proj", h, self.heads * d),
            ("self_attn.k_proj", h, self.kv_heads * d),
            ("self_attn.v_proj", h, self.kv_heads * d),
            ("self_attn.o_proj", self.heads * d, h),
            ("mlp.gate_proj", h, i),
            ("mlp.up_proj", h, i),
            ("mlp.down_proj", i, h),
        ]
    }
}

/// The block's linear layers: a label and the checkpoint projections whose columns it holds
/// side by side (one each when unfused).
fn block_linears(fused: bool) -> Vec<(String, Vec<&'static str>)> {
    let groups: Vec<Vec<&'static str>> = if fused {
        vec![
            vec!["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
            vec!["self_attn.o_proj"],
            vec!["mlp.gate_proj", "mlp.up_proj"],
            vec!["mlp.down_proj"],
        ]
    } else {
        [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ]
        .map(|p| vec![p])
        .to_vec()
    };
    groups
        .into_iter()
        .map(|g| {
            let label = match g.as_slice() {
                [one] => one.to_string(),
                [first, .., last] => {
                    format!("{}+{}", first, last.rsplit('.').next().unwrap_or(last))
                }
                [] => String::new(),
            };
            (label, g)
        })
        .collect()
}

/// One linear layer of the block from the checkpoint: its projections imported and placed side
/// by side. Returns the quantized weight and the dense f32 `[k, n]` it dequantizes to.
fn import_linear(
    ckpt: &Checkpoint,
    parts: &[&str],
) -> anyhow::Result<(tilus::quant::QuantizedWeight, Vec<f32>)> {
    let mut weights = Vec::new();
    for part in parts {
        let layer = ckpt.load(&format!("{PREFIX}.{part}"), &ImportOptions::default())?;
        if layer.input_perm.is_some() {
            anyhow::bail!("{part}: act-order checkpoints are not fused here; use --unfused");
        }
        weights.push(layer.weight);
    }
    let fused = tilus::quant::QuantizedWeight::concat_columns(&weights.iter().collect::<Vec<_>>())?;
    let dense = fused.dequantize().into_iter().map(|v| v as f32).collect();
    Ok((fused, dense))
}

const PREFIX: &str = "model.layers.0";
const GROUP: usize = 128;

/// A GPTQ v1 layer of `bits` bits (2, 4 or 8) for the row-major `[k, n]` weight `w`:
/// `(qweight, qzeros, scales)` as little-endian bytes. Per group of 128 rows and column: the
/// range [min(w, 0), max(w, 0)] maps onto codes 0..2^b - 1, the scale is rounded to f16 first
/// and the codes are computed with the rounded scale; zero points are stored minus one (v1).
fn gptq_pack(w: &[f32], k: usize, n: usize, bits: usize) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let groups = k / GROUP;
    let max_code = (1u32 << bits) - 1;
    let per_word = 32 / bits;
    let mut qweight = vec![0u32; k / per_word * n];
    let mut qzeros = vec![0u32; groups * n / per_word];
    let mut scales = vec![half::f16::ZERO; groups * n];
    for g in 0..groups {
        for c in 0..n {
            let col = (g * GROUP..(g + 1) * GROUP).map(|r| w[r * n + c]);
            let (lo, hi) = col.fold((0f32, 0f32), |(lo, hi), v| (lo.min(v), hi.max(v)));
            let scale = half::f16::from_f32(((hi - lo) / max_code as f32).max(1e-6));
            let s = scale.to_f32();
            // Zero point >= 1, so that v1's stored `zero - 1` is never negative.
            let zero = ((-lo / s).round() as u32).clamp(1, max_code);
            scales[g * n + c] = scale;
            qzeros[(g * n + c) / per_word] |= (zero - 1) << (bits * (c % per_word));
            for r in g * GROUP..(g + 1) * GROUP {
                let q = ((w[r * n + c] / s).round() + zero as f32).clamp(0.0, max_code as f32);
                qweight[r / per_word * n + c] |= (q as u32) << (bits * (r % per_word));
            }
        }
    }
    let bytes = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let scale_bytes = scales.iter().flat_map(|x| x.to_le_bytes()).collect();
    (bytes(&qweight), bytes(&qzeros), scale_bytes)
}

/// Random weights for every linear (quantized GPTQ-style), the two norms and the embedding
/// table, written as one safetensors file.
fn write_checkpoint(
    cfg: &Config,
    bits: usize,
    seed: u64,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    use safetensors::tensor::{Dtype, TensorView};
    let mut rng = StdRng::seed_from_u64(seed);
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, k, n) in cfg.linears() {
        let std = 1.0 / (k as f32).sqrt();
        let w: Vec<f32> = (0..k * n)
            .map(|_| rng.random_range(-1.0f32..1.0) * std * 1.7)
            .collect();
        let (qw, qz, sc) = gptq_pack(&w, k, n, bits);
        let p = format!("{PREFIX}.{name}");
        owned.push((
            format!("{p}.qweight"),
            Dtype::I32,
            vec![k * bits / 32, n],
            qw,
        ));
        owned.push((
            format!("{p}.qzeros"),
            Dtype::I32,
            vec![k / GROUP, n * bits / 32],
            qz,
        ));
        owned.push((format!("{p}.scales"), Dtype::F16, vec![k / GROUP, n], sc));
    }
    let h = cfg.hidden;
    for norm in ["input_layernorm", "post_attention_layernorm"] {
        let w: Vec<u8> = (0..h)
            .flat_map(|_| {
                half::f16::from_f32(1.0 + 0.2 * rng.random_range(-1.0f32..1.0)).to_le_bytes()
            })
            .collect();
        owned.push((format!("{PREFIX}.{norm}.weight"), Dtype::F16, vec![h], w));
    }
    let emb: Vec<u8> = (0..cfg.vocab * h)
        .flat_map(|_| half::f16::from_f32(rng.random_range(-1.0f32..1.0)).to_le_bytes())
        .collect();
    owned.push((
        "model.embed_tokens.weight".into(),
        Dtype::F16,
        vec![cfg.vocab, h],
        emb,
    ));
    let head: Vec<u8> = (0..cfg.vocab * h)
        .flat_map(|_| half::f16::from_f32(rng.random_range(-1.0f32..1.0)).to_le_bytes())
        .collect();
    owned.push((
        "lm_head.weight".into(),
        Dtype::F16,
        vec![cfg.vocab, h],
        head,
    ));
    let views: Vec<(String, TensorView<'_>)> = owned
        .iter()
        .map(|(name, dt, shape, data)| {
            Ok((name.clone(), TensorView::new(*dt, shape.clone(), data)?))
        })
        .collect::<Result<_, safetensors::SafeTensorError>>()?;
    let meta = std::collections::HashMap::from([
        ("quant_method".to_string(), "gptq".to_string()),
        ("checkpoint_format".to_string(), "gptq".to_string()),
        ("bits".to_string(), bits.to_string()),
        ("group_size".to_string(), GROUP.to_string()),
    ]);
    safetensors::serialize_to_file(views, Some(meta), path)?;
    Ok(())
}

/// A linear layer of either path: tilus's quantized one, or f32 dense `[k, n]` (the reference).
enum Linear {
    Tilus(Box<QLinear>),
    Dense(Tensor),
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Linear::Tilus(l) => l.forward(x),
            Linear::Dense(w) => x.broadcast_matmul(w),
        }
    }
}

/// One decoder layer and its KV cache.
#[derive(Clone)]
struct Block {
    cfg: Config,
    /// The linears of [`block_linears`] (shared by the bench's copies of the block).
    linears: Arc<Vec<Linear>>,
    fused: bool,
    norms: [Tensor; 2],
    /// The tilus path runs tilus's row kernels; the reference, candle's f32 operations.
    tilus: bool,
    cos: Tensor,
    sin: Tensor,
    cache: Kv,
}

/// The KV cache: the reference's grows by concatenation (`[1, kv_heads, len, head_dim]`); the
/// tilus path's is allocated once (`[1, capacity, kv_heads, head_dim]`, token-major), written in
/// place each step, and read by tilus's decode attention.
#[derive(Clone)]
enum Kv {
    Growing(Option<(Tensor, Tensor)>),
    Fixed {
        k: Tensor,
        v: Tensor,
        attn: Arc<DecodeAttn>,
    },
}

impl Kv {
    fn fixed(cfg: &Config, capacity: usize, dev: &Device) -> candle_core::Result<Kv> {
        let shape = (1, capacity, cfg.kv_heads, cfg.head_dim);
        let scale = 1.0 / (cfg.head_dim as f32).sqrt();
        Ok(Kv::Fixed {
            k: Tensor::zeros(shape, DType::F16, dev)?,
            v: Tensor::zeros(shape, DType::F16, dev)?,
            attn: Arc::new(DecodeAttn::new(
                cfg.heads,
                cfg.kv_heads,
                cfg.head_dim,
                capacity,
                scale,
            )?),
        })
    }
}

impl Block {
    fn rms_norm(&self, x: &Tensor, i: usize) -> candle_core::Result<Tensor> {
        if self.tilus {
            ops::rms_norm(x, &self.norms[i], self.cfg.eps as f32)
        } else {
            ops::rms_norm_reference(x, &self.norms[i], self.cfg.eps as f32)
        }
    }

    /// `x`: `[1, t, hidden]` for positions `pos..pos + t`; returns the layer's output.
    fn forward(&mut self, x: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        let c = self.cfg;
        let (_, t, _) = x.dims3()?;
        let h = self.rms_norm(x, 0)?;
        let heads = |y: Tensor, n: usize| -> candle_core::Result<Tensor> {
            y.reshape((1, t, n, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (q, k, v) = if self.fused {
            let qkv = self.linears[0].forward(&h)?;
            let (nq, nkv) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
            (
                qkv.narrow(D::Minus1, 0, nq)?,
                qkv.narrow(D::Minus1, nq, nkv)?,
                qkv.narrow(D::Minus1, nq + nkv, nkv)?,
            )
        } else {
            (
                self.linears[0].forward(&h)?,
                self.linears[1].forward(&h)?,
                self.linears[2].forward(&h)?,
            )
        };
        let (cos, sin) = (self.cos.narrow(0, pos, t)?, self.sin.narrow(0, pos, t)?);
        let att = match &mut self.cache {
            Kv::Growing(cache) => {
                let (q, k, v) = (
                    heads(q, c.heads)?,
                    heads(k, c.kv_heads)?,
                    heads(v, c.kv_heads)?,
                );
                let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?;
                let k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
                let (k, v) = match cache.take() {
                    Some((ck, cv)) => (Tensor::cat(&[&ck, &k], 2)?, Tensor::cat(&[&cv, &v], 2)?),
                    None => (k, v),
                };
                *cache = Some((k.clone(), v.clone()));
                attend(&c, &q, &k, &v, pos)?
            }
            Kv::Fixed { k: kc, v: vc, attn } => {
                // Token-major [1, t, heads, head_dim]: the projection's own order.
                let tokens = |y: Tensor, n: usize| y.reshape((1, t, n, c.head_dim));
                let q = candle_nn::rotary_emb::rope_thd(&tokens(q, c.heads)?, &cos, &sin)?;
                let k = candle_nn::rotary_emb::rope_thd(&tokens(k, c.kv_heads)?, &cos, &sin)?;
                kc.slice_set(&k, 1, pos)?;
                vc.slice_set(&tokens(v, c.kv_heads)?.contiguous()?, 1, pos)?;
                if t == 1 {
                    let lens = Tensor::new(&[(pos + 1) as i32], x.device())?;
                    attn.forward(&q.reshape((1, c.heads, c.head_dim))?, kc, vc, &lens)?
                        .reshape((1, 1, c.heads * c.head_dim))?
                } else {
                    // Prefill: candle's attention over the cache's first pos + t positions.
                    let window = |y: &Tensor| y.narrow(1, 0, pos + t)?.transpose(1, 2);
                    attend(&c, &q.transpose(1, 2)?, &window(kc)?, &window(vc)?, pos)?
                }
            }
        };
        let o = if self.fused { 1 } else { 3 };
        let x = (x + self.linears[o].forward(&att)?)?;
        let h = self.rms_norm(&x, 1)?;
        // [gate | up] along the last dimension, fused or concatenated.
        let gate_up = if self.fused {
            self.linears[2].forward(&h)?
        } else {
            let gate = self.linears[4].forward(&h)?;
            let up = self.linears[5].forward(&h)?;
            Tensor::cat(&[&gate, &up], D::Minus1)?
        };
        let act = if self.tilus {
            ops::silu_and_mul(&gate_up)?
        } else {
            let d = gate_up.dim(D::Minus1)? / 2;
            let gate = gate_up.narrow(D::Minus1, 0, d)?;
            (candle_nn::ops::silu(&gate)? * gate_up.narrow(D::Minus1, d, d)?)?
        };
        x + self.linears[self.linears.len() - 1].forward(&act)?
    }
}

/// Causal grouped-query attention in candle's operations: `q` `[1, heads, t, head_dim]` for
/// positions `pos..pos + t` against `k`, `v` `[1, kv_heads, len, head_dim]`; `[1, t, heads *
/// head_dim]`.
fn attend(
    c: &Config,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos: usize,
) -> candle_core::Result<Tensor> {
    let t = q.dim(2)?;
    let total = k.dim(2)?;
    // Each kv head serves heads / kv_heads query heads.
    let rep = c.heads / c.kv_heads;
    let expand = |y: &Tensor| -> candle_core::Result<Tensor> {
        y.unsqueeze(2)?
            .expand((1, c.kv_heads, rep, total, c.head_dim))?
            .reshape((1, c.heads, total, c.head_dim))
    };
    let (k, v) = (expand(k)?, expand(v)?);
    let q = q.contiguous()?;
    let scores = (q.matmul(&k.t()?)?.to_dtype(DType::F32)? / (c.head_dim as f64).sqrt())?;
    let scores = if t > 1 {
        // Causal: query i (position pos + i) sees keys 0..=pos + i. Built on the device: a
        // host-built mask would be a copy (and a host stall) per step.
        let dev = q.device();
        let rows = Tensor::arange(pos as u32, (pos + t) as u32, dev)?.reshape((t, 1))?;
        let cols = Tensor::arange(0u32, total as u32, dev)?.reshape((1, total))?;
        let visible = cols.broadcast_le(&rows)?;
        let zeros = Tensor::zeros((t, total), DType::F32, dev)?;
        let hidden = Tensor::full(f32::NEG_INFINITY, (t, total), dev)?;
        scores.broadcast_add(&visible.where_cond(&zeros, &hidden)?)?
    } else {
        scores
    };
    let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(v.dtype())?;
    probs
        .matmul(&v)?
        .transpose(1, 2)?
        .reshape((1, t, c.heads * c.head_dim))
}

/// cos and sin of the NeoX rotary embedding for positions `0..len`, `[len, head_dim / 2]`.
fn rope_tables(
    cfg: &Config,
    len: usize,
    dtype: DType,
    dev: &Device,
) -> anyhow::Result<(Tensor, Tensor)> {
    let half = cfg.head_dim / 2;
    let mut cos = Vec::with_capacity(len * half);
    let mut sin = Vec::with_capacity(len * half);
    for p in 0..len {
        for i in 0..half {
            let f = 1.0 / cfg.rope_theta.powf(2.0 * i as f64 / cfg.head_dim as f64);
            cos.push((p as f64 * f).cos() as f32);
            sin.push((p as f64 * f).sin() as f32);
        }
    }
    let t = |v: Vec<f32>| -> anyhow::Result<Tensor> {
        Ok(Tensor::from_vec(v, (len, half), dev)?.to_dtype(dtype)?)
    };
    Ok((t(cos)?, t(sin)?))
}

/// A `[n]`/`[r, c]` f16 tensor of the checkpoint as a candle tensor of `dtype` on `dev`.
fn dense_tensor(
    ckpt: &Checkpoint,
    name: &str,
    dtype: DType,
    dev: &Device,
) -> anyhow::Result<Tensor> {
    let t = ckpt.tensor(name)?;
    let values: Vec<f32> = t
        .data
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect();
    Ok(Tensor::from_vec(values, t.shape.to_vec(), &Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(dev)?)
}

/// The block from the checkpoint: tilus's quantized linears on `dev` (f16), or the dense f32
/// reference on the CPU.
fn load_block(
    ckpt: &Checkpoint,
    cfg: Config,
    fused: bool,
    tilus: bool,
    dev: &Device,
    max_len: usize,
) -> anyhow::Result<Block> {
    let dtype = if tilus { DType::F16 } else { DType::F32 };
    let mut linears = Vec::new();
    for (_, parts) in block_linears(fused) {
        let (weight, dense) = import_linear(ckpt, &parts)?;
        linears.push(if tilus {
            let layer = ImportedLayer {
                weight,
                input_perm: None,
            };
            Linear::Tilus(Box::new(QLinear::new(QuantizedLinear::from_imported(
                layer,
            )?)))
        } else {
            let (k, n) = (weight.k, weight.n);
            Linear::Dense(Tensor::from_vec(dense, (k, n), dev)?)
        });
    }
    let norm = |n: &str| dense_tensor(ckpt, &format!("{PREFIX}.{n}.weight"), dtype, dev);
    let (cos, sin) = rope_tables(&cfg, max_len, dtype, dev)?;
    let cache = if tilus {
        Kv::fixed(&cfg, max_len, dev)?
    } else {
        Kv::Growing(None)
    };
    Ok(Block {
        cfg,
        linears: Arc::new(linears),
        fused,
        norms: [norm("input_layernorm")?, norm("post_attention_layernorm")?],
        tilus,
        cos,
        sin,
        cache,
    })
}

fn max_rel_err(got: &Tensor, want: &Tensor) -> anyhow::Result<f64> {
    let g: Vec<f32> = got.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
    let w: Vec<f32> = want.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
    let scale = w.iter().fold(1e-30f32, |a, v| a.max(v.abs())) as f64;
    let mut worst = 0f64;
    for (a, b) in g.iter().zip(&w) {
        if !a.is_finite() {
            anyhow::bail!("non-finite output {a}");
        }
        worst = worst.max((a - b).abs() as f64 / scale);
    }
    Ok(worst)
}

/// The next token: argmax over the vocabulary of the last position's output times the LM head
/// (`[vocab, hidden]`, on the CPU in f32: the same for both paths).
fn next_token(out: &Tensor, head: &Tensor) -> anyhow::Result<u32> {
    let last = out
        .i_last()?
        .to_dtype(DType::F32)?
        .to_device(&Device::Cpu)?;
    let logits = head.matmul(&last.unsqueeze(1)?)?;
    Ok(logits.squeeze(1)?.argmax(0)?.to_scalar::<u32>()?)
}

trait LastRow {
    fn i_last(&self) -> candle_core::Result<Tensor>;
}
impl LastRow for Tensor {
    /// `[1, t, h]` -> `[h]` of position t - 1.
    fn i_last(&self) -> candle_core::Result<Tensor> {
        let t = self.dim(1)?;
        self.narrow(1, t - 1, 1)?.flatten_all()
    }
}

fn pick_device(choice: &str) -> anyhow::Result<Device> {
    match choice {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::new_cuda(0)?),
        "auto" => Ok(
            if cfg!(feature = "candle-cuda") && tilus::runtime::device_count().unwrap_or(0) > 0 {
                Device::new_cuda(0)?
            } else {
                Device::Cpu
            },
        ),
        other => anyhow::bail!("--device must be cpu, cuda or auto, got `{other}`"),
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg = Config::named(&args.shape)
        .ok_or_else(|| anyhow::anyhow!("--shape must be tiny, 8b or 70b, got `{}`", args.shape))?;
    if ![2, 4, 8].contains(&args.bits) {
        anyhow::bail!("--bits must be 2, 4 or 8, got {}", args.bits);
    }
    if args.prompt == 0 {
        anyhow::bail!("--prompt must be at least 1");
    }
    if args.bench && !cfg!(feature = "candle-cuda") {
        anyhow::bail!("--bench needs a CUDA build: --features candle-cuda");
    }
    let dev = pick_device(&args.device)?;
    if args.bench && !dev.is_cuda() {
        anyhow::bail!("--bench needs a CUDA device (--device cuda)");
    }
    let path = args.file.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "tilus-llama-{}-gptq{}.safetensors",
            args.shape, args.bits
        ))
    });

    let t0 = Instant::now();
    write_checkpoint(&cfg, args.bits, args.seed, &path)?;
    let bytes = std::fs::metadata(&path)?.len();
    println!(
        "wrote {} ({:.1} MB, GPTQ {}-bit, group {GROUP}) in {:.2} s",
        path.display(),
        bytes as f64 / 1e6,
        args.bits,
        t0.elapsed().as_secs_f64()
    );
    let ckpt = Checkpoint::open(&path)?;
    let max_len = args.prompt + args.tokens;
    let t0 = Instant::now();
    let mut block = load_block(&ckpt, cfg, !args.unfused, true, &dev, max_len)?;
    println!(
        "imported 7 linear layers for {dev:?} in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let mut reference = load_block(&ckpt, cfg, !args.unfused, false, &Device::Cpu, max_len)?;
    let emb = dense_tensor(&ckpt, "model.embed_tokens.weight", DType::F16, &dev)?;
    let head = dense_tensor(&ckpt, "lm_head.weight", DType::F32, &Device::Cpu)?;

    // The prompt: pseudo-random token ids.
    let mut rng = StdRng::seed_from_u64(args.seed ^ 0x5151);
    let mut tokens: Vec<u32> = (0..args.prompt)
        .map(|_| rng.random_range(0..cfg.vocab as u32))
        .collect();
    let mut pos = 0;
    let mut worst = 0f64;
    let mut agree = 0;
    let mut steps = 0;
    let mut step_input = tokens.clone();
    while tokens.len() < args.prompt + args.tokens + 1 {
        let ids = Tensor::new(step_input.as_slice(), &dev)?;
        let x = emb.index_select(&ids, 0)?.unsqueeze(0)?;
        let t0 = Instant::now();
        let out = block.forward(&x, pos)?;
        let next = next_token(&out, &head)?;
        let took = t0.elapsed();
        let want = reference.forward(&x.to_device(&Device::Cpu)?.to_dtype(DType::F32)?, pos)?;
        let err = max_rel_err(&out.to_device(&Device::Cpu)?, &want)?;
        let ref_next = next_token(&want, &head)?;
        worst = worst.max(err);
        agree += (next == ref_next) as usize;
        steps += 1;
        println!(
            "step {steps:2}: m = {:2}, positions {pos}..{}: token {next:3} (reference {ref_next:3}), \
             max error {err:.2e}, {:.2} ms",
            step_input.len(),
            pos + step_input.len(),
            took.as_secs_f64() * 1e3
        );
        pos += step_input.len();
        tokens.push(next);
        step_input = vec![next];
    }
    println!(
        "decoded {} tokens after a {}-token prompt; next-token agreement with the f32 reference \
         {agree}/{steps}; worst relative error {worst:.2e}",
        args.tokens, args.prompt
    );
    if worst > 2e-2 {
        anyhow::bail!("the layer's output is off the f32 reference by {worst:.2e} (limit 2e-2)");
    }
    println!("OK: every step within 2e-2 of the f32 reference");
    if args.bench {
        bench(&cfg, &block, &dev, &ckpt, args.bits)?;
    }
    Ok(())
}

#[cfg(not(feature = "candle-cuda"))]
fn bench(_: &Config, _: &Block, _: &Device, _: &Checkpoint, _: usize) -> anyhow::Result<()> {
    anyhow::bail!("--bench needs a CUDA build: --features candle-cuda")
}

/// Median GPU time (us) of `run` on the candle device's stream, L2 flushed clean before each.
#[cfg(feature = "candle-cuda")]
fn time_us(
    ctx: &tilus::runtime::Context,
    flush: &mut tilus::runtime::L2Flush,
    mut run: impl FnMut() -> candle_core::Result<()>,
) -> anyhow::Result<f64> {
    let timing = tilus::runtime::time_runs(ctx, 3, 20, Some(flush), || {
        run().map_err(|e| tilus::runtime::RuntimeError::InvalidArgument {
            arg: "the timed candle call".into(),
            reason: e.to_string(),
        })
    })?;
    Ok(timing.median_us)
}

#[cfg(feature = "candle-cuda")]
fn bench(
    cfg: &Config,
    block: &Block,
    dev: &Device,
    ckpt: &Checkpoint,
    bits: usize,
) -> anyhow::Result<()> {
    let Device::Cuda(cuda) = dev else {
        anyhow::bail!("--bench needs --device cuda");
    };
    let ctx = tilus::candle::context_for(cuda)?;
    let mut flush = tilus::runtime::L2Flush::with_mode(&ctx, tilus::runtime::L2Mode::Clean)?;
    println!(
        "\nbench: {} layer, GPTQ {bits}-bit, f16 activations, {}",
        cfg_name(cfg),
        ctx.device().name
    );
    for m in [1usize, 16] {
        let cache_len = 512;
        let us = decode_step_us(&ctx, &mut flush, block, m, cache_len)?;
        println!("decode step, m = {m:2}, {cache_len} cached positions: {us:8.1} us");
    }
    println!(
        "\n| layer | k x n | m | tilus us | Q4_0 us | Q4_K us | Q8_0 us | vs Q4_0 | vs Q4_K | vs Q8_0 |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for ((name, parts), lin) in block_linears(block.fused)
        .into_iter()
        .zip(block.linears.iter())
    {
        let Linear::Tilus(layer) = lin else {
            unreachable!()
        };
        let (k, n) = (layer.k(), layer.n());
        // candle quantizes the same dequantized weight, in its [n, k] convention.
        let (_, dense) = import_linear(ckpt, &parts)?;
        let w = Tensor::from_vec(dense, (k, n), &Device::Cpu)?
            .t()?
            .contiguous()?;
        let mut candle_mms = Vec::new();
        for dt in [GgmlDType::Q4_0, GgmlDType::Q4K, GgmlDType::Q8_0] {
            let q = QTensor::quantize(&w.to_device(dev)?, dt)?;
            candle_mms.push(QMatMul::from_qtensor(q)?);
        }
        for m in [1usize, 16] {
            let x = Tensor::randn(0f32, 1.0, (m, k), dev)?;
            let x16 = x.to_dtype(DType::F16)?;
            let ours = time_us(&ctx, &mut flush, || layer.forward(&x16).map(|_| ()))?;
            let theirs: Vec<f64> = candle_mms
                .iter()
                .map(|mm| time_us(&ctx, &mut flush, || mm.forward(&x).map(|_| ())))
                .collect::<anyhow::Result<_>>()?;
            println!(
                "| {name} | {k} x {n} | {m} | {ours:.1} | {:.1} | {:.1} | {:.1} | {:.2}x | {:.2}x | {:.2}x |",
                theirs[0],
                theirs[1],
                theirs[2],
                theirs[0] / ours,
                theirs[1] / ours,
                theirs[2] / ours
            );
        }
    }
    Ok(())
}

#[cfg(feature = "candle-cuda")]
fn cfg_name(cfg: &Config) -> &'static str {
    match cfg.hidden {
        512 => "tiny",
        4096 => "Llama-3-8B",
        _ => "Llama-3-70B",
    }
}

/// The GPU time of one step of `m` tokens after `cache_len` cached positions (random cache).
#[cfg(feature = "candle-cuda")]
fn decode_step_us(
    ctx: &tilus::runtime::Context,
    flush: &mut tilus::runtime::L2Flush,
    block: &Block,
    m: usize,
    cache_len: usize,
) -> anyhow::Result<f64> {
    let c = block.cfg;
    let dev = block.cos.device().clone();
    let x = Tensor::randn(0f32, 1.0, (1, m, c.hidden), &dev)?.to_dtype(DType::F16)?;
    let (cos, sin) = rope_tables(&c, cache_len + m, DType::F16, &dev)?;
    // The tilus path's cache: random keys and values at the first cache_len positions.
    let cache = Kv::fixed(&c, cache_len + m, &dev)?;
    if let Kv::Fixed { k, v, .. } = &cache {
        let old = Tensor::randn(0f32, 1.0, (1, cache_len, c.kv_heads, c.head_dim), &dev)?
            .to_dtype(DType::F16)?;
        k.slice_set(&old, 1, 0)?;
        v.slice_set(&old, 1, 0)?;
    }
    let mut step = Block {
        cos,
        sin,
        cache,
        ..block.clone()
    };
    // Each run writes the step's keys and values at cache_len.. and attends: the same work
    // every time.
    let mut run = || -> candle_core::Result<()> { step.forward(&x, cache_len).map(|_| ()) };
    run()?; // tunes the m bucket of every linear
    time_us(ctx, flush, run)
}
