//! The KV cache's storage formats: the activation type as is, or quantized codes with a scale
//! and zero point per token and KV head ([`KvFormat`]); the host-side quantizer that defines
//! the codes ([`quantize_head`], [`quantize_cache`]) and its inverse.

use tilus_core::storage;
use tilus_core::DType;

/// How the cache stores keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvFormat {
    /// The activation type (f16 or bf16), as is.
    Activation,
    /// Codes of a type of at most 8 bits (`i8`, `f8e4m3`, `u4`, ...) packed with no gaps, each
    /// head of each token with its own scale and zero point, `value = (code - zero) · scale`
    /// (`kv_meta` holds `(scale, zero)` as f32 `[kv_heads, rows, 2]`). Signed integer and float
    /// codes are symmetric (zero point 0, `scale = max|x| / max code`); unsigned codes span
    /// `[min x, max x]` ([`quantize_head`]).
    Quantized(DType),
}

impl KvFormat {
    /// Bits per stored element, with `activation` the activation type.
    pub fn bits(&self, activation: DType) -> usize {
        match self {
            KvFormat::Activation => activation.bits() as usize,
            KvFormat::Quantized(t) => t.bits() as usize,
        }
    }
}

/// Quantize one head of one token, `x` (`head_dim` values), to codes of `dtype`: returns the
/// codes and `(scale, zero)` with `x ≈ (code - zero) · scale`.
///
/// - Signed integer and float codes are symmetric: `scale = max|x| / max code`, `zero = 0`,
///   `code = encode(x / scale)` (round to nearest even, saturating).
/// - Unsigned integer codes span the values: `scale = (max x - min x) / max code`,
///   `zero = -min x / scale`, `code = encode(x / scale + zero)`.
///
/// A constant or zero vector gets a tiny positive scale, so every code decodes to a finite
/// value and `0` stays exactly `0`; a NaN value gets code 0. The GPU's `kv_append` computes the
/// same formulas in f32.
pub fn quantize_head(dtype: DType, x: &[f32]) -> (Vec<u32>, f32, f32) {
    let qmax = dtype.max_value() as f32;
    let (mn, mx) = x
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let amax = mn.abs().max(mx.abs());
    let symmetric = !matches!(dtype, DType::UInt(_));
    // The same f32 operations as the GPU's `kv_append_quantized`, in the same order.
    let inv_qmax = 1.0 / qmax;
    let (scale, zero) = if symmetric {
        (amax.max(1e-30) * inv_qmax, 0.0)
    } else {
        let scale = (mx - mn).max(amax * 1e-6).max(1e-30) * inv_qmax;
        (scale, -mn / scale)
    };
    let inv = 1.0 / scale;
    let codes = x
        .iter()
        .map(|&v| dtype.encode(v * inv + zero).unwrap_or(0))
        .collect();
    (codes, scale, zero)
}

/// The value a code stands for.
pub fn dequantize(dtype: DType, code: u32, scale: f32, zero: f32) -> f64 {
    (dtype.decode(code) - zero as f64) * scale as f64
}

/// A quantized K or V cache on the host: packed codes and `(scale, zero)` `[kv_heads, rows, 2]`.
#[derive(Clone, Debug)]
pub struct QuantizedCache {
    pub codes: Vec<u8>,
    pub meta: Vec<f32>,
}

impl QuantizedCache {
    /// The values the cache stands for, `[rows, kv_heads, head_dim]`.
    pub fn values(&self, dtype: DType, kv_heads: usize, head_dim: usize) -> Vec<f64> {
        let rows = self.meta.len() / (2 * kv_heads);
        let codes = storage::unpack(dtype, &self.codes, rows * kv_heads * head_dim);
        codes
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let (r, h) = (i / (kv_heads * head_dim), i / head_dim % kv_heads);
                let m = 2 * (h * rows + r);
                dequantize(dtype, c, self.meta[m], self.meta[m + 1])
            })
            .collect()
    }
}

/// Quantize a whole cache `x` `[rows, kv_heads, head_dim]` with [`quantize_head`] per token
/// and head.
pub fn quantize_cache(dtype: DType, kv_heads: usize, head_dim: usize, x: &[f32]) -> QuantizedCache {
    let rows = x.len() / (kv_heads * head_dim);
    let mut codes = Vec::with_capacity(x.len());
    let mut meta = vec![0.0f32; 2 * kv_heads * rows];
    for (i, head) in x.chunks(head_dim).enumerate() {
        let (r, h) = (i / kv_heads, i % kv_heads);
        let (c, scale, zero) = quantize_head(dtype, head);
        codes.extend(c);
        meta[2 * (h * rows + r)] = scale;
        meta[2 * (h * rows + r) + 1] = zero;
    }
    QuantizedCache {
        codes: storage::pack(dtype, &codes),
        meta,
    }
}
