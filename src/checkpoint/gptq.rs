//! GPTQ checkpoints (AutoGPTQ / GPTQModel, `checkpoint_format: gptq` = v1, or `gptq_v2`).
//!
//! Per layer prefix `P`, for a weight of `k` inputs and `n` outputs, `b` bits (2, 3, 4 or 8),
//! `g` rows per group and `G = k / g` groups:
//!
//! | tensor      | dtype | shape              | content                                      |
//! |-------------|-------|--------------------|----------------------------------------------|
//! | `P.qweight` | i32   | `[k b / 32, n]`    | codes packed along k                         |
//! | `P.qzeros`  | i32   | `[G, n b / 32]`    | zero points packed along n                   |
//! | `P.scales`  | f16   | `[G, n]`           | scales                                       |
//! | `P.g_idx`   | i32   | `[k]` (optional)   | group of each input row; act-order if not `i / g` |
//!
//! Packing: along the packed dimension the values of one column (of `qweight`) or one row (of
//! `qzeros`) form one little-endian bit stream over consecutive words: value `i` occupies bits
//! `[i b, (i + 1) b)`, bit `t` of the stream being bit `t % 32` of word `t / 32`. For 2, 4 and
//! 8 bits that is "value `i` of a word at bits `b i`, low first"; 3-bit packs 32 values into 3
//! words, values 10 and 21 crossing word boundaries. Example, 4-bit: `qweight[0, c] =
//! 0x76543210` holds rows 0..8 of column `c` with values 0, 1, ..., 7.
//!
//! Dequantization: `w[i, c] = scale[g_idx[i], c] * (q[i, c] - zero[g_idx[i], c])`, where the
//! zero point is `stored + 1` in v1 ([`GptqZeros::V1`], AutoGPTQ's convention: its packer
//! stores `zero - 1`) and `stored` in v2. Symmetric checkpoints are the same with every zero
//! `2^(b-1)` (stored `2^(b-1) - 1` in v1).
//!
//! Act-order: when `g_idx` is not `i / g`, the rows are sorted by group (stable), so each group
//! is `g` contiguous rows as the kernels need, and the permutation is returned:
//! [`ImportedLayer::input_perm`], `x' = x[:, perm]`. A `g_idx` whose groups do not all have
//! `g` rows is an error naming it.

use super::unpack::{unpack_k_packed, unpack_n_stream};
use super::{
    checked, expect_words, read_scales, Checkpoint, CheckpointError, Format, GptqZeros,
    ImportOptions, ImportedLayer, LayerInfo, Result, Tensor, TensorDtype,
};
use crate::quant::{Group, QuantizedWeight};
use crate::DType;

/// Bit widths the GPTQ format defines.
pub const BITS: [usize; 4] = [2, 3, 4, 8];

fn bits_error(tensor: &str, bits: usize) -> CheckpointError {
    CheckpointError::Bits {
        tensor: tensor.to_string(),
        bits,
        format: "GPTQ",
        supported: "2, 3, 4, 8",
    }
}

struct Layout<'a> {
    info: LayerInfo,
    qweight: Tensor<'a>,
    qzeros: Tensor<'a>,
    scales: Tensor<'a>,
    /// `g_idx` values, when present.
    g_idx: Option<Vec<i64>>,
}

fn read_g_idx(t: &Tensor<'_>, k: usize) -> Result<Vec<i64>> {
    t.expect_dtype(&[TensorDtype::I32, TensorDtype::I64], "I32 or I64")?;
    t.expect_shape(&[k])?;
    Ok(if t.dtype == TensorDtype::I32 {
        t.data
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
            .collect()
    } else {
        t.data
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8-byte chunk")))
            .collect()
    })
}

fn layout<'a>(ckpt: &'a Checkpoint, prefix: &str, options: &ImportOptions) -> Result<Layout<'a>> {
    let qweight = ckpt.tensor(&format!("{prefix}.qweight"))?;
    let scales = ckpt.tensor(&format!("{prefix}.scales"))?;
    let qzeros = ckpt.tensor(&format!("{prefix}.qzeros"))?;
    let g_idx_t = ckpt.get(&format!("{prefix}.g_idx"));
    expect_words(&qweight)?;
    expect_words(&qzeros)?;
    let (qrows, n) = qweight.dims2()?;
    let (groups, scale_cols) = scales.dims2()?;
    if n == 0 || groups == 0 {
        return Err(qweight.invalid("empty weight"));
    }
    if scale_cols != n {
        return Err(CheckpointError::Shape {
            tensor: scales.name.to_string(),
            expected: format!("[groups, {n}] (qweight's columns)"),
            got: scales.shape.to_vec(),
        });
    }
    // The bit width: given, else from g_idx's k, else from qzeros' columns.
    let bits = if let Some(b) = options.bits {
        if !BITS.contains(&b) {
            return Err(bits_error(qweight.name, b));
        }
        b
    } else if let Some(t) = &g_idx_t {
        let k = t.shape.first().copied().unwrap_or(0);
        if t.shape.len() != 1 || k == 0 || !(qrows * 32).is_multiple_of(k) {
            return Err(CheckpointError::Shape {
                tensor: t.name.to_string(),
                expected: format!("[k] with k * bits / 32 = {qrows} (qweight's rows)"),
                got: t.shape.to_vec(),
            });
        }
        let b = qrows * 32 / k;
        if !BITS.contains(&b) {
            return Err(bits_error(qweight.name, b));
        }
        b
    } else {
        let (_, zcols) = qzeros.dims2()?;
        if !(zcols * 32).is_multiple_of(n) {
            return Err(CheckpointError::Shape {
                tensor: qzeros.name.to_string(),
                expected: format!("[{groups}, {n} * bits / 32] for bits in 2, 3, 4, 8"),
                got: qzeros.shape.to_vec(),
            });
        }
        let b = zcols * 32 / n;
        if !BITS.contains(&b) {
            return Err(bits_error(qzeros.name, b));
        }
        b
    };
    if !(n * bits).is_multiple_of(32) {
        return Err(CheckpointError::Shape {
            tensor: qzeros.name.to_string(),
            expected: format!("[{groups}, {n} * {bits} / 32]: n * bits must be a multiple of 32"),
            got: qzeros.shape.to_vec(),
        });
    }
    qzeros.expect_shape(&[groups, n * bits / 32])?;
    if !(qrows * 32).is_multiple_of(bits) {
        return Err(qweight.invalid(format!(
            "{qrows} rows of {bits}-bit values are not a whole number of rows of k"
        )));
    }
    let k = qrows * 32 / bits;
    if k == 0 || !k.is_multiple_of(groups) {
        return Err(CheckpointError::Shape {
            tensor: scales.name.to_string(),
            expected: format!("[groups, {n}] with groups dividing k = {k}"),
            got: scales.shape.to_vec(),
        });
    }
    let group = k / groups;
    let g_idx = match &g_idx_t {
        Some(t) => {
            let g = read_g_idx(t, k)?;
            check_g_idx(t.name, &g, groups, group)?;
            Some(g)
        }
        None => None,
    };
    let act_order = g_idx
        .as_ref()
        .is_some_and(|g| g.iter().enumerate().any(|(i, &v)| v as usize != i / group));
    Ok(Layout {
        info: LayerInfo {
            prefix: prefix.to_string(),
            format: Format::Gptq,
            bits,
            k,
            n,
            group,
            act_order,
        },
        qweight,
        qzeros,
        scales,
        g_idx,
    })
}

/// Every entry in `0..groups` and each group exactly `group` rows.
fn check_g_idx(tensor: &str, g_idx: &[i64], groups: usize, group: usize) -> Result<()> {
    let bad = |reason: String| CheckpointError::Invalid {
        tensor: tensor.to_string(),
        reason,
    };
    let mut counts = vec![0usize; groups];
    for (i, &v) in g_idx.iter().enumerate() {
        if v < 0 || v as u64 >= groups as u64 {
            return Err(bad(format!(
                "entry {i} is {v}, outside 0..{groups} (the scales' groups)"
            )));
        }
        counts[v as usize] += 1;
    }
    if let Some((g, &c)) = counts.iter().enumerate().find(|(_, &c)| c != group) {
        return Err(bad(format!(
            "group {g} has {c} rows; every group must have k / groups = {group}"
        )));
    }
    Ok(())
}

/// The layer at `prefix`: format, bits and shape (validates shapes and `g_idx`, unpacks nothing).
pub fn info(ckpt: &Checkpoint, prefix: &str, options: &ImportOptions) -> Result<LayerInfo> {
    Ok(layout(ckpt, prefix, options)?.info)
}

/// The zero-point convention: the option, else the file's `checkpoint_format` metadata, else v1.
fn zeros_format(ckpt: &Checkpoint, options: &ImportOptions) -> Result<GptqZeros> {
    if let Some(z) = options.gptq_zeros {
        return Ok(z);
    }
    match ckpt.metadata().and_then(|m| m.get("checkpoint_format")) {
        None => Ok(GptqZeros::V1),
        Some(v) if v == "gptq" => Ok(GptqZeros::V1),
        Some(v) if v == "gptq_v2" => Ok(GptqZeros::V2),
        Some(v) => Err(CheckpointError::Metadata {
            key: "checkpoint_format".into(),
            reason: format!("`{v}` is neither `gptq` nor `gptq_v2`"),
        }),
    }
}

/// Import the GPTQ layer at `prefix` (see the module docs).
pub fn load(ckpt: &Checkpoint, prefix: &str, options: &ImportOptions) -> Result<ImportedLayer> {
    let zf = zeros_format(ckpt, options)?;
    let lay = layout(ckpt, prefix, options)?;
    let LayerInfo {
        bits, k, n, group, ..
    } = lay.info;
    let groups = k / group;
    let perm: Option<Vec<u32>> = match (&lay.g_idx, lay.info.act_order) {
        (Some(g_idx), true) => {
            // Stable counting sort by group: rows of group g land at g * group, in order.
            let mut next: Vec<usize> = (0..groups).map(|g| g * group).collect();
            let mut perm = vec![0u32; k];
            for (i, &g) in g_idx.iter().enumerate() {
                perm[next[g as usize]] = i as u32;
                next[g as usize] += 1;
            }
            Some(perm)
        }
        _ => None,
    };
    if k > u32::MAX as usize {
        return Err(lay.qweight.invalid(format!("k = {k} rows exceed u32")));
    }
    let codes = unpack_k_packed(lay.qweight.data, bits, k, n, perm.as_deref());
    let (scales, scale_dtype) = read_scales(&lay.scales)?;
    let offset = match zf {
        GptqZeros::V1 => 1.0,
        GptqZeros::V2 => 0.0,
    };
    let zeros: Vec<f32> = unpack_n_stream(lay.qzeros.data, bits, groups, n)
        .into_iter()
        .map(|z| z as f32 + offset)
        .collect();
    let weight = QuantizedWeight {
        dtype: DType::UInt(bits as u8),
        k,
        n,
        group: if groups == 1 {
            Group::PerChannel
        } else {
            Group::Rows(group)
        },
        codes,
        scale_dtype,
        scales,
        zeros: Some(zeros),
    };
    checked(
        prefix,
        ImportedLayer {
            weight,
            input_perm: perm,
        },
    )
}
