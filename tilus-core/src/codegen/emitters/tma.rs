//! `mbarriers`, `tma_load`, `tma_store`, `tma_store_wait`, `mbarrier_arrive`, `mbarrier_wait`
//! (sm_90; rules and semantics in `crate::verify::tma` and `crate::ir::Instruction`).
//!
//! - `mbarriers`: thread 0 initialises each barrier (`mbarrier.init`), fences the initialisation
//!   for the copy engine (`fence.mbarrier_init`), and the block synchronizes.
//! - `tma_load`: thread 0 announces the box's bytes and arrives (`mbarrier.arrive.expect_tx`),
//!   then issues `cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx`
//!   through a tensor map: a hidden `__grid_constant__` parameter per (view, box, swizzle),
//!   which the launcher encodes from the pointer argument and the view's extents
//!   ([`ParamKind::TensorMap`]). Coordinates are the offsets, innermost first.
//! - `tma_store`: every thread fences its shared writes for the copy engine
//!   (`fence.proxy.async.shared::cta`) and the block synchronizes; thread 0 issues
//!   `cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group` through the same kind of
//!   tensor map and commits it. `tma_store_wait`: thread 0 waits for the reads
//!   (`cp.async.bulk.wait_group.read 0`) and the block synchronizes; thread 0 also waits so
//!   before the block ends ([`drain`]).
//! - `mbarrier_arrive`: each warp converges (`__syncwarp`, which orders its threads' accesses
//!   before lane 0's) and lane 0 arrives.
//! - `mbarrier_wait`: every thread spins on `mbarrier.try_wait.parity`.

use super::super::context::{Ctx, SharedInfo, SMEM, TID};
use super::super::{CodegenError, KernelParam};
use crate::ir::{Expr, VarId};
use crate::launch::{ParamKind, TmaSwizzle};
use crate::layout::SharedLayout;
use crate::verify::tma::tma_swizzle;
use crate::DType;

/// Helper device functions for the features in `used` (called from the prelude).
pub(crate) fn helpers(used: &crate::codegen::prelude::Features) -> String {
    let mut s = String::new();
    let stores = TMA_STORE_FEATURES.iter().any(|f| used.contains(f));
    if !used.contains("mbarrier") && !stores {
        return s;
    }
    s.push_str(
        r#"
// A CUtensorMap (the launcher encodes it; the copy engine reads it from the parameter space).
struct __align__(64) tilus_tensor_map { unsigned long long opaque[16]; };
"#,
    );
    if used.contains("mbarrier") {
        s.push_str(
            r#"
static __device__ __forceinline__ void tilus_mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(arrivals) : "memory");
}
static __device__ __forceinline__ void tilus_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
// Spin until the phase of parity `parity` has completed.
static __device__ __forceinline__ void tilus_mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
"#,
        );
    }
    if stores {
        s.push_str(
            r#"
// Wait until the copy engine has read the sources of this thread's bulk stores (their global
// writes land by the kernel's end).
static __device__ __forceinline__ void tilus_tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
"#,
        );
    }
    for rank in 1..=5 {
        let params: Vec<String> = (0..rank).map(|j| format!("int c{j}")).collect();
        let args: Vec<String> = (0..rank).map(|j| format!(", \"r\"(c{j})")).collect();
        if used.contains(TMA_FEATURES[rank - 1]) {
            let regs: Vec<String> = (0..rank).map(|j| format!("%{}", j + 4)).collect();
            s.push_str(&format!(
                "// Announce `bytes` on barrier `bar` and arrive, then copy the box at (c0 = innermost, ..) through\n\
                 // tensor map `map` into shared address `dst`; the copy completes on `bar`.\n\
                 static __device__ __forceinline__ void tilus_tma_load_{rank}d(uint32_t dst, const tilus_tensor_map* map, uint32_t bar, uint32_t bytes, {}) {{\n\
                 \x20 asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n\" :: \"r\"(bar), \"r\"(bytes) : \"memory\");\n\
                 \x20 asm volatile(\"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {{{}}}], [%2];\\n\"\n\
                 \x20              :: \"r\"(dst), \"l\"((uint64_t)map), \"r\"(bar), \"r\"(bytes){} : \"memory\");\n\
                 }}\n",
                params.join(", "),
                regs.join(", "),
                args.join("")
            ));
        }
        if used.contains(TMA_STORE_FEATURES[rank - 1]) {
            let regs: Vec<String> = (0..rank).map(|j| format!("%{}", j + 2)).collect();
            s.push_str(&format!(
                "// Copy shared address `src` to the box at (c0 = innermost, ..) through tensor map `map`, in a\n\
                 // bulk group of its own (`tilus_tma_store_wait` waits until the copy engine has read `src`).\n\
                 static __device__ __forceinline__ void tilus_tma_store_{rank}d(uint32_t src, const tilus_tensor_map* map, {}) {{\n\
                 \x20 asm volatile(\"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group [%1, {{{}}}], [%0];\\n\"\n\
                 \x20              :: \"r\"(src), \"l\"((uint64_t)map){} : \"memory\");\n\
                 \x20 asm volatile(\"cp.async.bulk.commit_group;\\n\" ::: \"memory\");\n\
                 }}\n",
                params.join(", "),
                regs.join(", "),
                args.join("")
            ));
        }
    }
    s
}

const TMA_FEATURES: [&str; 5] = ["tma_1d", "tma_2d", "tma_3d", "tma_4d", "tma_5d"];
const TMA_STORE_FEATURES: [&str; 5] = [
    "tma_store_1d",
    "tma_store_2d",
    "tma_store_3d",
    "tma_store_4d",
    "tma_store_5d",
];

/// The barrier tensor's 32-bit shared address variable.
fn barrier_base(cx: &Ctx, barriers: VarId) -> String {
    format!("{}_bar", cx.name(barriers))
}

/// `uint32_t` shared address of barrier `index`.
fn barrier_addr(cx: &Ctx, barriers: VarId, index: &Expr) -> String {
    match cx.facts.constant(index) {
        Some(0) => barrier_base(cx, barriers),
        Some(i) => format!("({} + {}u)", barrier_base(cx, barriers), 8 * i),
        None => format!(
            "({} + 8u * (uint32_t)({}))",
            barrier_base(cx, barriers),
            cx.expr(index)
        ),
    }
}

pub(crate) fn mbarriers(
    cx: &mut Ctx,
    out: VarId,
    count: u32,
    arrivals: u32,
) -> Result<(), CodegenError> {
    let slot = cx
        .plan
        .slot(out)
        .cloned()
        .ok_or_else(|| cx.err("mbarriers missing from the shared-memory plan"))?;
    cx.features.insert("mbarrier");
    let layout = SharedLayout::row_major(&[count as usize, 2]);
    cx.shared.insert(
        out,
        SharedInfo {
            dtype: DType::UInt(32),
            root_layout: layout,
            root_offset: slot.offset,
            origin: vec![Expr::Int(0); 2],
            shape: vec![count as usize, 2],
        },
    );
    let base = barrier_base(cx, out);
    cx.w.line(format!(
        "const uint32_t {base} = (uint32_t)__cvta_generic_to_shared({SMEM}) + {}u;  // {count} mbarriers",
        slot.offset
    ));
    // Bytes another tensor used before are free once every thread passed a barrier.
    cx.w.line(cx.block_barrier());
    cx.w.open(format!("if ({TID} == 0)"));
    cx.w.open(format!("for (int i = 0; i < {count}; ++i)"));
    cx.w.line(format!(
        "tilus_mbar_init({base} + 8u * (uint32_t)i, {arrivals}u);"
    ));
    cx.w.close();
    cx.w.line("asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");");
    cx.w.close();
    cx.w.line(cx.block_barrier());
    Ok(())
}

/// The tensor-map parameter for copies from or to the global view `src` in boxes of
/// `box_shape` laid out in shared memory with `swizzle`, added to the kernel's parameters on
/// first use.
fn tensor_map(
    cx: &mut Ctx,
    src: VarId,
    box_shape: &[usize],
    swizzle: TmaSwizzle,
    instr: &str,
) -> Result<String, CodegenError> {
    let g =
        cx.p.ty(src)
            .as_global()
            .cloned()
            .ok_or_else(|| cx.err(format!("{instr}: {} is not a global view", cx.ir_name(src))))?;
    let param =
        cx.p.params
            .iter()
            .position(|p| p.var == g.ptr)
            .ok_or_else(|| {
                cx.err(format!(
                    "{instr}: {} does not view a pointer parameter",
                    cx.ir_name(src)
                ))
            })?;
    let kind = ParamKind::TensorMap {
        param,
        dtype: g.dtype,
        shape: g.shape.clone(),
        box_shape: box_shape.iter().map(|&x| x as u32).collect(),
        swizzle,
    };
    if let Some(p) = cx.tensor_maps.iter().find(|p| p.kind == kind) {
        return Ok(p.name.clone());
    }
    let name = format!("{}_tmap{}", cx.name(g.ptr), cx.tensor_maps.len());
    cx.tensor_maps.push(KernelParam {
        name: name.clone(),
        ir_name: cx.ir_name(g.ptr),
        kind,
    });
    Ok(name)
}

/// A shared box of a tensor-map copy: its address expression, the copy engine's swizzle mode
/// and its dtype and shape (`instr`, `role`: for messages).
struct SharedBox {
    address: String,
    swizzle: TmaSwizzle,
    dtype: DType,
    shape: Vec<usize>,
}

fn shared_box(cx: &mut Ctx, v: VarId, instr: &str, role: &str) -> Result<SharedBox, CodegenError> {
    let d = cx.shared_info(v)?;
    let lead = d.root_layout.rank() - d.shape.len();
    let layout = SharedLayout {
        shape: d.shape.clone(),
        strides: d.root_layout.strides[lead..].to_vec(),
        swizzle: d.root_layout.swizzle,
    };
    let swizzle = tma_swizzle(&layout, d.dtype).map_err(|e| cx.err(format!("{instr}: {e}")))?;
    let bits = d.dtype.bits() as usize;
    // The box starts at a multiple of 128 bytes, and with a swizzle on its 8-row atom (the
    // copy engine swizzles by address bits, as the VM's layout does from the allocation).
    let align = (swizzle.span() * 8).max(128);
    let mut terms = vec![format!("{}u", d.root_offset)];
    for (dim, origin) in d.origin.iter().enumerate() {
        if origin == &Expr::Int(0) {
            continue;
        }
        let stride_bits = d.root_layout.strides[dim] * bits;
        let need = 8 * align / gcd(stride_bits, 8 * align);
        let proof = cx.facts.divisible(origin, need as i64);
        if matches!(proof, super::super::expr::Divisible::No) {
            return Err(cx.err(format!(
                "{instr}: the {role} {} must start on a multiple of {align} bytes, but its offset `{}` in dimension {dim} (stride {} bytes) is not provably a multiple of {need}",
                cx.ir_name(v),
                cx.expr(origin),
                stride_bits as f64 / 8.0
            )));
        }
        cx.assume(&proof);
        terms.push(if stride_bits.is_multiple_of(8) {
            format!("(uint32_t)({}) * {}u", cx.expr(origin), stride_bits / 8)
        } else {
            format!("(((uint32_t)({}) * {stride_bits}u) >> 3)", cx.expr(origin))
        });
    }
    if d.root_offset % align != 0 {
        return Err(cx.err(format!(
            "{instr}: the {role} {} lies at shared byte {}, not a multiple of {align}",
            cx.ir_name(v),
            d.root_offset
        )));
    }
    Ok(SharedBox {
        address: format!(
            "(uint32_t)__cvta_generic_to_shared({SMEM}) + {}",
            terms.join(" + ")
        ),
        swizzle,
        dtype: d.dtype,
        shape: d.shape.clone(),
    })
}

/// The tensor-map coordinates of `offset` into global `g` (innermost first), the innermost
/// in bytes for sub-byte elements, which it must be a whole number of.
fn coordinates(
    cx: &mut Ctx,
    offset: &[Expr],
    g: VarId,
    dtype: DType,
    instr: &str,
) -> Result<Vec<String>, CodegenError> {
    let rank = offset.len();
    let per_byte = (8 / dtype.bits() as usize).max(1);
    let mut coords = Vec::with_capacity(rank);
    for (i, e) in offset.iter().enumerate().rev() {
        if i + 1 == rank && per_byte > 1 {
            let proof = cx.facts.divisible(e, per_byte as i64);
            if matches!(proof, super::super::expr::Divisible::No) {
                return Err(cx.err(format!(
                    "{instr}: the innermost offset `{}` into {} must be a whole byte, a provable multiple of {per_byte} {dtype} elements",
                    cx.expr(e),
                    cx.ir_name(g),
                )));
            }
            cx.assume(&proof);
            coords.push(format!("(int)(({}) / {per_byte})", cx.expr(e)));
        } else {
            coords.push(format!("(int)({})", cx.expr(e)));
        }
    }
    Ok(coords)
}

/// The box covers the view's trailing dimensions; the leading ones are 1 wide.
fn box_shape(rank: usize, shape: &[usize]) -> Vec<usize> {
    let mut b = vec![1; rank.saturating_sub(shape.len())];
    b.extend_from_slice(shape);
    b
}

pub(crate) fn tma_load(
    cx: &mut Ctx,
    dst: VarId,
    src: VarId,
    src_offset: &[Expr],
    barriers: VarId,
    index: &Expr,
) -> Result<(), CodegenError> {
    let d = shared_box(cx, dst, "tma_load", "destination")?;
    let rank = src_offset.len();
    let map = tensor_map(cx, src, &box_shape(rank, &d.shape), d.swizzle, "tma_load")?;
    let feature = *TMA_FEATURES
        .get(rank.wrapping_sub(1))
        .ok_or_else(|| cx.err(format!("tma_load: rank {rank} is not 1 to 5")))?;
    cx.features.insert(feature);
    cx.features.insert("mbarrier");
    let bytes: usize = d.shape.iter().product::<usize>() * d.dtype.bits() as usize / 8;
    let coords = coordinates(cx, src_offset, src, d.dtype, "tma_load")?;
    let bar = barrier_addr(cx, barriers, index);
    cx.w.open(format!("if ({TID} == 0)"));
    cx.w.line(format!(
        "tilus_tma_load_{rank}d({}, &{map}, {bar}, {bytes}u, {});",
        d.address,
        coords.join(", ")
    ));
    cx.w.close();
    Ok(())
}

/// Every thread fences its shared writes for the copy engine (the async proxy) and the block
/// synchronizes; thread 0 issues the store and commits it. The copy engine then reads `src`
/// until a `tma_store_wait` (and thread 0 waits for it before the kernel ends, [`drain`]); the
/// global writes land by the kernel's end.
pub(crate) fn tma_store(
    cx: &mut Ctx,
    src: VarId,
    dst: VarId,
    dst_offset: &[Expr],
) -> Result<(), CodegenError> {
    let s = shared_box(cx, src, "tma_store", "source")?;
    let rank = dst_offset.len();
    let map = tensor_map(cx, dst, &box_shape(rank, &s.shape), s.swizzle, "tma_store")?;
    let feature = *TMA_STORE_FEATURES
        .get(rank.wrapping_sub(1))
        .ok_or_else(|| cx.err(format!("tma_store: rank {rank} is not 1 to 5")))?;
    cx.features.insert(feature);
    let coords = coordinates(cx, dst_offset, dst, s.dtype, "tma_store")?;
    cx.w.line("asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");");
    cx.w.line(cx.block_barrier());
    cx.w.open(format!("if ({TID} == 0)"));
    cx.w.line(format!(
        "tilus_tma_store_{rank}d({}, &{map}, {});",
        s.address,
        coords.join(", ")
    ));
    cx.w.close();
    Ok(())
}

/// `tma_store_wait`: thread 0 (which issued every store) waits for their reads, and the block
/// synchronizes.
pub(crate) fn tma_store_wait(cx: &mut Ctx) {
    if cx.uses_tma_store {
        cx.w.line(format!("if ({TID} == 0) tilus_tma_store_wait();"));
    }
    cx.w.line(cx.block_barrier());
}

/// Before the kernel ends (or a thread returns): the block's shared memory must outlive the
/// copy engine's reads of the `tma_store` sources, so thread 0 waits for them.
pub(crate) fn drain(cx: &mut Ctx) {
    if cx.uses_tma_store {
        cx.w.line(format!("if ({TID} == 0) tilus_tma_store_wait();"));
    }
}

pub(crate) fn arrive(cx: &mut Ctx, barriers: VarId, index: &Expr) -> Result<(), CodegenError> {
    let bar = barrier_addr(cx, barriers, index);
    cx.w.line("__syncwarp();");
    cx.w.line(format!("if (({TID} & 31) == 0) tilus_mbar_arrive({bar});"));
    Ok(())
}

pub(crate) fn wait(
    cx: &mut Ctx,
    barriers: VarId,
    index: &Expr,
    phase: &Expr,
) -> Result<(), CodegenError> {
    let bar = barrier_addr(cx, barriers, index);
    let parity = match cx.facts.constant(phase) {
        Some(p) => format!("{}u", p.rem_euclid(2)),
        None => format!("((uint32_t)({}) & 1u)", cx.expr(phase)),
    };
    cx.w.line(format!("tilus_mbar_wait({bar}, {parity});"));
    Ok(())
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use crate::codegen::emit;
    use crate::ir::{Expr, ProgramBuilder};
    use crate::layout::{SharedLayout, Swizzle};
    use crate::target::Target;
    use crate::DType;

    /// A kernel copying one `[64, 1024]` box of bits from `x [rows, k]` at `[0, inner]`.
    fn bits_copy(inner: impl FnOnce(&mut ProgramBuilder) -> Expr) -> Result<String, String> {
        let mut b = ProgramBuilder::new("k", 128);
        let rows = b.param_i32("rows");
        let k = b.param_i32("k");
        let x = b.param_ptr("x", DType::UInt(1), false);
        b.grid(vec![1.into()]);
        let gx = b.view_global("gx", x, DType::UInt(1), vec![rows.into(), k.into()]);
        let mut layout = SharedLayout::row_major(&[64, 1024]);
        layout.swizzle = Some(Swizzle {
            bits: 3,
            base: 7,
            shift: 3,
        });
        let s = b.allocate_shared("s", DType::UInt(1), layout);
        let bars = b.mbarriers("bars", 1, 1);
        let offset = inner(&mut b);
        b.tma_load(gx, s, vec![0.into(), offset], bars, 0);
        b.mbarrier_wait(bars, 0, 0);
        emit(&b.finish(), &Target::SM90)
            .map(|k| k.source)
            .map_err(|e| e.to_string())
    }

    /// Bits go through the copy engine as bytes: 8192-byte boxes, the inner coordinate divided
    /// by 8, and an inner offset that is not provably a whole byte is refused.
    #[test]
    fn bit_boxes_are_copied_as_bytes() {
        let src = bits_copy(|_| Expr::Int(2048)).unwrap();
        assert!(src.contains("8192u, (int)((2048) / 8)"), "{src}");
        let e = bits_copy(|b| {
            let [bi] = b.block_indices(&["bi"])[..] else {
                unreachable!()
            };
            Expr::Var(bi)
        })
        .unwrap_err();
        assert!(
            e.contains("innermost offset") && e.contains("multiple of 8 u1 elements"),
            "{e}"
        );
    }
}
