//! Loading weights quantized by AQLM (Egiazarian et al., "Extreme Compression of Large Language
//! Models via Additive Quantization"), as its checkpoints store a `QuantizedLinear`:
//!
//! | tensor | shape | dtype | meaning |
//! |---|---|---|---|
//! | `codes` | `[out_groups, in_groups, num_codebooks]` | int (int16 for 16-bit codebooks, whose codes above 2^15 read as negative; int32/int64 otherwise) | the code of each codebook for input group `i` of output group `o` |
//! | `codebooks` | `[num_codebooks, entries, out_group_size, in_group_size]` | f16 | the additive codebooks |
//! | `scales` | `[out_features / out_group_size, 1, 1, 1]` | f16 | one scale per output group |
//!
//! with `out_groups = out_features / out_group_size`, `in_groups = in_features /
//! in_group_size`, and the reconstruction
//! `W[o·G_o + a, i·G_i + b] = scales[o] · Σ_c codebooks[c, codes[o, i, c], a, b]`.
//!
//! [`from_aqlm`] converts this to a [`VqWeight`] with `vector_size = in_group_size`,
//! `residuals = num_codebooks` and one codebook for the matrix ([`CodebookScope::Matrix`]).
//! Only `out_group_size = 1` is supported (AQLM's 1x16 and 2x8 models); codes are read modulo
//! `entries`, which undoes int16's sign.

use super::{arg_err, CodebookScope, VqConfig, VqError, VqWeight};

/// Converts AQLM's tensors (module docs) to a [`VqWeight`]. `codes` are the integer values
/// (any width, sign included), `codebooks` and `scales` the f16 values as f32.
pub fn from_aqlm(
    codes: &[i64],
    codes_shape: [usize; 3],
    codebooks: &[f32],
    codebooks_shape: [usize; 4],
    scales: &[f32],
    scales_shape: [usize; 4],
) -> Result<VqWeight, VqError> {
    let [out_groups, in_groups, ncb] = codes_shape;
    let [cb_n, entries, out_gs, in_gs] = codebooks_shape;
    if codes.len() != out_groups * in_groups * ncb {
        return Err(arg_err(
            "codes",
            format!(
                "{} values do not match codes_shape {codes_shape:?}",
                codes.len()
            ),
        ));
    }
    if codebooks.len() != cb_n * entries * out_gs * in_gs {
        return Err(arg_err(
            "codebooks",
            format!(
                "{} values do not match codebooks_shape {codebooks_shape:?}",
                codebooks.len()
            ),
        ));
    }
    if cb_n != ncb {
        return Err(arg_err(
            "codebooks_shape",
            format!("{cb_n} codebooks, but codes_shape has {ncb} codes per group"),
        ));
    }
    if out_gs != 1 {
        return Err(arg_err(
            "codebooks_shape",
            format!("out_group_size {out_gs}: only 1 is supported"),
        ));
    }
    if !entries.is_power_of_two() || !(2..=1 << 16).contains(&entries) {
        return Err(arg_err(
            "codebooks_shape",
            format!("{entries} entries: must be a power of two in 2..=65536"),
        ));
    }
    if in_gs == 0 || out_groups == 0 || in_groups == 0 || ncb == 0 {
        return Err(arg_err("codes_shape", "an extent is zero"));
    }
    if scales_shape != [out_groups, 1, 1, 1] || scales.len() != out_groups {
        return Err(arg_err(
            "scales",
            format!(
                "shape {scales_shape:?} with {} values, expected [{out_groups}, 1, 1, 1]",
                scales.len()
            ),
        ));
    }
    let config = VqConfig {
        name: "aqlm",
        vector_size: in_gs,
        log2_entries: entries.trailing_zeros(),
        residuals: ncb,
        scope: CodebookScope::Matrix,
        channel_scale: true,
        e8p: false,
    };
    let (n, k) = (out_groups, in_groups * in_gs);
    let mask = entries as i64 - 1;
    let mut ours = vec![0u16; ncb * n * in_groups];
    for o in 0..n {
        for i in 0..in_groups {
            for c in 0..ncb {
                ours[(c * n + o) * in_groups + i] =
                    (codes[(o * in_groups + i) * ncb + c] & mask) as u16;
            }
        }
    }
    // [num_codebooks, entries, 1, in_group_size] is already [group 0][stage][entry][V].
    VqWeight::from_parts(
        config,
        n,
        k,
        ours,
        codebooks.to_vec(),
        Some(scales.to_vec()),
    )
}
