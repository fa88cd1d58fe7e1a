//! AWQ checkpoints (AutoAWQ, `version: gemm`), 4-bit only.
//!
//! Per layer prefix `P`, for a weight of `k` inputs, `n` outputs and `G = k / g` groups:
//!
//! | tensor      | dtype | shape        | content                                    |
//! |-------------|-------|--------------|--------------------------------------------|
//! | `P.qweight` | i32   | `[k, n / 8]` | codes packed along n, AWQ order            |
//! | `P.qzeros`  | i32   | `[G, n / 8]` | zero points packed along n, AWQ order      |
//! | `P.scales`  | f16   | `[G, n]`     | scales                                     |
//!
//! Packing: word `w` of a row holds columns `8 w .. 8 w + 8`; its nibble `j` (bits `4 j ..
//! 4 j + 4`) holds column `8 w + AWQ_ORDER[j]` with `AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]`
//! (AutoAWQ's packer: `qweight[:, w] |= int[:, 8 w + order[j]] << 4 j`). Reading back, column
//! `8 w + c` is nibble `AWQ_REVERSE_ORDER[c]`, `AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]`.
//!
//! Worked example: columns 0..8 of a row holding the values `1, 2, 3, 4, 5, 6, 7, 8` pack as
//! nibbles (low first) `1, 3, 5, 7, 2, 4, 6, 8`, i.e. the word `0x86427531`.
//!
//! Dequantization: `w[i, c] = scale[i / g, c] * (q[i, c] - zero[i / g, c])` (no `+ 1`).

use super::unpack::{unpack_awq4, unpack_awq4_values};
pub use super::unpack::{AWQ_ORDER, AWQ_REVERSE_ORDER};
use super::{
    checked, expect_words, read_scales, Checkpoint, CheckpointError, Format, ImportOptions,
    ImportedLayer, LayerInfo, Result, Tensor,
};
use crate::quant::{Group, QuantizedWeight};
use crate::DType;

struct Layout<'a> {
    info: LayerInfo,
    qweight: Tensor<'a>,
    qzeros: Tensor<'a>,
    scales: Tensor<'a>,
}

fn layout<'a>(ckpt: &'a Checkpoint, prefix: &str, options: &ImportOptions) -> Result<Layout<'a>> {
    let qweight = ckpt.tensor(&format!("{prefix}.qweight"))?;
    let scales = ckpt.tensor(&format!("{prefix}.scales"))?;
    let qzeros = ckpt.tensor(&format!("{prefix}.qzeros"))?;
    expect_words(&qweight)?;
    expect_words(&qzeros)?;
    let (k, qcols) = qweight.dims2()?;
    let (groups, n) = scales.dims2()?;
    if k == 0 || n == 0 || groups == 0 {
        return Err(qweight.invalid("empty weight"));
    }
    let bits_of = |cols: usize| (cols * 32).is_multiple_of(n).then(|| cols * 32 / n);
    match bits_of(qcols) {
        Some(4) => {}
        Some(b) => {
            return Err(CheckpointError::Bits {
                tensor: qweight.name.to_string(),
                bits: b,
                format: "AWQ (GEMM packing)",
                supported: "4",
            })
        }
        None => {
            return Err(CheckpointError::Shape {
                tensor: qweight.name.to_string(),
                expected: format!("[k, {n} / 8] (4-bit, scales' {n} columns)"),
                got: qweight.shape.to_vec(),
            })
        }
    }
    if let Some(b) = options.bits.filter(|&b| b != 4) {
        return Err(CheckpointError::Bits {
            tensor: qweight.name.to_string(),
            bits: b,
            format: "AWQ (GEMM packing)",
            supported: "4",
        });
    }
    qzeros.expect_shape(&[groups, n / 8])?;
    if !k.is_multiple_of(groups) {
        return Err(CheckpointError::Shape {
            tensor: scales.name.to_string(),
            expected: format!("[groups, {n}] with groups dividing k = {k}"),
            got: scales.shape.to_vec(),
        });
    }
    Ok(Layout {
        info: LayerInfo {
            prefix: prefix.to_string(),
            format: Format::Awq,
            bits: 4,
            k,
            n,
            group: k / groups,
            act_order: false,
        },
        qweight,
        qzeros,
        scales,
    })
}

/// The layer at `prefix`: format, bits and shape (validates shapes, unpacks nothing).
pub fn info(ckpt: &Checkpoint, prefix: &str, options: &ImportOptions) -> Result<LayerInfo> {
    Ok(layout(ckpt, prefix, options)?.info)
}

/// Import the AWQ layer at `prefix` (see the module docs).
pub fn load(ckpt: &Checkpoint, prefix: &str, options: &ImportOptions) -> Result<ImportedLayer> {
    let lay = layout(ckpt, prefix, options)?;
    let LayerInfo { k, n, group, .. } = lay.info;
    let groups = k / group;
    let codes = unpack_awq4(lay.qweight.data, k, n);
    let (scales, scale_dtype) = read_scales(&lay.scales)?;
    let zeros: Vec<f32> = unpack_awq4_values(lay.qzeros.data, groups, n)
        .into_iter()
        .map(|z| z as f32)
        .collect();
    let weight = QuantizedWeight {
        dtype: DType::UInt(4),
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
            input_perm: None,
        },
    )
}
