//! Decode attention over a vector-quantized KV cache (CQ-2 / CQ-4, issue 18): the format, its
//! codebooks (k-means, encode, decode) and the layer ([`CqDecodeAttention`]).
//!
//! **Format.** A token's keys of one KV head, `head_dim` values, are cut into vectors of
//! `vector` consecutive channels (4 for CQ-2, 2 for CQ-4); each vector is stored as one byte,
//! the index of the nearest of 256 entries of a codebook: 2 or 4 bits per value. Values are
//! stored the same way with codebooks of their own. A KV head has one codebook for all its
//! vectors, or with `per_group` one per channel group (vector position), as coupled
//! quantization learns them. The cache is contiguous: `k_codes`, `v_codes` `[batch, max_len,
//! kv_heads, head_dim / vector]` bytes (sequence `b`'s token `t` at row `b · max_len + t`);
//! the codebooks `[kv_heads, books, 256, vector]` of the activation type.
//!
//! The kernel is [`super::cq_kernel::attention_decode_cq`]; the combine step of flash decoding
//! is the f16 cache's ([`super::kernel::attention_combine`]).

use std::sync::Mutex;

use super::cq_kernel::{attention_decode_cq, cq_append};
use super::kernel::attention_combine;
use crate::element::Activation;
use crate::gpu::GpuArg;
use crate::macro_support::KernelError;
use crate::vq::kmeans::{assign, kmeans, KmeansOptions};
use tilus_core::DType;
use tilus_runtime::{Context, DeviceBuffer, DeviceRead, DeviceWrite};

/// Entries of every codebook.
pub const ENTRIES: usize = 256;

/// A CQ format: the vector size and whether each channel group has its own codebook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqFormat {
    /// Channels per code: 4 (CQ-2, 2 bits per value) or 2 (CQ-4, 4 bits per value).
    pub vector: usize,
    /// One codebook per channel group (`head_dim / vector` per KV head) instead of one per head.
    pub per_group: bool,
}

impl CqFormat {
    /// CQ-2: vectors of 4 channels, 256 entries, one codebook per KV head.
    pub const CQ2: CqFormat = CqFormat {
        vector: 4,
        per_group: false,
    };
    /// CQ-4: vectors of 2 channels, 256 entries, one codebook per KV head.
    pub const CQ4: CqFormat = CqFormat {
        vector: 2,
        per_group: false,
    };

    /// `cq2`, `cq4`, or with one codebook per channel group `cq2g`, `cq4g`.
    pub fn by_name(name: &str) -> Option<CqFormat> {
        let (base, per_group) = match name.strip_suffix('g') {
            Some(b) => (b, true),
            None => (name, false),
        };
        let vector = match base {
            "cq2" => 4,
            "cq4" => 2,
            _ => return None,
        };
        Some(CqFormat { vector, per_group })
    }

    pub fn name(&self) -> String {
        let base = if self.vector == 4 { "cq2" } else { "cq4" };
        format!("{base}{}", if self.per_group { "g" } else { "" })
    }

    pub fn bits_per_value(&self) -> f64 {
        8.0 / self.vector as f64
    }

    /// Codebooks per KV head.
    pub fn books(&self, head_dim: usize) -> usize {
        if self.per_group {
            head_dim / self.vector
        } else {
            1
        }
    }

    /// Codes (bytes) per token and KV head.
    pub fn codes(&self, head_dim: usize) -> usize {
        head_dim / self.vector
    }

    fn validate(&self) -> Result<(), KernelError> {
        if self.vector != 2 && self.vector != 4 {
            return Err(bad(
                "format",
                format!("vector size {} (CQ supports 2 and 4)", self.vector),
            ));
        }
        Ok(())
    }
}

/// Which of the two caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kv {
    K,
    V,
}

/// The codebooks of one layer: `[kv_heads, books, 256, vector]` for keys and for values,
/// every value representable in f16.
#[derive(Clone, Debug, PartialEq)]
pub struct CqCodebooks {
    pub format: CqFormat,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

impl CqCodebooks {
    /// Learn the codebooks by k-means (deterministic for `opts.seed`) from sample keys and
    /// values `[tokens, kv_heads, head_dim]`, one codebook per KV head (and channel group with
    /// `per_group`); entries are rounded to f16.
    pub fn train(
        format: CqFormat,
        kv_heads: usize,
        head_dim: usize,
        k: &[f32],
        v: &[f32],
        opts: KmeansOptions,
    ) -> Result<CqCodebooks, KernelError> {
        format.validate()?;
        check_dims(kv_heads, head_dim)?;
        let row = kv_heads * head_dim;
        for (name, x) in [("k", k), ("v", v)] {
            if x.is_empty() || !x.len().is_multiple_of(row) {
                return Err(bad(
                    name,
                    format!(
                        "{} values are not a positive number of tokens of kv_heads · head_dim = {row}",
                        x.len()
                    ),
                ));
            }
            if let Some(i) = x.iter().position(|x| !x.is_finite()) {
                return Err(bad(name, format!("value at {i} is not finite")));
            }
        }
        let (vs, books) = (format.vector, format.books(head_dim));
        let per_book = format.codes(head_dim) / books;
        let learn = |x: &[f32], salt: u64| -> Vec<f32> {
            let mut out = Vec::with_capacity(kv_heads * books * ENTRIES * vs);
            for h in 0..kv_heads {
                for bk in 0..books {
                    // The vectors of head h at the positions of book bk, of every token.
                    let data: Vec<f32> = x
                        .chunks_exact(row)
                        .flat_map(|tok| {
                            let head = &tok[h * head_dim..][..head_dim];
                            head[bk * per_book * vs..][..per_book * vs].iter().copied()
                        })
                        .collect();
                    let seed = opts.seed ^ salt ^ ((h * books + bk) as u64).wrapping_mul(0x9E37);
                    let (book, _) = kmeans(&data, vs, ENTRIES, KmeansOptions { seed, ..opts });
                    out.extend(book.iter().map(|&x| crate::vq::round_f16(x)));
                }
            }
            out
        };
        Ok(CqCodebooks {
            format,
            kv_heads,
            head_dim,
            k: learn(k, 0x4B),
            v: learn(v, 0x56),
        })
    }

    /// Random codebooks (entries uniform in `[-1, 1)`, f16), for tests and benchmarks.
    pub fn random(
        format: CqFormat,
        kv_heads: usize,
        head_dim: usize,
        seed: u64,
    ) -> Result<CqCodebooks, KernelError> {
        use rand::{Rng, SeedableRng};
        format.validate()?;
        check_dims(kv_heads, head_dim)?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let len = kv_heads * format.books(head_dim) * ENTRIES * format.vector;
        let mut gen = || -> Vec<f32> {
            (0..len)
                .map(|_| crate::vq::round_f16(rng.random_range(-1.0f32..1.0)))
                .collect()
        };
        let (k, v) = (gen(), gen());
        Ok(CqCodebooks {
            format,
            kv_heads,
            head_dim,
            k,
            v,
        })
    }

    fn book(&self, which: Kv) -> &[f32] {
        match which {
            Kv::K => &self.k,
            Kv::V => &self.v,
        }
    }

    /// The codebook of vector position `j` of head `h`: `[256, vector]`.
    fn book_of(&self, which: Kv, h: usize, j: usize) -> &[f32] {
        let books = self.format.books(self.head_dim);
        let bk = j / (self.format.codes(self.head_dim) / books);
        let size = ENTRIES * self.format.vector;
        &self.book(which)[(h * books + bk) * size..][..size]
    }

    /// The codes of `x` `[tokens, kv_heads, head_dim]`: the nearest entry of each vector,
    /// `[tokens, kv_heads, head_dim / vector]`.
    pub fn encode(&self, which: Kv, x: &[f32]) -> Result<Vec<u8>, KernelError> {
        let (d, vs) = (self.head_dim, self.format.vector);
        let row = self.kv_heads * d;
        if !x.len().is_multiple_of(row) {
            return Err(bad(
                "x",
                format!(
                    "{} values are not whole tokens of kv_heads · head_dim = {row}",
                    x.len()
                ),
            ));
        }
        let nj = self.format.codes(d);
        let mut out = Vec::with_capacity(x.len() / vs);
        for tok in x.chunks_exact(row) {
            for h in 0..self.kv_heads {
                for j in 0..nj {
                    let v = &tok[h * d + j * vs..][..vs];
                    out.push(assign(v, vs, self.book_of(which, h, j))[0] as u8);
                }
            }
        }
        Ok(out)
    }

    /// The values `codes` `[tokens, kv_heads, head_dim / vector]` stand for, each entry first
    /// converted to `T` (what the kernel of activation type `T` reads), in f64.
    pub fn decode<T: Activation>(&self, which: Kv, codes: &[u8]) -> Vec<f64> {
        let (d, vs) = (self.head_dim, self.format.vector);
        let nj = self.format.codes(d);
        let mut out = Vec::with_capacity(codes.len() * vs);
        for (i, &c) in codes.iter().enumerate() {
            let (h, j) = (i / nj % self.kv_heads, i % nj);
            let entry = &self.book_of(which, h, j)[c as usize * vs..][..vs];
            out.extend(entry.iter().map(|&x| T::from_f32(x).to_f32() as f64));
        }
        out
    }

    /// The codebooks converted to the activation type, as the kernel reads them.
    pub fn to_activation<T: Activation>(&self, which: Kv) -> Vec<T> {
        self.book(which).iter().map(|&x| T::from_f32(x)).collect()
    }

    /// Bytes of both codebooks in a 16-bit activation type.
    pub fn bytes(&self) -> usize {
        2 * (self.k.len() + self.v.len())
    }
}

fn check_dims(kv_heads: usize, head_dim: usize) -> Result<(), KernelError> {
    if kv_heads == 0 {
        return Err(bad("kv_heads", "must be at least 1"));
    }
    if head_dim != 128 {
        return Err(bad(
            "head_dim",
            format!("{head_dim} is not supported by the CQ kernel (128)"),
        ));
    }
    Ok(())
}

fn bad(arg: &str, message: impl std::fmt::Display) -> KernelError {
    KernelError::BadArgument {
        kernel: attention_decode_cq::NAME,
        config: "-".to_string(),
        message: format!("{arg}: {message}"),
    }
}

/// The shape of a decode step over a contiguous CQ cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqShape {
    pub batch: usize,
    /// Query heads, a multiple of `kv_heads`, at most 16 per KV head.
    pub q_heads: usize,
    pub kv_heads: usize,
    /// 128.
    pub head_dim: usize,
    /// Rows per sequence of the cache.
    pub max_len: usize,
}

impl CqShape {
    /// Elements of `q` and `out`: `[batch, q_heads, head_dim]`.
    pub fn q_len(&self) -> usize {
        self.batch * self.q_heads * self.head_dim
    }

    /// Bytes of each of `k_codes`, `v_codes`.
    pub fn code_bytes(&self, format: CqFormat) -> usize {
        self.batch * self.max_len * self.kv_heads * format.codes(self.head_dim)
    }

    /// Elements of each of `k_books`, `v_books`.
    pub fn book_len(&self, format: CqFormat) -> usize {
        self.kv_heads * format.books(self.head_dim) * ENTRIES * format.vector
    }

    fn validate(&self) -> Result<(), KernelError> {
        if self.batch == 0 {
            return Err(bad("batch", "must be at least 1"));
        }
        check_dims(self.kv_heads, self.head_dim)?;
        if self.q_heads == 0 || !self.q_heads.is_multiple_of(self.kv_heads) {
            return Err(bad(
                "q_heads",
                format!(
                    "{} is not a positive multiple of kv_heads = {}",
                    self.q_heads, self.kv_heads
                ),
            ));
        }
        if self.q_heads / self.kv_heads > 16 {
            return Err(bad(
                "q_heads",
                "at most 16 query heads per KV head are supported",
            ));
        }
        if self.max_len == 0 {
            return Err(bad("max_len", "must be at least 1"));
        }
        // Extents are i32: the code views are `[batch · max_len, kv_heads · words]`.
        let fits = |v: Option<usize>| v.is_some_and(|v| v <= i32::MAX as usize);
        if !fits(self.batch.checked_mul(self.max_len))
            || !fits(self.batch.checked_mul(self.q_heads * self.head_dim))
        {
            return Err(bad(
                "batch",
                "batch · max_len and batch · q_heads · head_dim must fit an i32",
            ));
        }
        Ok(())
    }
}

/// The tile and occupancy parameters of the CQ kernel ([`CqTuning::default_for`] is what
/// [`CqDecodeAttention::new`] uses; `tilus bench attention --kv cq2 --sweep` measures others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqTuning {
    /// Tokens per warp and block tile: 32 or 16.
    pub tile: usize,
    /// Copies of a per-head codebook in shared memory: 16 (look-ups never conflict on a bank)
    /// or 8 (half the shared memory; two lanes of a phase collide half the time).
    pub replicas: usize,
    /// Blocks per multiprocessor the registers are limited for: 1 (no limit) or 3 (with 8
    /// replicas the shared memory admits three blocks).
    pub blocks_per_sm: usize,
}

impl CqTuning {
    /// 32 tokens per warp, 16 codebook copies, no register limit: the fastest of the sweep at
    /// every measured point (batch 1 to 64, 8k and 32k tokens; docs/vq.md).
    pub fn default_for(_shape: &CqShape) -> CqTuning {
        CqTuning {
            tile: 32,
            replicas: 16,
            blocks_per_sm: 1,
        }
    }

    fn validate(&self) -> Result<(), KernelError> {
        if self.tile != 16 && self.tile != 32 {
            return Err(bad("tile", format!("{} (16 or 32)", self.tile)));
        }
        if self.replicas != 8 && self.replicas != 16 {
            return Err(bad("replicas", format!("{} (8 or 16)", self.replicas)));
        }
        if self.blocks_per_sm != 1 && self.blocks_per_sm != 3 {
            return Err(bad(
                "blocks_per_sm",
                format!("{} (1 or 3)", self.blocks_per_sm),
            ));
        }
        Ok(())
    }

    /// Blocks resident per multiprocessor: shared memory admits two with 16 copies, three
    /// with 8 when the registers are limited for three.
    fn resident(&self) -> usize {
        if self.replicas == 8 && self.blocks_per_sm == 3 {
            3
        } else {
            2
        }
    }
}

/// Decode attention over a CQ cache: `out[b, i] = softmax(scale · q[b, i] · Kᵀ) · V` over the
/// tokens `0..seq_lens[b]` of sequence `b`, `K` and `V` the values the codes stand for.
pub struct CqDecodeAttention {
    shape: CqShape,
    format: CqFormat,
    scale: f32,
    max_seq_len: usize,
    tuning: CqTuning,
    workspace: Mutex<CqWorkspace>,
}

/// Split-KV partial outputs and their `(m, l)` statistics, kept between runs: each made by the
/// first run that needs it and grown by one that needs more ([`DeviceBuffer::grow_zeroed`]).
#[derive(Default)]
struct CqWorkspace {
    part_o: Option<DeviceBuffer<f32>>,
    part_ml: Option<DeviceBuffer<f32>>,
}

/// Warps per block of the CQ kernel.
const WARPS: usize = 4;

impl CqDecodeAttention {
    /// `scale` multiplies the scores (usually `1 / sqrt(head_dim)`); `max_seq_len` is the
    /// longest sequence expected, used only to divide the work.
    pub fn new(
        shape: CqShape,
        format: CqFormat,
        scale: f32,
        max_seq_len: usize,
    ) -> Result<CqDecodeAttention, KernelError> {
        shape.validate()?;
        format.validate()?;
        if !scale.is_finite() {
            return Err(bad("scale", format!("{scale} is not finite")));
        }
        Ok(CqDecodeAttention {
            shape,
            format,
            scale,
            max_seq_len: max_seq_len.clamp(1, shape.max_len),
            tuning: CqTuning::default_for(&shape),
            workspace: Mutex::new(CqWorkspace::default()),
        })
    }

    /// Use `tuning` instead of [`CqTuning::default_for`] (checked here).
    pub fn with_tuning(mut self, tuning: CqTuning) -> Result<CqDecodeAttention, KernelError> {
        tuning.validate()?;
        self.tuning = tuning;
        Ok(self)
    }

    pub fn tuning(&self) -> &CqTuning {
        &self.tuning
    }

    pub fn shape(&self) -> &CqShape {
        &self.shape
    }

    /// The kernel configuration for activation type `dtype`.
    pub fn config(&self, dtype: DType) -> attention_decode_cq::Config {
        attention_decode_cq::Config {
            D: self.shape.head_dim as i32,
            V: self.format.vector as i32,
            NW: WARPS as i32,
            TW: self.tuning.tile as i32,
            STAGES: 4,
            PG: i32::from(self.format.per_group),
            REP: self.tuning.replicas as i32,
            OCC: self.tuning.blocks_per_sm as i32,
            A: dtype,
        }
    }

    /// Splits of each sequence on `multiprocessors` multiprocessors: one wave of resident
    /// blocks (two or three per multiprocessor) over all (sequence, KV head) pairs, no split
    /// under 4 block tiles.
    pub fn splits_for(&self, multiprocessors: usize) -> usize {
        let pairs = self.shape.batch * self.shape.kv_heads;
        let target = (self.tuning.resident() * multiprocessors)
            .div_ceil(pairs)
            .max(1);
        let longest = self
            .max_seq_len
            .div_ceil(4 * WARPS * self.tuning.tile)
            .max(1);
        target.min(longest).min(1024)
    }

    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        dtype: DType,
        q: usize,
        k: usize,
        v: usize,
        kb: usize,
        vb: usize,
        lens: usize,
        out: usize,
    ) -> Result<(), KernelError> {
        if dtype != DType::F16 && dtype != DType::BF16 {
            return Err(bad("dtype", format!("{dtype} is not f16 or bf16")));
        }
        let s = &self.shape;
        let need = [
            ("q", q, s.q_len()),
            ("k_codes", k, s.code_bytes(self.format)),
            ("v_codes", v, s.code_bytes(self.format)),
            ("k_books", kb, s.book_len(self.format)),
            ("v_books", vb, s.book_len(self.format)),
            ("seq_lens", lens, s.batch),
            ("out", out, s.q_len()),
        ];
        for (name, have, want) in need {
            if have != want {
                return Err(bad(
                    name,
                    format!("holds {have} elements, the shape needs {want}"),
                ));
            }
        }
        Ok(())
    }

    fn scalars(&self, splits: usize) -> [i32; 5] {
        let s = &self.shape;
        [
            s.batch as i32,
            s.kv_heads as i32,
            (s.q_heads / s.kv_heads) as i32,
            splits as i32,
            s.max_len as i32,
        ]
    }

    /// Run on `ctx`'s stream: `q`, `out` `[batch, q_heads, head_dim]`; the codes and codebooks
    /// as the module docs say; `seq_lens [batch]` (a length is clamped to `[0, max_len]`).
    /// Two launches (the kernel and the combine step); returns when they are queued.
    #[allow(clippy::too_many_arguments)]
    pub fn run<T: Activation>(
        &self,
        ctx: &Context,
        q: &impl DeviceRead<T>,
        k_codes: &impl DeviceRead<u8>,
        v_codes: &impl DeviceRead<u8>,
        k_books: &impl DeviceRead<T>,
        v_books: &impl DeviceRead<T>,
        seq_lens: &impl DeviceRead<i32>,
        out: &mut impl DeviceWrite<T>,
    ) -> Result<(), KernelError> {
        self.check(
            T::DTYPE,
            q.elements(),
            k_codes.elements(),
            v_codes.elements(),
            k_books.elements(),
            v_books.elements(),
            seq_lens.elements(),
            out.elements(),
        )?;
        let splits = self.splits_for(ctx.device().multiprocessors as usize);
        let cfg = self.config(T::DTYPE);
        let parts = splits * WARPS * self.shape.batch * self.shape.q_heads;
        let need = parts * self.shape.head_dim;
        let mut ws = self.workspace.lock().unwrap_or_else(|p| p.into_inner());
        let ws = &mut *ws;
        let part_o = DeviceBuffer::grow_zeroed(&mut ws.part_o, ctx, need)?;
        let part_ml = DeviceBuffer::grow_zeroed(&mut ws.part_ml, ctx, parts * 2)?;
        let [batch, kv_heads, group, splits_i, stride] = self.scalars(splits);
        let kernel =
            attention_decode_cq::instance(&cfg)?.kernel(attention_decode_cq::NAME, &cfg)?;
        kernel
            .launch(
                ctx,
                vec![
                    GpuArg::I32(batch),
                    GpuArg::I32(kv_heads),
                    GpuArg::I32(group),
                    GpuArg::I32(splits_i),
                    GpuArg::I32(stride),
                    GpuArg::F32(self.scale * std::f32::consts::LOG2_E),
                    GpuArg::InBytes(q),
                    GpuArg::In(k_codes),
                    GpuArg::In(v_codes),
                    GpuArg::InBytes(k_books),
                    GpuArg::InBytes(v_books),
                    GpuArg::In(seq_lens),
                    GpuArg::Out(&mut *part_o),
                    GpuArg::Out(&mut *part_ml),
                ],
            )
            .map_err(|e| KernelError::launch(attention_decode_cq::NAME, &cfg, e))?;
        let ccfg = attention_combine::Config {
            D: self.shape.head_dim as i32,
            A: T::DTYPE,
        };
        let combine = attention_combine::instance(&ccfg)?.kernel(attention_combine::NAME, &ccfg)?;
        combine
            .launch(
                ctx,
                vec![
                    GpuArg::I32(batch),
                    GpuArg::I32(kv_heads),
                    GpuArg::I32(group),
                    GpuArg::I32(splits_i * WARPS as i32),
                    GpuArg::In(&*part_o),
                    GpuArg::In(&*part_ml),
                    GpuArg::OutBytes(out),
                ],
            )
            .map_err(|e| KernelError::launch(attention_combine::NAME, &ccfg, e))
    }

    /// [`run`](Self::run) on the CPU interpreter with `splits` splits.
    #[allow(clippy::too_many_arguments)]
    pub fn run_cpu<T: Activation>(
        &self,
        splits: usize,
        q: &[T],
        k_codes: &[u8],
        v_codes: &[u8],
        k_books: &[T],
        v_books: &[T],
        seq_lens: &[i32],
        out: &mut [T],
    ) -> Result<(), KernelError> {
        self.check(
            T::DTYPE,
            q.len(),
            k_codes.len(),
            v_codes.len(),
            k_books.len(),
            v_books.len(),
            seq_lens.len(),
            out.len(),
        )?;
        if splits == 0 || splits > 1024 {
            return Err(bad("splits", format!("{splits} (1 to 1024)")));
        }
        let cfg = self.config(T::DTYPE);
        let parts = splits * WARPS * self.shape.batch * self.shape.q_heads;
        let mut part_o = vec![f32::NAN; parts * self.shape.head_dim];
        let mut part_ml = vec![f32::NAN; parts * 2];
        let [batch, kv_heads, group, splits_i, stride] = self.scalars(splits);
        let (qb, kb, vb) = (T::to_bytes(q), T::to_bytes(k_books), T::to_bytes(v_books));
        attention_decode_cq::interpret(
            &cfg,
            batch,
            kv_heads,
            group,
            splits_i,
            stride,
            self.scale * std::f32::consts::LOG2_E,
            &qb,
            k_codes,
            v_codes,
            &kb,
            &vb,
            seq_lens,
            &mut part_o,
            &mut part_ml,
        )?;
        let ccfg = attention_combine::Config {
            D: self.shape.head_dim as i32,
            A: T::DTYPE,
        };
        let mut ob = T::to_bytes(out);
        let n = splits_i * WARPS as i32;
        attention_combine::interpret(&ccfg, batch, kv_heads, group, n, &part_o, &part_ml, &mut ob)?;
        T::copy_from_bytes(&ob, out);
        Ok(())
    }
}

impl CqDecodeAttention {
    fn append_config(&self, dtype: DType) -> cq_append::Config {
        cq_append::Config {
            D: self.shape.head_dim as i32,
            V: self.format.vector as i32,
            PG: i32::from(self.format.per_group),
            A: dtype,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_append(
        &self,
        dtype: DType,
        new: (usize, usize),
        slots: usize,
        books: (usize, usize),
        codes: (usize, usize),
    ) -> Result<i32, KernelError> {
        if dtype != DType::F16 && dtype != DType::BF16 {
            return Err(bad("dtype", format!("{dtype} is not f16 or bf16")));
        }
        let s = &self.shape;
        let per_token = s.kv_heads * s.head_dim;
        let need = [
            ("new_k", new.0, slots * per_token),
            ("new_v", new.1, slots * per_token),
            ("k_books", books.0, s.book_len(self.format)),
            ("v_books", books.1, s.book_len(self.format)),
            ("k_codes", codes.0, s.code_bytes(self.format)),
            ("v_codes", codes.1, s.code_bytes(self.format)),
        ];
        for (name, have, want) in need {
            if have != want {
                return Err(bad(
                    name,
                    format!("holds {have} elements, {want} expected ({slots} slots)"),
                ));
            }
        }
        i32::try_from(slots)
            .ok()
            .filter(|_| slots * per_token <= i32::MAX as usize)
            .ok_or_else(|| bad("slots", format!("{slots} tokens do not fit an i32 view")))
    }

    /// Encode `new_k`, `new_v` `[tokens, kv_heads, head_dim]` (`tokens = slots.len()`) on the
    /// GPU and write the codes to cache rows `slots` (`b · max_len + t` for sequence `b`'s token
    /// `t`; a slot outside the cache skips its token): each vector's nearest entry of its
    /// codebook as `T` (squared distance in f32; ties to the lower entry, near-ties within f32
    /// rounding either way). One launch.
    #[allow(clippy::too_many_arguments)]
    pub fn append<T: Activation>(
        &self,
        ctx: &Context,
        new_k: &impl DeviceRead<T>,
        new_v: &impl DeviceRead<T>,
        slots: &impl DeviceRead<i32>,
        k_books: &impl DeviceRead<T>,
        v_books: &impl DeviceRead<T>,
        k_codes: &mut impl DeviceWrite<u8>,
        v_codes: &mut impl DeviceWrite<u8>,
    ) -> Result<(), KernelError> {
        let tokens = self.check_append(
            T::DTYPE,
            (new_k.elements(), new_v.elements()),
            slots.elements(),
            (k_books.elements(), v_books.elements()),
            (k_codes.elements(), v_codes.elements()),
        )?;
        if tokens == 0 {
            return Ok(());
        }
        let cfg = self.append_config(T::DTYPE);
        let s = &self.shape;
        let kernel = cq_append::instance(&cfg)?.kernel(cq_append::NAME, &cfg)?;
        kernel
            .launch(
                ctx,
                vec![
                    GpuArg::I32(tokens),
                    GpuArg::I32(s.kv_heads as i32),
                    GpuArg::I32((s.batch * s.max_len) as i32),
                    GpuArg::InBytes(new_k),
                    GpuArg::InBytes(new_v),
                    GpuArg::In(slots),
                    GpuArg::InBytes(k_books),
                    GpuArg::InBytes(v_books),
                    GpuArg::Out(k_codes),
                    GpuArg::Out(v_codes),
                ],
            )
            .map_err(|e| KernelError::launch(cq_append::NAME, &cfg, e))
    }

    /// [`append`](Self::append) on the CPU interpreter.
    #[allow(clippy::too_many_arguments)]
    pub fn append_cpu<T: Activation>(
        &self,
        new_k: &[T],
        new_v: &[T],
        slots: &[i32],
        k_books: &[T],
        v_books: &[T],
        k_codes: &mut [u8],
        v_codes: &mut [u8],
    ) -> Result<(), KernelError> {
        let tokens = self.check_append(
            T::DTYPE,
            (new_k.len(), new_v.len()),
            slots.len(),
            (k_books.len(), v_books.len()),
            (k_codes.len(), v_codes.len()),
        )?;
        if tokens == 0 {
            return Ok(());
        }
        let cfg = self.append_config(T::DTYPE);
        let s = &self.shape;
        cq_append::interpret(
            &cfg,
            tokens,
            s.kv_heads as i32,
            (s.batch * s.max_len) as i32,
            &T::to_bytes(new_k),
            &T::to_bytes(new_v),
            slots,
            &T::to_bytes(k_books),
            &T::to_bytes(v_books),
            k_codes,
            v_codes,
        )?;
        Ok(())
    }
}

/// The attention of one decode step in f64 over the values the codes stand for (each
/// codebook entry converted to `T`), for tests: `q [batch, q_heads, head_dim]` as f64.
pub fn reference<T: Activation>(
    shape: &CqShape,
    books: &CqCodebooks,
    scale: f64,
    q: &[f64],
    k_codes: &[u8],
    v_codes: &[u8],
    seq_lens: &[i32],
) -> Vec<f64> {
    use super::decode::{reference as dense, CacheLayout, DecodeShape, KvFormat};
    let dense_shape = DecodeShape {
        batch: shape.batch,
        q_heads: shape.q_heads,
        kv_heads: shape.kv_heads,
        head_dim: shape.head_dim,
        cache: CacheLayout::Contiguous {
            max_len: shape.max_len,
        },
        kv: KvFormat::Activation,
    };
    let k = books.decode::<T>(Kv::K, k_codes);
    let v = books.decode::<T>(Kv::V, v_codes);
    let lens: Vec<i32> = seq_lens
        .iter()
        .map(|&l| l.clamp(0, shape.max_len as i32))
        .collect();
    dense(&dense_shape, scale, None, q, &k, &v, None, &lens)
}
