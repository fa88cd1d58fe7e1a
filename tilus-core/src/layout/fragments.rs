//! The register layouts of the `mma.sync.aligned.m16n8k16` operands (PTX ISA, "Matrix Fragments
//! for mma.m16n8k16"), by name. Layout text may use them as atoms (`mma_a`) and after a `.`
//! (`spatial(1, 4).local(1, 8).mma_c`), so a kernel names the fragment instead of spelling its
//! composition out; the verifier's `dot` rule and the code generator use the same definitions.
//!
//! | name | shape | operand |
//! | --- | --- | --- |
//! | `mma_a` | `[16, 16]` | A of f16/bf16: `column_local(2, 2).spatial(8, 4).local(1, 2)` |
//! | `mma_b` | `[16, 8]` | B of f16/bf16: `local(2, 1).column_spatial(4, 8).local(2, 1)` |
//! | `mma_c` | `[16, 8]` | C/D, f32 (also i32): `local(2, 1).spatial(8, 4).local(1, 2)` |
//! | `mma_a_i8` | `[16, 16]` | A of i8/u8: `local(2, 1).spatial(8, 4).local(1, 4)` |
//! | `mma_b_i8` | `[16, 8]` | B of i8/u8: `column_spatial(4, 8).local(4, 1)` |
//! | `mma_b_t` | `[8, 16]` | `mma_b` with its dimensions swapped, the same registers in the same order: an operand stored n-major (the rows of K for `Q · Kᵀ`) loads in `..mma_b_t` and becomes B with a free `view` to `..mma_b` |
//! | `mma_a_t` | `[16, 16]` | `mma_a` with its dimensions swapped: a `[k, n]` weight tile held in `..mma_a_t` is the A operand of the transposed product `Cᵀ = Wᵀ · Xᵀ` after a free `view` to `..mma_a` |
//! | `mma_c_t` | `[8, 16]` | `mma_c` with its dimensions swapped: the `[n, m]` accumulator of that product, viewed as `[m, n]` for the store |
//! | `mma_b1_a` | `[16, 256]` | A of u1 (`mma.m16n8k256 .b1`, four `.b32` registers of 32 bits): `column_local(2, 2).spatial(8, 4).local(1, 32)` |
//! | `mma_b1_b` | `[256, 8]` | B of u1 (two `.b32` registers): `local(2, 1).column_spatial(4, 8).local(32, 1)` |
//! | `mma_b1_c` | `[16, 8]` | C/D of the u1 mma, i32: the same map as `mma_c` |
//! | `mma_b1_ap` | `[16, 256]` | A of u1, *paired*: `spatial(8, 4).local(2, 64)`, rows and k permuted within the tile (below) |
//! | `mma_b1_bp` | `[256, 8]` | B of u1, paired: `column_spatial(4, 8).local(64, 1)` |
//! | `mma_b1_cp` | `[16, 8]` | C/D, paired: `spatial(8, 4).local(2, 2)` |
//! | `mma_a_k4` | `[16, 16]` | A of f16/bf16, *runs of 4*: the elements of `local(2, 1).spatial(8, 4).local(1, 4)`, k permuted within the tile, locals in the instruction's order (below) |
//! | `mma_b_k4` | `[16, 8]` | B of f16/bf16, runs of 4: `column_spatial(4, 8).local(4, 1)` (C is `mma_c`) |
//! | `mma_a_k8` | `[16, 32]` | A of f16/bf16, *runs of 8* (two instructions): the elements of `local(2, 1).spatial(8, 4).local(1, 8)`, locals in the instructions' order |
//! | `mma_b_k8` | `[32, 8]` | B of f16/bf16, runs of 8: `column_spatial(4, 8).local(8, 1)` |
//! | `mma_a_f8` | `[16, 32]` | A of fp8 (`mma.m16n8k32` e4m3/e5m2, sm_89+: four `.b32` registers of 4 codes): `column_local(2, 2).spatial(8, 4).local(1, 4)` |
//! | `mma_b_f8` | `[32, 8]` | B of fp8 (two registers): `local(2, 1).column_spatial(4, 8).local(4, 1)` (C is `mma_c`) |
//! | `mma_a_f8_t` | `[32, 16]` | `mma_a_f8` with its dimensions swapped (a `[k, n]` weight tile as A of the transposed product) |
//! | `mma_b_f8_t` | `[8, 32]` | `mma_b_f8` with its dimensions swapped (an operand stored n-major) |
//!
//! **Run fragments.** An operand whose values come `r` consecutive k at a time (a vector-quantized
//! weight: one codebook row of 4 or 8 values per look-up; activations read 8 or 16 bytes at a
//! time) fits the f16 instruction when k is permuted, A and B alike: in the runs-of-`r` set
//! (`r` = 4 or 8) thread `4 g + t` holds k `r t .. r t + r` of rows `g` and `g + 8` (A) or of
//! column `g` (B), and the tile spans `4 r` of k: `r / 4` instructions. Instruction `j` reads
//! its k `8 h + 2 t + p` (`h`, `p` in 0..2) from the run's element `4 j + 2 h + p`. B's locals
//! are the run in order (instruction `j` takes words `2 j`, `2 j + 1`); A's are ordered as the
//! instruction reads them, (`j`, `h`, row half, `p`) (two `swap_inner_locals` of the row-major
//! runs), so instruction `j` takes words `4 j .. 4 j + 4` and no register moves: loaded from
//! memory, each word lands where the instruction wants it. The accumulator is `mma_c`.
//!
//! **Paired fragments.** The u1 mma sums over k, so any permutation of k shared by A and B, and
//! any permutation of the 16 rows shared by A and C, computes the same product. The paired set
//! puts instruction row `8 h + g` at row `2 g + h` and instruction k `128 j + 32 t + i` (bit `i`
//! of lane group `t`, half `j`) at `64 t + 32 j + i`, so each thread holds two adjacent words of
//! each row (A: `[16, 8]` words in `spatial(8, 4).local(2, 2)`; B, n-major: `spatial(8, 4).local(1, 2)`)
//! and two adjacent accumulators: 8-byte loads and stores. A's registers are then in the order
//! (row half, k half); the code generator passes them to the instruction as (k half, row half).
//!
//! The u1 fragments hold 32 consecutive k of one row (A) or column (B) in each 32-bit register,
//! bit `i` of register `r` being local `32 r + i`: a `[rows, k / 32]` array of `u32` words loaded
//! in `column_local(2, 2).spatial(8, 4)` (A) or `local(1, 2).spatial(8, 4)` (B, stored n-major)
//! becomes the fragment with a free `view`. (The PTX ISA's A formula prints `+ i` where it means
//! `+ (i & 0x1F)` for `i < 64`: registers 0 and 1 cover the same columns, rows `g` and `g + 8`.)
//!
//! `verify::dot` says how a `dot` tiles them.
//!
//! **Warpgroup fragments** (`wgmma.mma_async.m64nNk16`, sm_90a; [`wgmma_c`]): the f32
//! accumulator of one warpgroup (128 threads) is `[64, N]` in `spatial(4, 1).local(1, N / 8).mma_c`:
//! warp `w` holds rows `16 w ..`, and each thread holds the `mma_c` elements of each 8-column
//! block in turn (the ISA's `d[4 j + i]` is local `4 j + i`). B is read from shared memory
//! (`verify::wgmma`); A either from shared memory too or from registers in [`wgmma_a`],
//! `[64, 16]` in `spatial(4, 1).mma_a`: warp `w` holds rows `16 w ..` in the `mma.m16n8k16` A
//! arrangement (the ISA's `a0..a7`, four `.f16x2` registers, are locals 0..7).

use super::Layout;

/// `(name, text)` of every named fragment.
pub const FRAGMENTS: [(&str, &str); 22] = [
    ("mma_a", "column_local(2, 2).spatial(8, 4).local(1, 2)"),
    ("mma_b", "local(2, 1).column_spatial(4, 8).local(2, 1)"),
    ("mma_c", "local(2, 1).spatial(8, 4).local(1, 2)"),
    ("mma_a_i8", "local(2, 1).spatial(8, 4).local(1, 4)"),
    ("mma_b_i8", "column_spatial(4, 8).local(4, 1)"),
    ("mma_b_t", "local(1, 2).spatial(8, 4).local(1, 2)"),
    ("mma_a_t", "local(2, 2).column_spatial(4, 8).local(2, 1)"),
    ("mma_c_t", "local(1, 2).column_spatial(4, 8).local(2, 1)"),
    ("mma_b1_a", "column_local(2, 2).spatial(8, 4).local(1, 32)"),
    ("mma_b1_b", "local(2, 1).column_spatial(4, 8).local(32, 1)"),
    ("mma_b1_c", "local(2, 1).spatial(8, 4).local(1, 2)"),
    ("mma_b1_ap", "spatial(8, 4).local(2, 64)"),
    ("mma_b1_bp", "column_spatial(4, 8).local(64, 1)"),
    ("mma_b1_cp", "spatial(8, 4).local(2, 2)"),
    (
        "mma_a_k4",
        "swap_inner_locals(swap_inner_locals(local(2, 1).spatial(8, 4).local(1, 4), 4, 2), 2, 2)",
    ),
    ("mma_b_k4", "column_spatial(4, 8).local(4, 1)"),
    (
        "mma_a_k8",
        "swap_inner_locals(swap_inner_locals(local(2, 1).spatial(8, 4).local(1, 8), 8, 2), 2, 2)",
    ),
    ("mma_b_k8", "column_spatial(4, 8).local(8, 1)"),
    ("mma_a_f8", "column_local(2, 2).spatial(8, 4).local(1, 4)"),
    ("mma_b_f8", "local(2, 1).column_spatial(4, 8).local(4, 1)"),
    ("mma_a_f8_t", "local(2, 2).column_spatial(4, 8).local(4, 1)"),
    ("mma_b_f8_t", "local(1, 2).spatial(8, 4).local(1, 4)"),
];

/// The text of the accumulator fragment of `wgmma.m64nNk16` for `n` columns (a multiple of 8
/// from 8 to 256; see the module docs).
pub fn wgmma_c_text(n: usize) -> String {
    format!("spatial(4, 1).local(1, {}).mma_c", n / 8)
}

/// The accumulator fragment of `wgmma.m64nNk16` for `n` columns (a multiple of 8, 8 to 256).
pub fn wgmma_c(n: usize) -> Layout {
    super::parse(&wgmma_c_text(n)).expect("the wgmma fragment text is a valid layout")
}

/// The text of the register A operand fragment of `wgmma.m64nNk16` (f16/bf16): each warp of the
/// warpgroup holds 16 rows by 16 of `k` in the `mma.m16n8k16` A arrangement, warps stacked along
/// `m` (see the module docs).
pub const WGMMA_A_TEXT: &str = "spatial(4, 1).mma_a";

/// The register A operand fragment of `wgmma.m64nNk16` (f16/bf16), `[64, 16]` over 128 threads.
pub fn wgmma_a() -> Layout {
    super::parse(WGMMA_A_TEXT).expect("the wgmma fragment text is a valid layout")
}

/// The text of the register A operand fragment of `wgmma.m64nNk32` on 8-bit operands (`.s8`,
/// `.u8`): each warp holds 16 rows by 32 of `k` in the `mma.m16n8k32` A arrangement (four
/// `.b32` registers of four codes), warps stacked along `m`, as [`WGMMA_A_TEXT`] for 16 bits.
pub const WGMMA_A8_TEXT: &str = "spatial(4, 1).mma_a_f8";

/// The register A operand fragment of `wgmma.m64nNk32` on 8-bit operands, `[64, 32]` over 128
/// threads.
pub fn wgmma_a8() -> Layout {
    super::parse(WGMMA_A8_TEXT).expect("the wgmma fragment text is a valid layout")
}

/// The text of the fragment called `name`, if there is one.
pub fn fragment_text(name: &str) -> Option<&'static str> {
    FRAGMENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// The fragment called `name`, if there is one.
pub fn fragment(name: &str) -> Option<Layout> {
    let text = fragment_text(name)?;
    Some(super::parse(text).expect("the fragment texts are valid layouts"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fragment_parses_to_its_shape() {
        let shapes = [
            [16, 16],
            [16, 8],
            [16, 8],
            [16, 16],
            [16, 8],
            [8, 16],
            [16, 16],
            [8, 16],
            [16, 256],
            [256, 8],
            [16, 8],
            [16, 256],
            [256, 8],
            [16, 8],
            [16, 16],
            [16, 8],
            [16, 32],
            [32, 8],
            [16, 32],
            [32, 8],
            [32, 16],
            [8, 32],
        ];
        assert_eq!(shapes.len(), FRAGMENTS.len());
        for ((name, _), shape) in FRAGMENTS.iter().zip(shapes) {
            let l = fragment(name).unwrap();
            assert_eq!(l.shape(), &shape[..], "{name}");
            assert_eq!(l.num_threads(), 32, "{name}: a warp");
        }
        assert!(fragment("mma_d").is_none());
    }

    /// The fp8 fragments are the ISA's `mma.m16n8k32` ones: lane `4 g + t`, register `r`, byte
    /// `i` holds A `[g + 8 (r % 2), 4 t + i + 16 (r / 2)]` and B `[4 t + i + 16 r, g]`; the `_t`
    /// forms hold the same elements, transposed, at the same locals.
    #[test]
    fn fp8_fragments_follow_the_isa() {
        let f = |n: &str| fragment(n).unwrap();
        let (a, b, at, bt) = (
            f("mma_a_f8"),
            f("mma_b_f8"),
            f("mma_a_f8_t"),
            f("mma_b_f8_t"),
        );
        for lane in 0..32 {
            let (g, t) = (lane / 4, lane % 4);
            for r in 0..4 {
                for i in 0..4 {
                    let want = vec![g + 8 * (r % 2), 4 * t + i + 16 * (r / 2)];
                    assert_eq!(a.eval(lane, 4 * r + i), want, "A lane {lane} r {r} i {i}");
                    assert_eq!(at.eval(lane, 4 * r + i), vec![want[1], want[0]]);
                }
            }
            for r in 0..2 {
                for i in 0..4 {
                    let want = vec![4 * t + i + 16 * r, g];
                    assert_eq!(b.eval(lane, 4 * r + i), want, "B lane {lane} r {r} i {i}");
                    assert_eq!(bt.eval(lane, 4 * r + i), vec![want[1], want[0]]);
                }
            }
        }
    }

    /// The paired u1 fragments are the ISA's under one row permutation (shared by A and C) and
    /// one k permutation (shared by A and B), with A's registers in the order the code generator
    /// reorders: register `r` of the instruction is paired word `2 (r & 1) + (r >> 1)`.
    #[test]
    fn paired_b1_fragments_permute_the_isa_ones() {
        let f = |n: &str| fragment(n).unwrap();
        let (a, b, c) = (f("mma_b1_a"), f("mma_b1_b"), f("mma_b1_c"));
        let (ap, bp, cp) = (f("mma_b1_ap"), f("mma_b1_bp"), f("mma_b1_cp"));
        let row = |r: usize| 2 * (r % 8) + r / 8;
        let k = |k: usize| 64 * ((k % 128) / 32) + 32 * (k / 128) + k % 32;
        let ks: std::collections::HashSet<usize> = (0..256).map(k).collect();
        assert_eq!(ks.len(), 256, "k map is a permutation");
        for lane in 0..32 {
            for reg in 0..4 {
                let word = 2 * (reg & 1) + (reg >> 1);
                for bit in 0..32 {
                    let isa = a.eval(lane, 32 * reg + bit);
                    assert_eq!(ap.eval(lane, 32 * word + bit), vec![row(isa[0]), k(isa[1])]);
                }
            }
            for i in 0..64 {
                let isa = b.eval(lane, i);
                assert_eq!(
                    bp.eval(lane, i),
                    vec![k(isa[0]), isa[1]],
                    "B lane {lane} b{i}"
                );
            }
            for i in 0..4 {
                let isa = c.eval(lane, i);
                assert_eq!(
                    cp.eval(lane, i),
                    vec![row(isa[0]), isa[1]],
                    "C lane {lane} c{i}"
                );
            }
        }
    }

    /// The run fragments feed the instruction the ISA's f16 fragments under one k permutation
    /// shared by A and B: instruction `j`'s register `a_i` is run word `4 j + i`, `b_i` word
    /// `2 j + i`, and their elements sit at the ISA's row (column) and at a k that maps one to
    /// one onto the run's: thread `t` of a row holds the run `r t .. r t + r`.
    #[test]
    fn run_fragments_permute_the_isa_ones() {
        let f = |n: &str| fragment(n).unwrap();
        let (a, b) = (f("mma_a"), f("mma_b"));
        for r in [4usize, 8] {
            let (ar, br) = (f(&format!("mma_a_k{r}")), f(&format!("mma_b_k{r}")));
            assert_eq!((ar.num_locals(), br.num_locals()), (2 * r, r));
            // The k of the run tile that instruction `j` computes at its own k `kk`.
            let k = |j: usize, kk: usize| {
                let (h, t, p) = (kk / 8, (kk % 8) / 2, kk % 2);
                r * t + 4 * j + 2 * h + p
            };
            let mut seen = std::collections::HashSet::new();
            for j in 0..r / 4 {
                for kk in 0..16 {
                    assert!(seen.insert(k(j, kk)), "k map is one to one");
                }
            }
            assert_eq!(seen.len(), 4 * r);
            for lane in 0..32 {
                for j in 0..r / 4 {
                    // A: instruction register i (two f16) is run word `4 j + i`.
                    for (i, w) in (4 * j..4 * j + 4).enumerate() {
                        for half in 0..2 {
                            let isa = a.eval(lane, 2 * i + half);
                            let run = ar.eval(lane, 2 * w + half);
                            assert_eq!(run, vec![isa[0], k(j, isa[1])], "A r{r} lane {lane} j{j}");
                        }
                    }
                    for i in 0..2 {
                        for half in 0..2 {
                            let isa = b.eval(lane, 2 * i + half);
                            let run = br.eval(lane, 2 * (2 * j + i) + half);
                            assert_eq!(run, vec![k(j, isa[0]), isa[1]], "B r{r} lane {lane} j{j}");
                        }
                    }
                }
            }
        }
    }

    /// The u1 fragments against the PTX ISA's formulas for `mma.m16n8k256 .b1` (section "Matrix
    /// Fragments for mma.m16n8k256"), computed here per (lane, register, bit) independently of
    /// the layout texts: `groupID = lane >> 2`, `threadID_in_group = lane % 4`, element `i` of a
    /// thread is bit `i % 32` of register `i / 32`.
    #[test]
    fn b1_fragments_match_the_ptx_isa() {
        let (a, b, c) = (
            fragment("mma_b1_a").unwrap(),
            fragment("mma_b1_b").unwrap(),
            fragment("mma_b1_c").unwrap(),
        );
        assert_eq!(
            (a.num_locals(), b.num_locals(), c.num_locals()),
            (128, 64, 4)
        );
        for lane in 0..32usize {
            let (g, tig) = (lane >> 2, lane % 4);
            for reg in 0..4 {
                for bit in 0..32usize {
                    let i = reg * 32 + bit;
                    // A: rows g for a0..a31 and a64..a95, else g + 8; columns tig * 32 + (i & 31),
                    // plus 128 from a64 on.
                    let row = if i < 32 || (64..96).contains(&i) {
                        g
                    } else {
                        g + 8
                    };
                    let col = tig * 32 + (i & 0x1f) + if i >= 64 { 128 } else { 0 };
                    assert_eq!(a.eval(lane, i), vec![row, col], "A lane {lane} a{i}");
                }
            }
            for i in 0..64usize {
                let row = tig * 32 + (i & 0x1f) + if i >= 32 { 128 } else { 0 };
                assert_eq!(b.eval(lane, i), vec![row, g], "B lane {lane} b{i}");
            }
            for i in 0..4usize {
                let row = if i < 2 { g } else { g + 8 };
                let col = tig * 2 + (i & 1);
                assert_eq!(c.eval(lane, i), vec![row, col], "C lane {lane} c{i}");
            }
        }
    }

    /// The wgmma accumulator against the PTX ISA's formula for `wgmma.m64nNk16` with an f32
    /// D ("Register fragment: matrix D"): in warp `w` of the warpgroup, with
    /// `groupID = lane >> 2` and `threadID_in_group = lane % 4`, register `i` holds
    /// row `16 w + groupID + 8 ((i >> 1) & 1)`, column `8 (i >> 2) + 2 threadID_in_group + (i & 1)`.
    #[test]
    fn wgmma_accumulator_matches_the_ptx_isa() {
        for n in [8, 16, 64, 120, 256] {
            let d = wgmma_c(n);
            assert_eq!(d.shape(), &[64, n][..]);
            assert_eq!((d.num_threads(), d.num_locals()), (128, n / 2), "n = {n}");
            for t in 0..128usize {
                let (w, lane) = (t / 32, t % 32);
                let (g, tig) = (lane >> 2, lane % 4);
                for i in 0..n / 2 {
                    let row = 16 * w + g + 8 * ((i >> 1) & 1);
                    let col = 8 * (i >> 2) + 2 * tig + (i & 1);
                    assert_eq!(d.eval(t, i), vec![row, col], "n {n} thread {t} d{i}");
                }
            }
        }
    }

    /// The wgmma register A operand against the PTX ISA's "Register fragment layout for matrix
    /// A" of `wgmma.m64nNk16` (f16/bf16; the same arrangement as CUTLASS's `ALayout_64x16`): in
    /// warp `w` of the warpgroup, with `groupID = lane >> 2` and `threadID_in_group = lane % 4`,
    /// element `a_i` (register `i / 2`, half `i % 2`) is row `16 w + groupID` for
    /// `a0, a1, a4, a5` and `16 w + groupID + 8` for `a2, a3, a6, a7`, column
    /// `2 threadID_in_group + (i & 1)`, plus 8 for `i >= 4`.
    #[test]
    fn wgmma_a_matches_the_ptx_isa() {
        let a = wgmma_a();
        assert_eq!(a.shape(), &[64, 16][..]);
        assert_eq!((a.num_threads(), a.num_locals()), (128, 8));
        for t in 0..128usize {
            let (w, lane) = (t / 32, t % 32);
            let (g, tig) = (lane >> 2, lane % 4);
            for i in 0..8usize {
                let row = 16 * w + g + if matches!(i, 2 | 3 | 6 | 7) { 8 } else { 0 };
                let col = 2 * tig + (i & 1) + if i >= 4 { 8 } else { 0 };
                assert_eq!(a.eval(t, i), vec![row, col], "thread {t} a{i}");
            }
        }
        // Every element exactly once: a bijection of (thread, local) onto [64, 16].
        let mut seen = std::collections::HashSet::new();
        for t in 0..128 {
            for i in 0..8 {
                assert!(seen.insert(a.eval(t, i)));
            }
        }
        assert_eq!(seen.len(), 64 * 16);
    }

    /// The 8-bit wgmma register A operand against the PTX ISA's register fragment of
    /// `wgmma.m64nNk32` for `.s8`/`.u8`/`.e4m3`/`.e5m2` A: in warp `w`, with `groupID = lane >> 2`
    /// and `threadID_in_group = lane % 4`, byte `i` of register `r` is row
    /// `16 w + groupID + 8 (r % 2)`, column `4 threadID_in_group + i + 16 (r / 2)`.
    #[test]
    fn wgmma_a8_matches_the_ptx_isa() {
        let a = wgmma_a8();
        assert_eq!(a.shape(), &[64, 32][..]);
        assert_eq!((a.num_threads(), a.num_locals()), (128, 16));
        let mut seen = std::collections::HashSet::new();
        for t in 0..128usize {
            let (w, lane) = (t / 32, t % 32);
            let (g, tig) = (lane >> 2, lane % 4);
            for r in 0..4 {
                for i in 0..4 {
                    let want = vec![16 * w + g + 8 * (r % 2), 4 * tig + i + 16 * (r / 2)];
                    assert_eq!(a.eval(t, 4 * r + i), want, "thread {t} r {r} i {i}");
                    assert!(seen.insert(want));
                }
            }
        }
        assert_eq!(seen.len(), 64 * 32);
    }

    /// Each `_t` fragment holds, in every thread's register, the element of its base fragment
    /// with the coordinates swapped: a `view` between them moves no data.
    #[test]
    fn transposed_fragments_swap_coordinates() {
        for (t, base) in [
            ("mma_b_t", "mma_b"),
            ("mma_a_t", "mma_a"),
            ("mma_c_t", "mma_c"),
        ] {
            let (lt, lb) = (fragment(t).unwrap(), fragment(base).unwrap());
            assert_eq!(lt.shape(), &[lb.shape()[1], lb.shape()[0]][..], "{t}");
            assert_eq!(lt.num_locals(), lb.num_locals(), "{t}");
            for thread in 0..32 {
                for i in 0..lb.num_locals() {
                    let (x, y) = (lt.eval(thread, i), lb.eval(thread, i));
                    assert_eq!(
                        (x[0], x[1]),
                        (y[1], y[0]),
                        "{t}: thread {thread}, local {i}"
                    );
                }
            }
        }
    }
}
