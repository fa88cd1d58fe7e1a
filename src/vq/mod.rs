//! Vector-quantized weights (VQ-LLM, issue 18, `docs/vq.md`): the formats, the [`VqWeight`]
//! type, codebooks built with k-means ([`kmeans`]), entries reordered by access frequency (for
//! the kernels' codebook cache, [`crate::kernels::vq`]), weights loaded from AQLM's tensors
//! ([`aqlm`]), and QuIP#'s E8P lattice codebook ([`e8p`]) with its checkpoints' codes
//! ([`quip`]).
//!
//! **Convention.** A weight is `W [n, k]` (output channels x input channels, row-major, as
//! PyTorch's `Linear`). Each row is cut into vectors of `V = vector_size` consecutive input
//! channels; vector `j` of row `r` is `W[r, j·V .. (j+1)·V]`. It is stored as one code per
//! residual stage, and reconstructed as
//!
//! `W[r, j·V + e] = scale[r] · Σ_s codebooks[g, s, codes[s, r, j], e]`
//!
//! (`scale[r] = 1` for formats without scales), where `g` is the codebook group of the tile
//! holding `(r, j·V)` ([`CodebookScope`]). Stages are summed in order `s = 0, 1, ..` in f32,
//! then scaled: [`VqWeight::dequantize`] does exactly that.
//!
//! Codebook values (and scales) are f16-representable, so the kernels, which read them as f16,
//! see exactly the host's values.

pub mod aqlm;
pub mod e8p;
pub mod kmeans;
pub mod quip;

use half::f16;

/// Which part of the weight shares one codebook (one set of `residuals` codebooks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodebookScope {
    /// One codebook per tile of `rows x cols` of `W [n, k]`; tiles are numbered row-major,
    /// `g = (r / rows) · (k / cols) + c / cols`. `rows` must divide `n` and `cols` must divide
    /// `k` (and be a multiple of the vector size).
    Tile { rows: usize, cols: usize },
    /// One codebook for the whole matrix (AQLM).
    Matrix,
    /// One codebook per group of `cols` input channels, shared by all rows (CQ's channel
    /// groups of a KV cache viewed as `[tokens, channels]`).
    Columns { cols: usize },
}

/// A vector-quantization format, `VQ<vector_size, log2_entries, residuals>` (paper Table II).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VqConfig {
    /// The name used by `tilus bench vq --configs`.
    pub name: &'static str,
    /// Values per vector (`V`).
    pub vector_size: usize,
    /// log2 of the entries of each codebook (at most 16).
    pub log2_entries: u32,
    /// Residual stages (codebooks summed per vector).
    pub residuals: usize,
    pub scope: CodebookScope,
    /// One scale per output channel (AQLM).
    pub channel_scale: bool,
    /// The codebooks are QuIP#'s E8P lattice ([`e8p`]), fixed by the format: 16-bit codes of
    /// 8-value vectors, decoded by the kernels from 256 absolute vectors and the sign bits.
    pub e8p: bool,
}

impl VqConfig {
    /// GPTVQ 2-bit: vectors of 4, 256 entries, one stage, one codebook per 256 x 256 tile.
    pub const GPTVQ_2: VqConfig = VqConfig {
        name: "gptvq2",
        vector_size: 4,
        log2_entries: 8,
        residuals: 1,
        scope: CodebookScope::Tile {
            rows: 256,
            cols: 256,
        },
        channel_scale: false,
        e8p: false,
    };
    /// AQLM 3-bit: vectors of 8, 4096 entries, two residual stages, one codebook per matrix,
    /// a scale per output channel.
    pub const AQLM_3: VqConfig = VqConfig {
        name: "aqlm3",
        vector_size: 8,
        log2_entries: 12,
        residuals: 2,
        scope: CodebookScope::Matrix,
        channel_scale: true,
        e8p: false,
    };
    /// AQLM 2-bit "2x8": vectors of 8, two residual codebooks of 256 entries, one per matrix, a
    /// scale per output channel (the format AQLM's own `code2x8` CUDA kernels serve).
    pub const AQLM_2X8: VqConfig = VqConfig {
        name: "aqlm2x8",
        vector_size: 8,
        log2_entries: 8,
        residuals: 2,
        scope: CodebookScope::Matrix,
        channel_scale: true,
        e8p: false,
    };
    /// QuiP# 4-bit: two E8P lattice codes per vector of 8 (the second scaled by `1 / 3.45`),
    /// one (fixed) codebook, a scale per output channel (QuIP#'s incoherence processing, the
    /// random Hadamard transforms of `x` and `y`, stays outside the layer).
    pub const QUIP_4: VqConfig = VqConfig {
        name: "quip4",
        vector_size: 8,
        log2_entries: 16,
        residuals: 2,
        scope: CodebookScope::Matrix,
        channel_scale: true,
        e8p: true,
    };
    /// CQ 2-bit (KV cache): vectors of 4 channels, 256 entries, one codebook per group of 4
    /// channels.
    pub const CQ_2: VqConfig = VqConfig {
        name: "cq2",
        vector_size: 4,
        log2_entries: 8,
        residuals: 1,
        scope: CodebookScope::Columns { cols: 4 },
        channel_scale: false,
        e8p: false,
    };
    /// CQ 4-bit (KV cache): vectors of 2 channels, 256 entries, one codebook per group of 2
    /// channels.
    pub const CQ_4: VqConfig = VqConfig {
        name: "cq4",
        vector_size: 2,
        log2_entries: 8,
        residuals: 1,
        scope: CodebookScope::Columns { cols: 2 },
        channel_scale: false,
        e8p: false,
    };

    /// The named configurations.
    pub const ALL: [VqConfig; 6] = [
        Self::GPTVQ_2,
        Self::AQLM_2X8,
        Self::AQLM_3,
        Self::QUIP_4,
        Self::CQ_2,
        Self::CQ_4,
    ];

    /// The configuration called `name` (case-insensitive, `-` and `_` ignored).
    pub fn by_name(name: &str) -> Option<VqConfig> {
        let norm: String = name
            .chars()
            .filter(|c| *c != '-' && *c != '_')
            .flat_map(char::to_lowercase)
            .collect();
        Self::ALL.into_iter().find(|c| c.name == norm)
    }

    /// Entries per codebook.
    pub fn entries(&self) -> usize {
        1 << self.log2_entries
    }

    /// Code bits per weight value (codes only).
    pub fn bits_per_value(&self) -> f64 {
        (self.log2_entries as usize * self.residuals) as f64 / self.vector_size as f64
    }

    /// Checks the configuration itself.
    pub fn validate(&self) -> Result<(), VqError> {
        if self.vector_size == 0 {
            return Err(VqError::Config("vector_size must be at least 1".into()));
        }
        if self.log2_entries == 0 || self.log2_entries > 16 {
            return Err(VqError::Config(format!(
                "log2_entries {} must lie in 1..=16 (at most 2^16 entries)",
                self.log2_entries
            )));
        }
        if self.residuals == 0 {
            return Err(VqError::Config("residuals must be at least 1".into()));
        }
        if self.e8p
            && (self.vector_size, self.log2_entries, self.scope) != (8, 16, CodebookScope::Matrix)
        {
            return Err(VqError::Config(
                "e8p: the E8P lattice codebook takes vectors of 8, 16-bit codes and one \
                 codebook per matrix"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Checks that a `[n, k]` weight fits the format: `vector_size` divides `k` and the
    /// codebook tiles divide the matrix.
    pub fn check_shape(&self, n: usize, k: usize) -> Result<(), VqError> {
        self.validate()?;
        if n == 0 || k == 0 {
            return Err(VqError::Shape(format!("n = {n}, k = {k}: empty weight")));
        }
        if !k.is_multiple_of(self.vector_size) {
            return Err(VqError::Shape(format!(
                "k = {k}: vector_size {} does not divide k",
                self.vector_size
            )));
        }
        let (rows, cols) = self.tile(n, k);
        if rows == 0 || !n.is_multiple_of(rows) {
            return Err(VqError::Shape(format!(
                "n = {n}: the codebook tile's {rows} rows do not divide n"
            )));
        }
        if cols == 0 || !k.is_multiple_of(cols) || !cols.is_multiple_of(self.vector_size) {
            return Err(VqError::Shape(format!(
                "k = {k}: the codebook tile's {cols} columns must divide k and be a multiple of \
                 vector_size {}",
                self.vector_size
            )));
        }
        Ok(())
    }

    /// The `(rows, cols)` of one codebook's tile for a `[n, k]` weight.
    pub fn tile(&self, n: usize, k: usize) -> (usize, usize) {
        match self.scope {
            CodebookScope::Tile { rows, cols } => (rows, cols),
            CodebookScope::Matrix => (n, k),
            CodebookScope::Columns { cols } => (n, cols),
        }
    }

    /// Codebook groups of a `[n, k]` weight.
    pub fn groups(&self, n: usize, k: usize) -> usize {
        let (rows, cols) = self.tile(n, k);
        (n / rows) * (k / cols)
    }
}

/// Errors of the VQ host side; each names the argument at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VqError {
    #[error("vq config: {0}")]
    Config(String),
    #[error("vq shape: {0}")]
    Shape(String),
    #[error("vq argument `{arg}`: {msg}")]
    Arg { arg: &'static str, msg: String },
}

pub(crate) fn arg_err(arg: &'static str, msg: impl Into<String>) -> VqError {
    VqError::Arg {
        arg,
        msg: msg.into(),
    }
}

/// A vector-quantized weight `[n, k]` (module docs for the reconstruction).
#[derive(Clone, Debug, PartialEq)]
pub struct VqWeight {
    pub config: VqConfig,
    pub n: usize,
    pub k: usize,
    /// `[residuals, n, k / V]`, each below `entries`.
    pub codes: Vec<u16>,
    /// `[groups, residuals, entries, V]`, f16-representable.
    pub codebooks: Vec<f32>,
    /// `[n]` when the format has per-channel scales, f16-representable.
    pub scales: Option<Vec<f32>>,
}

impl VqWeight {
    /// Assembles a weight from its parts, checking every shape and code.
    pub fn from_parts(
        config: VqConfig,
        n: usize,
        k: usize,
        codes: Vec<u16>,
        codebooks: Vec<f32>,
        scales: Option<Vec<f32>>,
    ) -> Result<VqWeight, VqError> {
        config.check_shape(n, k)?;
        let v = config.vector_size;
        let want_codes = config.residuals * n * (k / v);
        if codes.len() != want_codes {
            return Err(arg_err(
                "codes",
                format!(
                    "{} codes, expected residuals·n·k/V = {want_codes}",
                    codes.len()
                ),
            ));
        }
        let entries = config.entries();
        if let Some(i) = codes.iter().position(|&c| c as usize >= entries) {
            return Err(arg_err(
                "codes",
                format!("code {} at {i} is not below entries = {entries}", codes[i]),
            ));
        }
        let want_cb = config.groups(n, k) * config.residuals * entries * v;
        if codebooks.len() != want_cb {
            return Err(arg_err(
                "codebooks",
                format!(
                    "{} values, expected groups·residuals·entries·V = {want_cb}",
                    codebooks.len()
                ),
            ));
        }
        if let Some(i) = codebooks.iter().position(|x| !x.is_finite()) {
            return Err(arg_err("codebooks", format!("value at {i} is not finite")));
        }
        // The kernels add the residuals' entries in f16, whose arithmetic overflows to infinity:
        // the largest entries of a group's residual codebooks must sum to a finite f16.
        let book = entries * v;
        for (g, group) in codebooks.chunks(config.residuals * book).enumerate() {
            let reach: f64 = group
                .chunks(book)
                .map(|b| b.iter().fold(0f64, |m, x| m.max(x.abs() as f64)))
                .sum();
            if reach > 65504.0 {
                return Err(arg_err(
                    "codebooks",
                    format!(
                        "the largest entries of group {g}'s {} residual codebooks sum to {reach:e}, \
                         above f16's largest finite value 65504",
                        config.residuals
                    ),
                ));
            }
        }
        if config.e8p && codebooks != e8p::codebooks(config.residuals) {
            return Err(arg_err(
                "codebooks",
                "an E8P format's codebooks are the lattice's (`VqWeight::from_e8p_codes` makes them)",
            ));
        }
        match (&scales, config.channel_scale) {
            (Some(s), true) if s.len() != n => {
                return Err(arg_err(
                    "scales",
                    format!("{} scales, expected n = {n}", s.len()),
                ));
            }
            (None, true) => return Err(arg_err("scales", "the format has per-channel scales")),
            (Some(_), false) => {
                return Err(arg_err("scales", "the format has no per-channel scales"));
            }
            _ => {}
        }
        Ok(VqWeight {
            config,
            n,
            k,
            codes,
            codebooks: codebooks.into_iter().map(round_f16).collect(),
            scales: scales.map(|s| s.into_iter().map(round_f16).collect()),
        })
    }

    /// Vectors per row, `k / V`.
    pub fn vectors_per_row(&self) -> usize {
        self.k / self.config.vector_size
    }

    /// The codebook group of row `r`, vector `j`.
    pub fn group_of(&self, r: usize, j: usize) -> usize {
        let (rows, cols) = self.config.tile(self.n, self.k);
        let col_tiles = self.k / cols;
        (r / rows) * col_tiles + j * self.config.vector_size / cols
    }

    /// The code of stage `s`, row `r`, vector `j`.
    pub fn code(&self, s: usize, r: usize, j: usize) -> usize {
        self.codes[(s * self.n + r) * self.vectors_per_row() + j] as usize
    }

    /// Entry `e` of codebook (group `g`, stage `s`).
    pub fn entry(&self, g: usize, s: usize, e: usize) -> &[f32] {
        let v = self.config.vector_size;
        let at = ((g * self.config.residuals + s) * self.config.entries() + e) * v;
        &self.codebooks[at..at + v]
    }

    /// The weight `[n, k]` in f32: stages summed in order in f32, then scaled.
    pub fn dequantize(&self) -> Vec<f32> {
        let (n, k, v) = (self.n, self.k, self.config.vector_size);
        let mut out = vec![0f32; n * k];
        crate::parallel::for_each_chunk_mut(&mut out, k, |r, row| {
            for j in 0..k / v {
                let g = self.group_of(r, j);
                for e in 0..v {
                    let mut acc = 0f32;
                    for s in 0..self.config.residuals {
                        acc += self.entry(g, s, self.code(s, r, j))[e];
                    }
                    if let Some(sc) = &self.scales {
                        acc *= sc[r];
                    }
                    row[j * v + e] = acc;
                }
            }
        });
        out
    }

    /// Reorders every codebook's entries by access frequency, most used first (ties keep the
    /// old order), and rewrites the codes to match: the dequantized weight is unchanged, bit for
    /// bit. The kernels' codebook cache keeps the first entries in registers and shared memory.
    pub fn reorder_by_frequency(&mut self) {
        if self.config.e8p {
            // The lattice's entries are fixed by their codes' bits.
            return;
        }
        let (res, entries, v) = (
            self.config.residuals,
            self.config.entries(),
            self.config.vector_size,
        );
        let groups = self.config.groups(self.n, self.k);
        let mut counts = vec![0u64; groups * res * entries];
        for s in 0..res {
            for r in 0..self.n {
                for j in 0..self.vectors_per_row() {
                    let g = self.group_of(r, j);
                    counts[(g * res + s) * entries + self.code(s, r, j)] += 1;
                }
            }
        }
        // new_of[(g, s, old)] = new index.
        let mut new_of = vec![0u16; groups * res * entries];
        let mut books = vec![0f32; self.codebooks.len()];
        for gs in 0..groups * res {
            let c = &counts[gs * entries..(gs + 1) * entries];
            let mut order: Vec<usize> = (0..entries).collect();
            order.sort_by(|&a, &b| c[b].cmp(&c[a]).then(a.cmp(&b)));
            for (new, &old) in order.iter().enumerate() {
                new_of[gs * entries + old] = new as u16;
                let src = (gs * entries + old) * v;
                let dst = (gs * entries + new) * v;
                books[dst..dst + v].copy_from_slice(&self.codebooks[src..src + v]);
            }
        }
        self.codebooks = books;
        let vpr = self.vectors_per_row();
        for s in 0..res {
            for r in 0..self.n {
                for j in 0..vpr {
                    let g = self.group_of(r, j);
                    let at = (s * self.n + r) * vpr + j;
                    let old = self.codes[at] as usize;
                    self.codes[at] = new_of[(g * res + s) * entries + old];
                }
            }
        }
    }

    /// Bytes of the codes as the kernels store them (u8 up to 8 bits, u16 above).
    pub fn code_bytes(&self) -> usize {
        self.codes.len() * if self.config.log2_entries <= 8 { 1 } else { 2 }
    }

    /// Bytes of the codes as the codebook-centric kernel stores them: 8 bits per code up to
    /// 256 entries, 12 up to 4096, else 16.
    pub fn kernel_code_bytes(&self) -> usize {
        let bits = match self.config.log2_entries {
            0..=8 => 8,
            9..=12 => 12,
            _ => 16,
        };
        self.codes.len() * bits / 8
    }

    /// Bytes of the f16 codebooks and scales (for an E8P format, of the table the kernels
    /// decode it from, [`e8p::kernel_table`]).
    pub fn codebook_bytes(&self) -> usize {
        let book = if self.config.e8p {
            e8p::kernel_table_rows(self.config.residuals, 1) * 8
        } else {
            self.codebooks.len()
        };
        2 * (book + self.scales.as_ref().map_or(0, |s| s.len()))
    }

    /// A weight of an E8P format ([`VqConfig::e8p`]) from its codes `[residuals, n, k / 8]` and
    /// scales; the codebooks are the lattice's.
    pub fn from_e8p_codes(
        config: VqConfig,
        n: usize,
        k: usize,
        codes: Vec<u16>,
        scales: Option<Vec<f32>>,
    ) -> Result<VqWeight, VqError> {
        if !config.e8p {
            return Err(arg_err(
                "config",
                format!("{} is not an E8P format", config.name),
            ));
        }
        let books = e8p::codebooks(config.residuals);
        VqWeight::from_parts(config, n, k, codes, books, scales)
    }
}

impl VqWeight {
    /// A weight of `config` with random codes and random f16 codebook values in `[-1, 1)` (the
    /// lattice's for E8P; scales in `[0.25, 2)`), entries reordered by frequency: for benchmarks and kernel tests,
    /// where k-means on a large matrix would only cost time. `skewed`: code `⌊u² · entries⌋` for
    /// uniform `u` (low codes more frequent, as the cache's tiers assume), else uniform codes
    /// (the cache's worst case). Deterministic for `seed`.
    pub fn random(
        config: VqConfig,
        n: usize,
        k: usize,
        seed: u64,
        skewed: bool,
    ) -> Result<VqWeight, VqError> {
        use rand::{Rng, SeedableRng};
        config.check_shape(n, k)?;
        let e = config.entries();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let codes: Vec<u16> = (0..config.residuals * n * (k / config.vector_size))
            .map(|_| {
                if skewed {
                    let u: f64 = rng.random_range(0.0..1.0);
                    ((u * u * e as f64) as usize).min(e - 1) as u16
                } else {
                    rng.random_range(0..e) as u16
                }
            })
            .collect();
        let len = config.groups(n, k) * config.residuals * e * config.vector_size;
        let books: Vec<f32> = if config.e8p {
            e8p::codebooks(config.residuals)
        } else {
            (0..len)
                .map(|_| round_f16(rng.random_range(-1.0f32..1.0)))
                .collect()
        };
        let scales = config.channel_scale.then(|| {
            (0..n)
                .map(|_| round_f16(rng.random_range(0.25f32..2.0)))
                .collect()
        });
        let mut w = VqWeight::from_parts(config, n, k, codes, books, scales)?;
        w.reorder_by_frequency();
        Ok(w)
    }
}

/// `x` rounded to the nearest f16 value (as f32).
pub fn round_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

#[cfg(test)]
mod tests;
