//! `cast::<f16>(x)` / `cast::<bf16>(x)` of an f32 tensor two elements at a time: one
//! `cvt.rn.satfinite.{f16,bf16}x2.f32` (a single F2FP instruction) per output word, instead of
//! a NaN test, a clamp to the largest finite value and a conversion per element.
//!
//! `.satfinite` is exactly the cast's rule (`DType::encode`): round to nearest even (subnormal
//! results kept), a NaN becomes the canonical NaN `0x7fff`, and a value whose rounding would
//! overflow (an infinity included) becomes the largest finite value of its sign. The
//! conversion needs sm_80 and PTX ISA 8.1, which every target has.

use super::super::context::Ctx;
use super::super::CodegenError;
use crate::dtype::DType;
use crate::ir::VarId;

/// Emits the cast when it applies (f32 to f16 or bf16, an even number of locals; output local
/// `i` is input local `sigma[i]`); returns false, emitting nothing, otherwise.
pub(crate) fn try_emit(
    cx: &mut Ctx,
    out: VarId,
    x: VarId,
    src: DType,
    dtype: DType,
    sigma: &[usize],
) -> Result<bool, CodegenError> {
    let helper = match (src, dtype) {
        (DType::F32, DType::F16) => "f32x2_to_f16x2",
        (DType::F32, DType::BF16) => "f32x2_to_bf16x2",
        _ => return Ok(false),
    };
    if !sigma.len().is_multiple_of(2) {
        return Ok(false);
    }
    cx.features.insert(helper);
    let (xn, o) = (cx.name(x), cx.name(out));
    cx.w.open("");
    // All words first, then the stores: `out` may be `x` itself.
    let mut temps = Vec::new();
    for (w, pair) in sigma.chunks_exact(2).enumerate() {
        let t = cx.fresh(&format!("{o}_{w}"));
        cx.w.line(format!(
            "const uint32_t {t} = tilus_{helper}({xn}[{}], {xn}[{}]);",
            pair[0], pair[1]
        ));
        temps.push(t);
    }
    for (w, t) in temps.iter().enumerate() {
        cx.w.line(format!("{o}[{w}] = {t};"));
    }
    cx.w.close();
    Ok(true)
}

/// The device helpers of [`try_emit`] that `used` names.
pub(crate) fn helpers(used: &std::collections::BTreeSet<&'static str>) -> String {
    let mut s = String::new();
    for ty in ["f16", "bf16"] {
        let name = format!("f32x2_to_{ty}x2");
        if !used.contains(name.as_str()) {
            continue;
        }
        s.push_str(&format!(
            "\n// Two f32 (as bits) to a packed {ty} pair, `lo` in bits 0..16: round to nearest even,\n\
             // NaN to the canonical NaN, saturated to the largest finite value.\n\
             static __device__ __forceinline__ uint32_t tilus_{name}(uint32_t lo, uint32_t hi) {{\n\
             \x20 uint32_t d;\n\
             \x20 asm(\"cvt.rn.satfinite.{ty}x2.f32 %0, %1, %2;\" : \"=r\"(d) : \"f\"(__uint_as_float(hi)), \"f\"(__uint_as_float(lo)));\n\
             \x20 return d;\n\
             }}\n"
        ));
    }
    s
}
