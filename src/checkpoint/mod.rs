//! Quantized checkpoints in safetensors files: import of GPTQ ([`gptq`]) and AWQ ([`awq`])
//! layers without re-quantizing, and the project's own saved format ([`format`]).
//!
//! ```no_run
//! use tilus::checkpoint::{Checkpoint, ImportOptions};
//! let ckpt = Checkpoint::open("model.safetensors")?;
//! for layer in ckpt.layers()? {
//!     println!("{} {:?} u{} {} x {}", layer.prefix, layer.format, layer.bits, layer.k, layer.n);
//! }
//! let layer = ckpt.load("model.layers.0.mlp.down_proj", &ImportOptions::default())?;
//! let w = layer.dequantize_original_order(); // [k, n] f64, rows in the checkpoint's order
//! # Ok::<(), tilus::checkpoint::CheckpointError>(())
//! ```
//!
//! Every error names the tensor (or metadata key) at fault; see `docs/checkpoints.md` for the
//! formats, their packing and the limits.

pub mod awq;
pub mod format;
pub mod gptq;
pub mod synth;
mod unpack;

use crate::quant::{QuantError, QuantizedWeight};
use safetensors::tensor::Metadata;
use std::path::Path;

pub use safetensors::Dtype as TensorDtype;

/// What went wrong reading or writing a checkpoint. Each variant names the tensor, key or file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("file `{path}`: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("not a safetensors file: {0}")]
    Safetensors(String),
    #[error("tensor `{tensor}`: missing from the file")]
    Missing { tensor: String },
    #[error("tensor `{tensor}`: expected shape {expected}, got {got:?}")]
    Shape {
        tensor: String,
        expected: String,
        got: Vec<usize>,
    },
    #[error("tensor `{tensor}`: expected dtype {expected}, got {got:?}")]
    DType {
        tensor: String,
        expected: &'static str,
        got: TensorDtype,
    },
    #[error("tensor `{tensor}`: {reason}")]
    Invalid { tensor: String, reason: String },
    #[error("tensor `{tensor}`: {bits}-bit weights are not supported by {format} (supported: {supported})")]
    Bits {
        tensor: String,
        bits: usize,
        format: &'static str,
        supported: &'static str,
    },
    #[error("metadata key `{key}`: {reason}")]
    Metadata { key: String, reason: String },
    #[error("layer `{prefix}`: {reason}")]
    Layer { prefix: String, reason: String },
    #[error("layer `{prefix}`: {source}")]
    Quant { prefix: String, source: QuantError },
}

pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

/// Which convention a layer's tensors follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// AutoGPTQ / GPTQModel: `qweight` packed along k, `qzeros`, `scales`, optional `g_idx`.
    Gptq,
    /// AutoAWQ GEMM: `qweight` packed along n in AWQ's interleaved order.
    Awq,
    /// The project's own format ([`format`]).
    Tilus,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Gptq => "gptq",
            Format::Awq => "awq",
            Format::Tilus => "tilus",
        })
    }
}

/// How a GPTQ checkpoint stores its zero points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GptqZeros {
    /// `checkpoint_format: gptq` (AutoGPTQ, the default): the stored value is `zero - 1`, so
    /// `w = scale * (q - (stored + 1))`.
    #[default]
    V1,
    /// `checkpoint_format: gptq_v2` (GPTQModel): the stored value is the zero point.
    V2,
}

/// Options of an import.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// GPTQ zero-point convention. Default v1, unless the file's metadata says
    /// `checkpoint_format: gptq_v2` and this is left `None`.
    pub gptq_zeros: Option<GptqZeros>,
    /// The expected bit width: an error naming `qzeros` (GPTQ) or `qweight` (AWQ) if the shapes
    /// say otherwise. `None`: taken from the shapes.
    pub bits: Option<usize>,
}

/// An imported layer: the weight in the project's form, plus the input permutation of a GPTQ
/// act-order checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedLayer {
    /// Rows `j` of this weight are the checkpoint's rows `input_perm[j]` (or `j` without one):
    /// groups are contiguous rows, as the kernels need.
    pub weight: QuantizedWeight,
    /// `x' = x[:, perm]`: the layer computes `x' · weight`, which is `x · W` of the checkpoint.
    pub input_perm: Option<Vec<u32>>,
}

impl ImportedLayer {
    /// The dequantized weight `[k, n]` in f64 with rows in the checkpoint's order (the
    /// permutation undone): what a reference implementation of the format dequantizes to.
    pub fn dequantize_original_order(&self) -> Vec<f64> {
        let w = self.weight.dequantize();
        let Some(perm) = &self.input_perm else {
            return w;
        };
        let n = self.weight.n;
        let mut out = vec![0f64; w.len()];
        for (j, &r) in perm.iter().enumerate() {
            let r = r as usize;
            out[r * n..(r + 1) * n].copy_from_slice(&w[j * n..(j + 1) * n]);
        }
        out
    }
}

/// One quantized layer found in a file (see [`Checkpoint::layers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerInfo {
    /// The tensor name prefix, e.g. `model.layers.0.mlp.down_proj`.
    pub prefix: String,
    pub format: Format,
    pub bits: usize,
    /// Reduction dimension (PyTorch's `in_features`).
    pub k: usize,
    /// Output dimension (PyTorch's `out_features`).
    pub n: usize,
    /// Rows per group (`k` for one group per column).
    pub group: usize,
    /// GPTQ act-order: `g_idx` is not `i / group`.
    pub act_order: bool,
}

enum Data {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

/// A safetensors file, memory-mapped (or in memory), its header parsed once.
pub struct Checkpoint {
    data: Data,
    header_len: usize,
    meta: Metadata,
    /// Tensor names, sorted (the tensors' `name`s borrow from here).
    names: Vec<String>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("bytes", &self.bytes().len())
            .field("tensors", &self.meta.tensors().len())
            .finish()
    }
}

/// A view of one tensor of a [`Checkpoint`].
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    pub name: &'a str,
    pub dtype: TensorDtype,
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

impl<'a> Tensor<'a> {
    /// This tensor's shape must be `[rows, cols]`: an error naming it otherwise.
    pub(crate) fn expect_shape(&self, want: &[usize]) -> Result<()> {
        if self.shape != want {
            return Err(CheckpointError::Shape {
                tensor: self.name.to_string(),
                expected: format!("{want:?}"),
                got: self.shape.to_vec(),
            });
        }
        Ok(())
    }

    pub(crate) fn expect_dtype(
        &self,
        allowed: &[TensorDtype],
        expected: &'static str,
    ) -> Result<()> {
        if !allowed.contains(&self.dtype) {
            return Err(CheckpointError::DType {
                tensor: self.name.to_string(),
                expected,
                got: self.dtype,
            });
        }
        Ok(())
    }

    /// A 2-D tensor's `[rows, cols]`, or an error naming it.
    pub(crate) fn dims2(&self) -> Result<(usize, usize)> {
        match self.shape {
            [r, c] => Ok((*r, *c)),
            _ => Err(CheckpointError::Shape {
                tensor: self.name.to_string(),
                expected: "2 dimensions".into(),
                got: self.shape.to_vec(),
            }),
        }
    }

    pub(crate) fn invalid(&self, reason: impl Into<String>) -> CheckpointError {
        CheckpointError::Invalid {
            tensor: self.name.to_string(),
            reason: reason.into(),
        }
    }
}

impl Checkpoint {
    /// Map `path` into memory (zero-copy: tensors are read from the page cache).
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let io = |source| CheckpointError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; a file truncated by another process while mapped is
        // the usual mmap caveat (the same as safetensors' own loaders).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Checkpoint::parse(Data::Mapped(map))
    }

    /// A checkpoint held in memory (the bytes of a safetensors file).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Checkpoint> {
        Checkpoint::parse(Data::Owned(bytes))
    }

    fn parse(data: Data) -> Result<Checkpoint> {
        let bytes: &[u8] = match &data {
            Data::Owned(v) => v,
            Data::Mapped(m) => m,
        };
        let (n, meta) = safetensors::SafeTensors::read_metadata(bytes)
            .map_err(|e| CheckpointError::Safetensors(e.to_string()))?;
        let mut names = meta.offset_keys();
        names.sort_unstable();
        Ok(Checkpoint {
            data,
            header_len: n,
            meta,
            names,
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Owned(v) => v,
            Data::Mapped(m) => m,
        }
    }

    /// The `__metadata__` entries.
    pub fn metadata(&self) -> Option<&std::collections::HashMap<String, String>> {
        self.meta.metadata().as_ref()
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// The tensor `name`, if present.
    pub fn get(&self, name: &str) -> Option<Tensor<'_>> {
        let i = self.names.binary_search_by(|k| k.as_str().cmp(name)).ok()?;
        let key = self.names[i].as_str();
        let info = self.meta.info(key)?;
        let start = 8 + self.header_len;
        let data = &self.bytes()[start + info.data_offsets.0..start + info.data_offsets.1];
        Some(Tensor {
            name: key,
            dtype: info.dtype,
            shape: &info.shape,
            data,
        })
    }

    /// The tensor `name`, or an error naming it.
    pub fn tensor(&self, name: &str) -> Result<Tensor<'_>> {
        self.get(name).ok_or_else(|| CheckpointError::Missing {
            tensor: name.to_string(),
        })
    }

    /// Every quantized layer of the file (GPTQ and AWQ: prefixes of `*.qweight`; tilus: its
    /// layer table), sorted by prefix, with the format each layer's shapes say.
    pub fn layers(&self) -> Result<Vec<LayerInfo>> {
        if format::is_tilus(self) {
            return format::layer_infos(self);
        }
        let mut out = Vec::new();
        for name in self.names() {
            if let Some(prefix) = name.strip_suffix(".qweight") {
                out.push(self.detect(prefix)?);
            }
        }
        Ok(out)
    }

    /// The format of the GPTQ or AWQ layer at `prefix`, its bit width and shape, from the
    /// shapes of `qweight`, `scales` and `qzeros` (GPTQ keeps `qweight`'s columns equal to
    /// `scales`'; AWQ packs them, so its `qweight` has `n * bits / 32` columns).
    pub fn detect(&self, prefix: &str) -> Result<LayerInfo> {
        self.detect_with(prefix, &ImportOptions::default())
    }

    /// [`Checkpoint::detect`] with the bit width of `options` (if given) checked.
    pub fn detect_with(&self, prefix: &str, options: &ImportOptions) -> Result<LayerInfo> {
        match self.guess_format(prefix)? {
            Format::Awq => awq::info(self, prefix, options),
            _ => gptq::info(self, prefix, options),
        }
    }

    fn guess_format(&self, prefix: &str) -> Result<Format> {
        let qweight = self.tensor(&format!("{prefix}.qweight"))?;
        let scales = self.tensor(&format!("{prefix}.scales"))?;
        let (_, qcols) = qweight.dims2()?;
        let (_, n) = scales.dims2()?;
        Ok(if qcols == n {
            Format::Gptq
        } else {
            Format::Awq
        })
    }

    /// Import the layer at `prefix`, its format detected ([`Checkpoint::detect`]).
    pub fn load(&self, prefix: &str, options: &ImportOptions) -> Result<ImportedLayer> {
        if format::is_tilus(self) {
            return format::load_layer(self, prefix);
        }
        match self.guess_format(prefix)? {
            Format::Awq => awq::load(self, prefix, options),
            _ => gptq::load(self, prefix, options),
        }
    }

    /// Import the GPTQ layer at `prefix`.
    pub fn load_gptq(&self, prefix: &str, options: &ImportOptions) -> Result<ImportedLayer> {
        gptq::load(self, prefix, options)
    }

    /// Import the AWQ layer at `prefix`.
    pub fn load_awq(&self, prefix: &str, options: &ImportOptions) -> Result<ImportedLayer> {
        awq::load(self, prefix, options)
    }
}

/// Import the GPTQ layer `prefix` of the safetensors file at `path`.
pub fn load_gptq(
    path: impl AsRef<Path>,
    prefix: &str,
    options: &ImportOptions,
) -> Result<ImportedLayer> {
    Checkpoint::open(path)?.load_gptq(prefix, options)
}

/// Import the AWQ layer `prefix` of the safetensors file at `path`.
pub fn load_awq(
    path: impl AsRef<Path>,
    prefix: &str,
    options: &ImportOptions,
) -> Result<ImportedLayer> {
    Checkpoint::open(path)?.load_awq(prefix, options)
}

/// The quantized layers of the safetensors file at `path` (see [`Checkpoint::layers`]).
pub fn list_layers(path: impl AsRef<Path>) -> Result<Vec<LayerInfo>> {
    Checkpoint::open(path)?.layers()
}

/// The `[rows, n]` scales of `t` (f16 or bf16) as f32 (exact), and their dtype; a scale that
/// is not finite is an error naming the tensor and the position.
pub(crate) fn read_scales(t: &Tensor<'_>) -> Result<(Vec<f32>, crate::DType)> {
    // f32 scales are refused rather than rounded: the kernels hold scales in the activation
    // type, and rounding would change the weight the checkpoint defines.
    t.expect_dtype(&[TensorDtype::F16, TensorDtype::BF16], "F16 or BF16")?;
    let bf = t.dtype == TensorDtype::BF16;
    let values: Vec<f32> = t
        .data
        .chunks_exact(2)
        .map(|b| {
            let bits = u16::from_le_bytes([b[0], b[1]]);
            if bf {
                half::bf16::from_bits(bits).to_f32()
            } else {
                half::f16::from_bits(bits).to_f32()
            }
        })
        .collect();
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        let cols = t.shape.last().copied().unwrap_or(1).max(1);
        return Err(t.invalid(format!(
            "scale at [{}, {}] is not finite ({})",
            i / cols,
            i % cols,
            values[i]
        )));
    }
    let dtype = if bf {
        crate::DType::BF16
    } else {
        crate::DType::F16
    };
    Ok((values, dtype))
}

/// Check that `t` holds 32-bit integer words (I32, or U32 as some exporters write them).
pub(crate) fn expect_words(t: &Tensor<'_>) -> Result<()> {
    t.expect_dtype(&[TensorDtype::I32, TensorDtype::U32], "I32 (packed words)")
}

/// Wrap `QuantizedWeight::check` for an imported layer.
pub(crate) fn checked(prefix: &str, layer: ImportedLayer) -> Result<ImportedLayer> {
    layer
        .weight
        .check()
        .map_err(|source| CheckpointError::Quant {
            prefix: prefix.to_string(),
            source,
        })?;
    Ok(layer)
}
