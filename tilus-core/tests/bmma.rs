//! The u1 `dot` (1-bit tensor-core mma, `mma.m16n8k256 .and.popc`): the interpreter against a
//! Rust reference on fresh random bits, the dot plan the verifier picks, and its rejections.

#[path = "programs/bmma.rs"]
mod bmma;

use bmma::{bmma_program, bmma_program_paired, bmma_reference, Tiling};
use rand::Rng;
use tilus_core::interp::{run, Arg};
use tilus_core::ir::{Program, ProgramBuilder, RegisterType};
use tilus_core::layout::{fragments::fragment, parse, Layout};
use tilus_core::verify::{plan_dot, verify, DotPlan, MmaKind, Target};
use tilus_core::DType;

fn l(s: &str) -> Layout {
    parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn words(len: usize) -> Vec<u32> {
    let mut rng = rand::rng();
    (0..len).map(|_| rng.random::<u32>()).collect()
}

fn le(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Run [`bmma_program`] (and its paired form) on random bits over `k` and compare with the
/// reference exactly.
fn check(t: Tiling, k: usize, init: i32) {
    check_program(t, k, init, false);
    check_program(t, k, init, true);
}

fn check_program(t: Tiling, k: usize, init: i32, paired: bool) {
    let (m, n) = (t.bm(), t.bn());
    let (a, b) = (words(m * k / 32), words(n * k / 32));
    let mut args = [
        Arg::I32(k as i32),
        Arg::Buffer(le(&a)),
        Arg::Buffer(le(&b)),
        Arg::Buffer(vec![0xff; m * n * 4]),
    ];
    let p = if paired {
        bmma_program_paired(t, init)
    } else {
        bmma_program(t, init)
    };
    run(&p, &mut args).unwrap_or_else(|e| panic!("{t:?}: {e}"));
    let Arg::Buffer(out) = &args[3] else {
        unreachable!()
    };
    let got: Vec<i32> = out
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want = bmma_reference(&a, &b, m, n, k, init);
    assert_eq!(got, want, "{t:?} k={k} paired={paired}");
    // Random bits: about k / 4 ones per element, so no test passes on zeros.
    assert!(want.iter().all(|&v| v > init), "{t:?}");
}

#[test]
fn one_warp_one_tile_matches_reference() {
    let t = Tiling {
        wm: 1,
        wn: 1,
        fm: 1,
        fn_: 1,
        kt: 1,
    };
    check(t, 256, 0);
    check(t, 768, -7);
}

#[test]
fn warps_and_tiles_match_reference() {
    let t = Tiling {
        wm: 2,
        wn: 2,
        fm: 2,
        fn_: 1,
        kt: 2,
    };
    check(t, 1024, 3);
}

#[test]
fn u1_dot_plans_the_b1_mma() {
    let t = Tiling {
        wm: 2,
        wn: 2,
        fm: 2,
        fn_: 3,
        kt: 2,
    };
    let [a, b, c] = t.bit_layouts();
    let reg = |dtype, layout| RegisterType { dtype, layout };
    let plan = plan_dot(
        &reg(DType::UInt(1), a),
        &reg(DType::UInt(1), b),
        &reg(DType::Int(32), c),
        128,
        &Target::SM90,
    )
    .unwrap();
    let DotPlan::Mma { kind, a, .. } = plan else {
        panic!("expected the b1 mma, got {plan:?}")
    };
    assert_eq!(kind, MmaKind::B1);
    assert_eq!(
        a.shape(),
        &[4, 2][..],
        "2 warps x 2 tiles of m, 2 tiles of k"
    );
    // The paired fragments plan the same instruction, with the swapped A registers.
    let [a, b, c] = t.paired_bit_layouts();
    let plan = plan_dot(
        &reg(DType::UInt(1), a),
        &reg(DType::UInt(1), b),
        &reg(DType::Int(32), c),
        128,
        &Target::SM90,
    )
    .unwrap();
    assert!(
        matches!(
            plan,
            DotPlan::Mma {
                kind: MmaKind::B1Paired,
                ..
            }
        ),
        "{plan:?}"
    );
    // The fragments alone, one warp.
    let f = |n: &str| fragment(n).unwrap();
    let plan = plan_dot(
        &reg(DType::UInt(1), f("mma_b1_a")),
        &reg(DType::UInt(1), f("mma_b1_b")),
        &reg(DType::Int(32), f("mma_b1_c")),
        32,
        &Target::SM80,
    );
    assert!(
        matches!(
            plan,
            Ok(DotPlan::Mma {
                kind: MmaKind::B1,
                ..
            })
        ),
        "{plan:?}"
    );
}

/// The word layouts and the bit layouts hold the same registers: a `view` between them is
/// free, and local `32 w + i` of the bits is bit `i` of word `w` at the right (row, k).
#[test]
fn word_layouts_view_as_the_fragments() {
    check_views(false);
    check_views(true);
}

fn check_views(paired: bool) {
    let t = Tiling {
        wm: 2,
        wn: 1,
        fm: 1,
        fn_: 2,
        kt: 2,
    };
    let ([ba, bb, _], [wa, wb]) = if paired {
        (t.paired_bit_layouts(), t.paired_word_layouts())
    } else {
        (t.bit_layouts(), t.word_layouts())
    };
    for thread in 0..64 {
        for w in 0..wa.num_locals() {
            let [r, kw] = wa.eval(thread % wa.num_threads(), w)[..] else {
                unreachable!()
            };
            for i in 0..32 {
                let bit = ba.eval(thread % ba.num_threads(), 32 * w + i);
                assert_eq!(
                    bit,
                    vec![r, 32 * kw + i],
                    "a thread {thread} word {w} bit {i}"
                );
            }
        }
        for w in 0..wb.num_locals() {
            let [nn, kw] = wb.eval(thread % wb.num_threads(), w)[..] else {
                unreachable!()
            };
            for i in 0..32 {
                let bit = bb.eval(thread % bb.num_threads(), 32 * w + i);
                assert_eq!(
                    bit,
                    vec![32 * kw + i, nn],
                    "b thread {thread} word {w} bit {i}"
                );
            }
        }
    }
}

fn dot_kernel(a: (DType, &str), b: (DType, &str), c: (DType, &str)) -> Program {
    let mut p = ProgramBuilder::new("bad_dot", 32);
    p.grid(vec![1.into()]);
    let ra = p.allocate_register("bits_a", a.0, l(a.1), Some(1.0));
    let rb = p.allocate_register("bits_b", b.0, l(b.1), Some(1.0));
    let acc = p.allocate_register("acc", c.0, l(c.1), Some(0.0));
    p.dot(acc, ra, rb, acc);
    p.finish()
}

fn message(p: &Program) -> String {
    let d = verify(p, &Target::default()).expect_err("should be rejected");
    d.iter()
        .map(|d| d.message.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn rejects_u1_dot_with_wrong_accumulator_or_operand() {
    let m = message(&dot_kernel(
        (DType::UInt(1), "mma_b1_a"),
        (DType::UInt(1), "mma_b1_b"),
        (DType::F32, "mma_b1_c"),
    ));
    assert!(
        m.contains("the accumulator `acc` must be i32 for u1 operands, but it is f32"),
        "{m}"
    );
    let m = message(&dot_kernel(
        (DType::UInt(1), "mma_b1_a"),
        (DType::UInt(2), "mma_b1_b"),
        (DType::Int(32), "mma_b1_c"),
    ));
    assert!(m.contains("`bits_a` holds u1 but `bits_b` holds u2"), "{m}");
    // A k of 128 is no m16n8k256 tile, and these layouts are not thread-local either.
    let m = message(&dot_kernel(
        (DType::UInt(1), "column_local(2,2).spatial(8,4).local(1,16)"),
        (DType::UInt(1), "local(2,1).column_spatial(4,8).local(16,1)"),
        (DType::Int(32), "mma_b1_c"),
    ));
    assert!(
        m.contains("mma.m16n8k256: the layout of a is not warp tiles"),
        "{m}"
    );
    assert!(m.contains("`mma_b1_a`"), "{m}");
}
