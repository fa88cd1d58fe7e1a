//! The 1-bit tensor-core `mma` of a u1 `dot` (`MmaKind::B1`): the device helper the `dot`
//! emitter ([`super::mma`]) calls once per warp tile.
//!
//! `mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc` computes, per element of the
//! `[16, 8]` tile, `d = c + popc(a_row AND b_col)` over 256 bits: the u1 `dot` of the VM, whose
//! products are ANDs. It is native on sm_80 and sm_90 (SASS `BMMA`). The `.xor.popc` form is not
//! used: it is emulated on sm_90 and 5.9x slower, and bipolar products reduce to AND
//! (`(2a-1)(2b-1) = 4ab - 2a - 2b + 1`). The s32 sum wraps.

/// The feature name the prelude looks for.
pub(crate) const FEATURE: &str = "mma_b1";
/// The helper the `dot` emitter calls: `tilus_mma_b1(d, a, b)` with 4 words of A, 2 of B and 4
/// s32 of C/D.
pub(crate) const HELPER: &str = "tilus_mma_b1";

/// The feature and helper of the paired fragments (`MmaKind::B1Paired`): A's words come in the
/// order (row half, k half), the instruction takes (k half, row half), so words 1 and 2 swap.
pub(crate) const FEATURE_PAIRED: &str = "mma_b1_paired";
pub(crate) const HELPER_PAIRED: &str = "tilus_mma_b1_paired";

/// The helper of the paired fragments.
pub(crate) fn helper_paired() -> &'static str {
    r#"
// tilus_mma_b1 on the paired fragments: a's words are (row g, k half 0), (row g, half 1),
// (row g+8, half 0), (row g+8, half 1); the instruction reads rows g, g+8 of half 0 first.
static __device__ __forceinline__ void tilus_mma_b1_paired(uint32_t* d, const uint32_t* a, const uint32_t* b) {
  asm("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[2]), "r"(a[1]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
"#
}

/// The helper's definition.
pub(crate) fn helper() -> &'static str {
    r#"
// d += popc(a AND b) on one m16n8k256 tile: a = 4 registers (128 u1), b = 2 (64 u1), c/d = 4 s32.
static __device__ __forceinline__ void tilus_mma_b1(uint32_t* d, const uint32_t* a, const uint32_t* b) {
  asm("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
"#
}
