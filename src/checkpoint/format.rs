//! The tilus saved format: a safetensors file of quantized layers, loaded without
//! re-quantizing.
//!
//! Per layer `NAME` (a weight `[k, n]` of `dtype` codes, `G` groups):
//!
//! | tensor             | dtype          | shape                      | content                 |
//! |--------------------|----------------|----------------------------|-------------------------|
//! | `NAME.codes`       | u8             | `[k, n b / 8]` (or `[bytes]` if rows are not whole bytes) | compact row-major codes (`tilus_core::storage`) |
//! | `NAME.scales`      | f16 / bf16     | `[G, n]`                   | scales (the scale dtype) |
//! | `NAME.zeros`       | f16 / bf16     | `[G, n]` (optional)        | zero points, code units  |
//! | `NAME.input_perm`  | i32            | `[k]` (optional)           | act-order permutation    |
//!
//! and `__metadata__`: `tilus.format_version` (= [`FORMAT_VERSION`]) and `tilus.layers`, a JSON
//! object `{NAME: {"dtype": "u4", "k": .., "n": .., "group": 128 | null (per channel),
//! "scale_dtype": "f16", "zeros": true, "input_perm": false}}`. Other tensors (biases, norms,
//! embeddings that `tilus quantize` copied) may sit beside them.
//!
//! Why row-major codes and not the kernel's re-laid-out bytes: the re-layout
//! (`kernels::qmatmul::relayout`) depends on the tile configuration (`bk`, `bn`, warps and
//! the bytes each thread loads), which `GpuQuantizedLinear` picks by autotuning per `m` bucket
//! on the machine it runs on, and one layer may use several layouts. The compact codes are the
//! one form every configuration is derived from; loading is a copy of the codes, the scales
//! and zeros widened from f16 to f32 (exact), and no quantization.

use super::{
    Checkpoint, CheckpointError, Format, ImportedLayer, LayerInfo, Result, Tensor, TensorDtype,
};
use crate::quant::{Group, QuantizedWeight};
use crate::DType;
use safetensors::View;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The version this build writes and reads.
pub const FORMAT_VERSION: &str = "1";
const VERSION_KEY: &str = "tilus.format_version";
const LAYERS_KEY: &str = "tilus.layers";

/// One layer's entry in `tilus.layers`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerMeta {
    pub dtype: String,
    pub k: usize,
    pub n: usize,
    /// Rows per group; `None` for one scale per column.
    pub group: Option<usize>,
    pub scale_dtype: String,
    pub zeros: bool,
    pub input_perm: bool,
}

/// A tensor to store as is (what `tilus quantize` copies).
#[derive(Clone, Debug, PartialEq)]
pub struct RawTensor {
    pub dtype: TensorDtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

struct Bytes<'a> {
    dtype: TensorDtype,
    shape: Vec<usize>,
    data: Cow<'a, [u8]>,
}

impl View for &Bytes<'_> {
    fn dtype(&self) -> TensorDtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// `values` as f16 or bf16 bytes; each must be exactly representable (an error naming `what`).
fn encode_half(values: &[f32], dtype: DType, what: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(values.len() * 2);
    for (i, &v) in values.iter().enumerate() {
        let (bits, back) = match dtype {
            DType::BF16 => {
                let h = half::bf16::from_f32(v);
                (h.to_bits(), h.to_f32())
            }
            _ => {
                let h = half::f16::from_f32(v);
                (h.to_bits(), h.to_f32())
            }
        };
        if back.to_bits() != v.to_bits() && !(back == 0.0 && v == 0.0) {
            return Err(CheckpointError::Invalid {
                tensor: what.to_string(),
                reason: format!("value {i} ({v}) is not a {dtype} value"),
            });
        }
        out.extend_from_slice(&bits.to_le_bytes());
    }
    Ok(out)
}

fn half_dtype(dtype: DType) -> TensorDtype {
    if dtype == DType::BF16 {
        TensorDtype::BF16
    } else {
        TensorDtype::F16
    }
}

/// Save `layers` to `path` in the tilus format.
pub fn save(path: impl AsRef<Path>, layers: &[(String, ImportedLayer)]) -> Result<()> {
    save_with(path, layers, &[])
}

fn add<'a>(tensors: &mut BTreeMap<String, Bytes<'a>>, name: String, t: Bytes<'a>) -> Result<()> {
    if tensors.contains_key(&name) {
        return Err(CheckpointError::Invalid {
            tensor: name,
            reason: "written twice (two layers or tensors share the name)".into(),
        });
    }
    tensors.insert(name, t);
    Ok(())
}

/// Save `layers` and the `extra` tensors (stored as they are) to `path`. Errors name the layer
/// or tensor: an inconsistent weight, a name used twice, scales that are not of the scale type.
pub fn save_with(
    path: impl AsRef<Path>,
    layers: &[(String, ImportedLayer)],
    extra: &[(String, RawTensor)],
) -> Result<()> {
    let path = path.as_ref();
    let mut tensors: BTreeMap<String, Bytes<'_>> = BTreeMap::new();
    let mut metas: BTreeMap<&str, LayerMeta> = BTreeMap::new();
    for (name, layer) in layers {
        let w = &layer.weight;
        w.check().map_err(|source| CheckpointError::Quant {
            prefix: name.clone(),
            source,
        })?;
        let row_bits = w.n * w.dtype.bits() as usize;
        let shape = if row_bits.is_multiple_of(8) {
            vec![w.k, row_bits / 8]
        } else {
            vec![w.codes.len()]
        };
        add(
            &mut tensors,
            format!("{name}.codes"),
            Bytes {
                dtype: TensorDtype::U8,
                shape,
                data: Cow::Borrowed(&w.codes),
            },
        )?;
        let groups = w.k / w.group_rows();
        let hd = half_dtype(w.scale_dtype);
        add(
            &mut tensors,
            format!("{name}.scales"),
            Bytes {
                dtype: hd,
                shape: vec![groups, w.n],
                data: Cow::Owned(encode_half(
                    &w.scales,
                    w.scale_dtype,
                    &format!("{name}.scales"),
                )?),
            },
        )?;
        if let Some(z) = &w.zeros {
            add(
                &mut tensors,
                format!("{name}.zeros"),
                Bytes {
                    dtype: hd,
                    shape: vec![groups, w.n],
                    data: Cow::Owned(encode_half(z, w.scale_dtype, &format!("{name}.zeros"))?),
                },
            )?;
        }
        if let Some(p) = &layer.input_perm {
            check_perm(
                &format!("{name}.input_perm"),
                p.iter().map(|&v| v as i64),
                w.k,
            )?;
            add(
                &mut tensors,
                format!("{name}.input_perm"),
                Bytes {
                    dtype: TensorDtype::I32,
                    shape: vec![w.k],
                    data: Cow::Owned(p.iter().flat_map(|v| (*v as i32).to_le_bytes()).collect()),
                },
            )?;
        }
        metas.insert(
            name.as_str(),
            LayerMeta {
                dtype: w.dtype.to_string(),
                k: w.k,
                n: w.n,
                group: match w.group {
                    Group::PerChannel => None,
                    Group::Rows(g) => Some(g),
                },
                scale_dtype: w.scale_dtype.to_string(),
                zeros: w.zeros.is_some(),
                input_perm: layer.input_perm.is_some(),
            },
        );
    }
    for (name, t) in extra {
        add(
            &mut tensors,
            name.clone(),
            Bytes {
                dtype: t.dtype,
                shape: t.shape.clone(),
                data: Cow::Borrowed(&t.data),
            },
        )?;
    }
    let meta = HashMap::from([
        (VERSION_KEY.to_string(), FORMAT_VERSION.to_string()),
        (
            LAYERS_KEY.to_string(),
            serde_json::to_string(&metas).expect("layer metadata serializes"),
        ),
    ]);
    safetensors::serialize_to_file(tensors.iter(), Some(meta), path).map_err(|e| match e {
        safetensors::SafeTensorError::IoError(source) => CheckpointError::Io {
            path: path.display().to_string(),
            source,
        },
        e => CheckpointError::Safetensors(e.to_string()),
    })
}

/// Whether `ckpt` is a tilus file (its metadata has `tilus.format_version`).
pub fn is_tilus(ckpt: &Checkpoint) -> bool {
    ckpt.metadata().is_some_and(|m| m.contains_key(VERSION_KEY))
}

/// The layer table of a tilus file, checking the version.
pub fn layer_table(ckpt: &Checkpoint) -> Result<BTreeMap<String, LayerMeta>> {
    let meta = ckpt.metadata().ok_or_else(|| CheckpointError::Metadata {
        key: VERSION_KEY.into(),
        reason: "missing: not a tilus file".into(),
    })?;
    match meta.get(VERSION_KEY) {
        Some(v) if v == FORMAT_VERSION => {}
        Some(v) => {
            return Err(CheckpointError::Metadata {
                key: VERSION_KEY.into(),
                reason: format!("version `{v}`, this build reads `{FORMAT_VERSION}`"),
            })
        }
        None => {
            return Err(CheckpointError::Metadata {
                key: VERSION_KEY.into(),
                reason: "missing: not a tilus file".into(),
            })
        }
    }
    let text = meta
        .get(LAYERS_KEY)
        .ok_or_else(|| CheckpointError::Metadata {
            key: LAYERS_KEY.into(),
            reason: "missing".into(),
        })?;
    serde_json::from_str(text).map_err(|e| CheckpointError::Metadata {
        key: LAYERS_KEY.into(),
        reason: e.to_string(),
    })
}

pub(crate) fn layer_infos(ckpt: &Checkpoint) -> Result<Vec<LayerInfo>> {
    layer_table(ckpt)?
        .into_iter()
        .map(|(name, m)| {
            let dtype = parse_dtype(&name, "dtype", &m.dtype)?;
            Ok(LayerInfo {
                prefix: name,
                format: Format::Tilus,
                bits: dtype.bits() as usize,
                k: m.k,
                n: m.n,
                group: m.group.unwrap_or(m.k),
                act_order: m.input_perm,
            })
        })
        .collect()
}

fn parse_dtype(layer: &str, field: &str, text: &str) -> Result<DType> {
    text.parse().map_err(|e| CheckpointError::Metadata {
        key: format!("{LAYERS_KEY}.{layer}.{field}"),
        reason: format!("`{text}`: {e}"),
    })
}

fn check_perm(tensor: &str, values: impl Iterator<Item = i64>, k: usize) -> Result<Vec<u32>> {
    let mut seen = vec![false; k];
    let mut out = Vec::with_capacity(k);
    for (i, v) in values.enumerate() {
        if v < 0 || v as u64 >= k as u64 || seen[v as usize] {
            return Err(CheckpointError::Invalid {
                tensor: tensor.to_string(),
                reason: format!("entry {i} is {v}: not a permutation of 0..{k}"),
            });
        }
        seen[v as usize] = true;
        out.push(v as u32);
    }
    if out.len() != k {
        return Err(CheckpointError::Invalid {
            tensor: tensor.to_string(),
            reason: format!("{} entries, expected k = {k}", out.len()),
        });
    }
    Ok(out)
}

/// Check that a permutation has `k` distinct entries in `0..k`; errors name `tensor`.
pub fn validate_perm(tensor: &str, perm: &[u32], k: usize) -> Result<()> {
    check_perm(tensor, perm.iter().map(|&v| v as i64), k).map(|_| ())
}

fn read_half(t: &Tensor<'_>, dtype: DType, shape: &[usize]) -> Result<Vec<f32>> {
    t.expect_shape(shape)?;
    let want = half_dtype(dtype);
    t.expect_dtype(
        &[want],
        if want == TensorDtype::BF16 {
            "BF16 (the layer's scale dtype)"
        } else {
            "F16 (the layer's scale dtype)"
        },
    )?;
    Ok(super::read_scales(t)?.0)
}

/// Load the layer `name` of a tilus file.
pub fn load_layer(ckpt: &Checkpoint, name: &str) -> Result<ImportedLayer> {
    let table = layer_table(ckpt)?;
    let m = table.get(name).ok_or_else(|| CheckpointError::Layer {
        prefix: name.to_string(),
        reason: format!("not in `{LAYERS_KEY}`"),
    })?;
    load_from_meta(ckpt, name, m)
}

fn load_from_meta(ckpt: &Checkpoint, name: &str, m: &LayerMeta) -> Result<ImportedLayer> {
    let dtype = parse_dtype(name, "dtype", &m.dtype)?;
    let scale_dtype = parse_dtype(name, "scale_dtype", &m.scale_dtype)?;
    if !matches!(scale_dtype, DType::F16 | DType::BF16) {
        return Err(CheckpointError::Metadata {
            key: format!("{LAYERS_KEY}.{name}.scale_dtype"),
            reason: format!("`{scale_dtype}`: scales are f16 or bf16"),
        });
    }
    let group = match m.group {
        None => Group::PerChannel,
        Some(g) => Group::Rows(g),
    };
    let rows = group.rows(m.k);
    if m.k == 0 || m.n == 0 || rows == 0 || !m.k.is_multiple_of(rows) {
        return Err(CheckpointError::Metadata {
            key: format!("{LAYERS_KEY}.{name}"),
            reason: format!("group {rows} for a {} x {} weight", m.k, m.n),
        });
    }
    let groups = m.k / rows;
    let codes_t = ckpt.tensor(&format!("{name}.codes"))?;
    codes_t.expect_dtype(&[TensorDtype::U8], "U8")?;
    let bytes =
        m.k.checked_mul(m.n)
            .and_then(|len| tilus_core::storage::try_packed_len(dtype, len).ok())
            .ok_or_else(|| CheckpointError::Metadata {
                key: format!("{LAYERS_KEY}.{name}"),
                reason: format!("{} x {} {dtype} codes overflow", m.k, m.n),
            })?;
    if codes_t.data.len() != bytes {
        return Err(CheckpointError::Shape {
            tensor: codes_t.name.to_string(),
            expected: format!("{bytes} bytes ({} x {} {dtype} codes)", m.k, m.n),
            got: codes_t.shape.to_vec(),
        });
    }
    let scales = read_half(
        &ckpt.tensor(&format!("{name}.scales"))?,
        scale_dtype,
        &[groups, m.n],
    )?;
    let zeros = if m.zeros {
        Some(read_half(
            &ckpt.tensor(&format!("{name}.zeros"))?,
            scale_dtype,
            &[groups, m.n],
        )?)
    } else {
        None
    };
    let input_perm = if m.input_perm {
        let t = ckpt.tensor(&format!("{name}.input_perm"))?;
        t.expect_dtype(&[TensorDtype::I32], "I32")?;
        t.expect_shape(&[m.k])?;
        let values = t
            .data
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64);
        Some(check_perm(t.name, values, m.k)?)
    } else {
        None
    };
    let weight = QuantizedWeight {
        dtype,
        k: m.k,
        n: m.n,
        group,
        codes: codes_t.data.to_vec(),
        scale_dtype,
        scales,
        zeros,
    };
    super::checked(name, ImportedLayer { weight, input_perm })
}

/// Every layer of the tilus file at `path`, sorted by name.
pub fn load(path: impl AsRef<Path>) -> Result<Vec<(String, ImportedLayer)>> {
    let ckpt = Checkpoint::open(path)?;
    load_all(&ckpt)
}

/// Every layer of a tilus file, sorted by name.
pub fn load_all(ckpt: &Checkpoint) -> Result<Vec<(String, ImportedLayer)>> {
    layer_table(ckpt)?
        .iter()
        .map(|(name, m)| Ok((name.clone(), load_from_meta(ckpt, name, m)?)))
        .collect()
}
