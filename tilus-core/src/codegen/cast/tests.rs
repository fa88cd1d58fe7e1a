//! Exhaustive tests of the vectorized casts (through the host twin) and of the scalar
//! expressions (through their host evaluation).

use super::ops::{round_f64, Half, Op};
use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Every packed source type (every valid type of at most 8 bits).
pub(crate) fn all_sources() -> Vec<DType> {
    DType::all().filter(|d| d.bits() <= 8).collect()
}

/// The ground truth: `DType::decode`.
fn truth(d: DType, code: u32) -> f64 {
    d.decode(code)
}

/// Decoded value of a code, written independently from the spec (DESIGN.md): a second reading
/// that must agree with `DType::decode`.
pub(crate) fn ref_decode(d: DType, code: u32) -> f64 {
    let bits = width(d);
    assert!(bits == 32 || code < (1u64 << bits) as u32);
    match d {
        DType::UInt(_) => code as f64,
        DType::Int(b) => {
            let c = code as i64;
            if c >= 1 << (b - 1) {
                (c - (1 << b)) as f64
            } else {
                c as f64
            }
        }
        DType::F16 => half::f16::from_bits(code as u16).to_f64(),
        DType::BF16 => half::bf16::from_bits(code as u16).to_f64(),
        DType::F32 => f32::from_bits(code) as f64,
        DType::Float { exp, man } => float_value(code, exp as u32, man as u32),
        DType::F8E4M3 => {
            if code & 0x7F == 0x7F {
                f64::NAN
            } else {
                float_value(code, 4, 3)
            }
        }
        DType::F8E5M2 => {
            let (e, m, s) = ((code >> 2) & 31, code & 3, code >> 7);
            if e == 31 {
                if m == 0 {
                    if s == 1 {
                        f64::NEG_INFINITY
                    } else {
                        f64::INFINITY
                    }
                } else {
                    f64::NAN
                }
            } else {
                float_value(code, 5, 2)
            }
        }
    }
}

fn float_value(code: u32, e: u32, m: u32) -> f64 {
    let s = (code >> (e + m)) & 1;
    let ef = (code >> m) & ((1 << e) - 1);
    let mf = code & ((1 << m) - 1);
    let bias = (1i32 << (e - 1)) - 1;
    let mag = if ef == 0 {
        2f64.powi(1 - bias) * (mf as f64 / 2f64.powi(m as i32))
    } else {
        2f64.powi(ef as i32 - bias) * (1.0 + mf as f64 / 2f64.powi(m as i32))
    };
    if s == 1 {
        -mag
    } else {
        mag
    }
}

/// Packs codes LSB-first with no gaps into 32-bit words.
fn pack_words(bits: u32, codes: &[u32]) -> Vec<u32> {
    let total = codes.len() * bits as usize;
    let mut words = vec![0u32; total.div_ceil(32)];
    for (j, &c) in codes.iter().enumerate() {
        for k in 0..bits as usize {
            let bit = j * bits as usize + k;
            words[bit / 32] |= ((c >> k) & 1) << (bit % 32);
        }
    }
    words
}

fn half_ty(d: DType) -> Half {
    match d {
        DType::F16 => Half::F16,
        DType::BF16 => Half::BF16,
        _ => unreachable!(),
    }
}

/// Is every value of `src` exactly representable in `dst`? (Independent of the planner.)
fn all_exact(src: DType, dst: Half) -> bool {
    (0..1u32 << width(src)).all(|c| {
        let v = truth(src, c);
        if v.is_nan() {
            return true;
        }
        let b = round_f64(v, 0.0, dst.exp_bits(), dst.man_bits());
        dst.value(b) == v
    })
}

/// Checks one output word against the expected values of its two elements.
fn check_lanes(src: DType, dst: Half, codes: [u32; 2], out: u32, ctx: &str) {
    for (lane, &c) in codes.iter().enumerate() {
        let got = (out >> (16 * lane)) as u16;
        let want = truth(src, c);
        let gv = dst.value(got);
        if want.is_nan() {
            assert!(
                gv.is_nan(),
                "{ctx}: code {c:#x} should be NaN, got {got:#06x}"
            );
        } else {
            let wb = round_f64(want, 0.0, dst.exp_bits(), dst.man_bits());
            assert_eq!(
                got, wb,
                "{ctx}: {} -> {dst:?} code {c:#x} (= {want}) gave {got:#06x} (= {gv}), want {wb:#06x}",
                type_name(src)
            );
        }
    }
}

/// Each code value at each position of an otherwise random group.
fn every_code_at_every_position(plan: &CastPlan, rng: &mut StdRng, ctx: &str) {
    let ncodes = 1u32 << width(plan.src);
    for pos in 0..plan.group {
        let mut codes: Vec<u32> = (0..plan.group)
            .map(|_| rng.random_range(0..ncodes))
            .collect();
        for c in 0..ncodes {
            codes[pos] = c;
            run_and_check(plan, &codes, &format!("{ctx}, position {pos}"));
        }
    }
}

fn run_and_check(plan: &CastPlan, codes: &[u32], ctx: &str) {
    let bits = width(plan.src);
    let input = pack_words(bits, codes);
    assert_eq!(input.len(), plan.in_words);
    let out = host_cast(plan, &input);
    assert_eq!(out.len(), plan.out_words);
    let dst = half_ty(plan.dst);
    for (k, &w) in out.iter().enumerate() {
        let [a, b] = plan.order.pair_slots(k);
        check_lanes(plan.src, dst, [codes[a], codes[b]], w, ctx);
    }
}

/// Split pack orders (even codes of a block first): every type and split on random groups, and
/// every code at every position for the splits of 2 and of one 16-bit lane.
#[test]
fn cast_split_orders_host_twin_every_position() {
    let mut rng = StdRng::seed_from_u64(rand::random());
    let mut report = String::new();
    for src in all_sources() {
        for dst in [DType::F16, DType::BF16] {
            for h in [2, 4, 8, 16] {
                let Some(plan) = cast_plan_ordered(src, dst, PackOrder::Split(h)) else {
                    // Some wide codes cannot be placed from far-apart slots (the code
                    // generator then converts element by element); the integers for which
                    // the split order is meant always can.
                    let meant = !src.is_float() && width(src) as usize * h == 16;
                    assert!(
                        !meant || cast_plan(src, dst).is_none(),
                        "{src} -> {dst} split {h}"
                    );
                    continue;
                };
                assert_eq!(plan.group % (2 * h), 0);
                let ncodes = 1u32 << width(src);
                for _ in 0..50 {
                    let codes: Vec<u32> = (0..plan.group)
                        .map(|_| rng.random_range(0..ncodes))
                        .collect();
                    run_and_check(&plan, &codes, &format!("split {h}, random group"));
                }
                // Every code at every position, for the smallest split and the one that puts
                // pairs one lane apart.
                if h != 2 && width(src) as usize * h != 16 {
                    continue;
                }
                every_code_at_every_position(&plan, &mut rng, &format!("split {h}"));
                if width(src) as usize * h == 16 {
                    let per = cast_op_count(&plan) as f64 / plan.out_words as f64;
                    report.push_str(&format!("{src} -> {dst} split {h}: {per:.2} ops/word\n"));
                }
            }
        }
    }
    println!("{report}");
}

/// With the codes of a pair 16 bits apart, integer casts need no byte moves: one mask and one
/// fma per word, plus a shared shift now and then (the point of the split order).
#[test]
fn cast_split_orders_save_the_byte_moves() {
    for (src, h, max) in [
        (DType::UInt(1), 16, 2.07),
        (DType::UInt(2), 8, 2.13),
        (DType::Int(2), 8, 2.13),
        (DType::UInt(4), 4, 2.25),
        (DType::Int(4), 4, 2.25),
    ] {
        let plan = cast_plan_ordered(src, DType::F16, PackOrder::Split(h)).unwrap();
        let per = cast_op_count(&plan) as f64 / plan.out_words as f64;
        assert!(per <= max, "{}: {per} ops per word > {max}", plan.fn_name);
        let natural = cast_plan(src, DType::F16).unwrap();
        let was = cast_op_count(&natural) as f64 / natural.out_words as f64;
        assert!(
            per < was,
            "{}: {per} ops per word, natural {was}",
            plan.fn_name
        );
        assert!(
            !cast_source(&plan).contains("prmt"),
            "{}",
            cast_source(&plan)
        );
    }
}

#[test]
fn pack_orders_are_recognized_from_their_permutations() {
    for order in [PackOrder::Natural, PackOrder::Split(2), PackOrder::Split(8)] {
        let n = 32;
        let sigma: Vec<usize> = (0..n / 2).flat_map(|k| order.pair_slots(k)).collect();
        assert_eq!(PackOrder::recognize(&sigma), Some(order));
    }
    assert_eq!(PackOrder::recognize(&[1, 0, 2, 3]), None);
    assert_eq!(PackOrder::recognize(&[0, 2, 1, 3, 5, 4, 6, 7]), None);
}

#[test]
fn cast_plans_exist_exactly_when_exact() {
    for src in all_sources() {
        for dst in [DType::F16, DType::BF16] {
            let exact = all_exact(src, half_ty(dst));
            let plan = cast_plan(src, dst);
            assert_eq!(
                plan.is_some(),
                exact,
                "{} -> {}: plan {:?} but exact = {exact}",
                type_name(src),
                type_name(dst),
                plan.is_some()
            );
            if let Some(p) = plan {
                let b = width(src) as usize;
                assert_eq!(p.in_words * 32, p.group * b);
                assert_eq!(p.out_words * 2, p.group);
                assert!(p.group.is_multiple_of(2));
                // The group is the smallest whole-word group.
                assert!((1..p.group / 2).all(|g| !(2 * g * b).is_multiple_of(32)));
            }
        }
    }
    for other in [
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::UInt(32),
        DType::Int(32),
    ] {
        assert!(cast_plan(other, DType::F16).is_none());
        assert!(cast_plan(other, DType::BF16).is_none());
    }
    for dst in [DType::F32, DType::UInt(8), DType::F8E4M3] {
        assert!(cast_plan(DType::UInt(4), dst).is_none());
    }
}

/// Every code in every position of a group of random codes, for every pair.
#[test]
fn cast_host_twin_exhaustive_every_position() {
    let mut rng = StdRng::seed_from_u64(rand::random());
    for src in all_sources() {
        for dst in [DType::F16, DType::BF16] {
            let Some(plan) = cast_plan(src, dst) else {
                continue;
            };
            every_code_at_every_position(&plan, &mut rng, "natural order");
        }
    }
}

/// Fresh random groups (every code of every group checked).
#[test]
fn cast_host_twin_random_groups() {
    let mut rng = StdRng::seed_from_u64(rand::random());
    for src in all_sources() {
        for dst in [DType::F16, DType::BF16] {
            let Some(plan) = cast_plan(src, dst) else {
                continue;
            };
            let ncodes = 1u32 << width(src);
            for _ in 0..300 {
                let codes: Vec<u32> = (0..plan.group)
                    .map(|_| rng.random_range(0..ncodes))
                    .collect();
                run_and_check(&plan, &codes, "random group");
            }
            // Several groups at once.
            let n = 3;
            let codes: Vec<u32> = (0..n * plan.group)
                .map(|_| rng.random_range(0..ncodes))
                .collect();
            let input = pack_words(width(src), &codes);
            let out = host_cast(&plan, &input);
            assert_eq!(out.len(), n * plan.out_words);
            for (k, &w) in out.iter().enumerate() {
                check_lanes(
                    src,
                    half_ty(dst),
                    [codes[2 * k], codes[2 * k + 1]],
                    w,
                    "multi-group",
                );
            }
        }
    }
}

fn all_plans() -> Vec<CastPlan> {
    let mut v = Vec::new();
    for src in all_sources() {
        for dst in [DType::F16, DType::BF16] {
            v.extend(cast_plan(src, dst));
        }
    }
    v
}

#[test]
fn cast_source_text_is_branch_free_and_uses_the_claimed_instructions() {
    let mut names = std::collections::HashSet::new();
    let mut all = String::new();
    for plan in all_plans() {
        let src = cast_source(&plan);
        assert!(
            names.insert(plan.fn_name.clone()),
            "duplicate {}",
            plan.fn_name
        );
        assert!(src.contains(&format!(
            "__device__ __forceinline__ void {}(const uint32_t* in, uint32_t* out)",
            plan.fn_name
        )));
        let code: String = src
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        let words: Vec<&str> = code
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .collect();
        for bad in ["if", "else", "for", "while", "switch", "goto", "local"] {
            assert!(!words.contains(&bad), "{}: `{bad}` in\n{src}", plan.fn_name);
        }
        assert!(!code.contains('?'), "{}: select in\n{src}", plan.fn_name);
        // Arrays are only indexed by literal constants, and only `in`/`out`.
        let mut rest = code.as_str();
        while let Some(i) = rest.find('[') {
            let before = &rest[..i];
            let j = rest[i..].find(']').unwrap() + i;
            let idx = &rest[i + 1..j];
            assert!(
                idx.chars().all(|c| c.is_ascii_digit()),
                "{}: index `{idx}`",
                plan.fn_name
            );
            assert!(
                before.ends_with("in") || before.ends_with("out"),
                "{}: array other than in/out",
                plan.fn_name
            );
            rest = &rest[j + 1..];
        }
        assert_eq!(code.matches('{').count(), code.matches('}').count());
        // Every input word is read, every output word written, once.
        for i in 0..plan.in_words {
            assert_eq!(code.matches(&format!("= in[{i}];")).count(), 1);
        }
        for k in 0..plan.out_words {
            assert_eq!(code.matches(&format!("out[{k}] =")).count(), 1);
        }
        // The instruction mix the op list claims is what the text uses.
        let ops = vector::ops_of(&program(plan.src, plan.dst, plan.order, plan.biased).unwrap());
        let count = |f: fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
        assert_eq!(
            code.matches("prmt.b32").count(),
            count(|o| matches!(o, Op::Prmt { .. }))
        );
        assert_eq!(
            code.matches("lop3.b32").count(),
            count(|o| matches!(o, Op::Lop3 { .. }))
        );
        assert_eq!(
            code.matches("fma.rn.").count(),
            count(|o| matches!(o, Op::Fma2 { .. }))
        );
        assert!(
            count(|o| matches!(o, Op::Prmt { .. })) > 0,
            "{} uses prmt",
            plan.fn_name
        );
        all.push_str(&src);
    }
    // Integer and generic float paths use lop3 with magic numbers / masks.
    for (s, d) in [
        (DType::UInt(4), DType::F16),
        (DType::Int(6), DType::F16),
        (DType::Float { exp: 2, man: 1 }, DType::F16),
        (DType::F8E4M3, DType::BF16),
    ] {
        let p = cast_plan(s, d).unwrap();
        assert!(cast_source(&p).contains("lop3.b32"), "{}", p.fn_name);
    }
    assert!(
        all.contains("0x64006400u"),
        "f16 magic number 1024.0 appears"
    );
}

#[test]
fn cast_lop3_luts_are_the_functions_they_claim() {
    // (a & b) ^ c, a | (b & c), a & b, a ^ b: the four functions the builders use.
    use super::ops::{lop3, lut};
    let mut rng = StdRng::seed_from_u64(rand::random());
    for _ in 0..1000 {
        let (a, b, c): (u32, u32, u32) = (rng.random(), rng.random(), rng.random());
        assert_eq!(lop3(a, b, c, lut(|a, b, c| (a & b) ^ c)), (a & b) ^ c);
        assert_eq!(lop3(a, b, c, lut(|a, b, c| a | (b & c))), a | (b & c));
        assert_eq!(lop3(a, b, c, lut(|a, b, _| a & b)), a & b);
        assert_eq!(lop3(a, b, c, lut(|a, b, _| a ^ b)), a ^ b);
    }
}

/// Instruction counts per output word, printed for the record and bounded against regressions.
#[test]
fn cast_op_counts() {
    let bounds: &[(DType, DType, f64)] = &[
        (DType::UInt(4), DType::F16, 3.0),
        (DType::Int(4), DType::F16, 3.0),
        (DType::UInt(8), DType::F16, 2.0),
        (DType::Int(8), DType::F16, 2.5),
        (DType::Int(6), DType::F16, 3.6),
        (DType::Float { exp: 2, man: 1 }, DType::F16, 3.25),
        (DType::F8E5M2, DType::F16, 1.0),
        (DType::F8E4M3, DType::F16, 7.0),
    ];
    let mut report = String::new();
    for plan in all_plans() {
        let n = cast_op_count(&plan);
        let per = n as f64 / plan.out_words as f64;
        report.push_str(&format!(
            "{:>7} -> {:<4} {:>3} ops / {:>2} words = {per:.2}\n",
            type_name(plan.src),
            type_name(plan.dst),
            n,
            plan.out_words
        ));
        if let Some(&(_, _, max)) = bounds.iter().find(|b| b.0 == plan.src && b.1 == plan.dst) {
            assert!(per <= max, "{}: {per} ops per word > {max}", plan.fn_name);
        }
    }
    println!("{report}");
}

// ----------------------------------------------------------------------------------------------
// Scalar expressions.

fn scalar_sources() -> Vec<DType> {
    let mut v = all_sources();
    v.extend([
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::UInt(32),
        DType::Int(32),
    ]);
    v
}

fn same_f32(got: f32, want: f64) -> bool {
    if want.is_nan() {
        got.is_nan()
    } else {
        got.to_bits() == (want as f32).to_bits()
    }
}

#[test]
fn cast_scalar_decode_matches_reference() {
    let mut rng = StdRng::seed_from_u64(rand::random());
    for src in scalar_sources() {
        let bits = width(src);
        let codes: Vec<u32> = if bits <= 16 {
            (0..1u32 << bits).collect()
        } else {
            (0..200_000)
                .map(|_| rng.random())
                .chain([0, 1, u32::MAX, 1 << 31, 16777217])
                .collect()
        };
        for c in codes {
            let got = host_decode_to_f32(src, c);
            let want = match src {
                DType::UInt(32) => c as f32 as f64,
                DType::Int(32) => c as i32 as f32 as f64,
                _ => ref_decode(src, c),
            };
            assert!(
                same_f32(got, want),
                "{}: code {c:#x} -> {got:e}, want {want:e}",
                type_name(src)
            );
            // Bits above the width are ignored.
            if bits < 32 {
                let dirty = c | (rng.random::<u32>() << bits);
                assert!(same_f32(host_decode_to_f32(src, dirty), want));
            }
        }
    }
}

/// The expected code: `DType::encode`, and the documented fixed codes for NaN.
fn expected_code(dst: DType, v: f32) -> u32 {
    if v.is_nan() {
        return match dst {
            DType::F32 => v.to_bits(),
            DType::F16 | DType::BF16 => 0x7FFF,
            DType::F8E4M3 | DType::F8E5M2 => 0x7F,
            _ => 0,
        };
    }
    dst.encode(v).expect("not NaN")
}

fn encode_probe_values(dst: DType, rng: &mut StdRng) -> Vec<f32> {
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
        1e-30,
        -1e-30,
        0.5,
        1.5,
        2.5,
        -2.5,
        65504.0,
        65520.0,
        65519.99,
        1e5,
        -1e5,
    ];
    let bits = width(dst);
    if bits <= 16 {
        let vals: Vec<f64> = (0..1u32 << bits)
            .map(|c| truth(dst, c))
            .filter(|x| x.is_finite())
            .collect();
        let mut sorted = vals.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.dedup();
        for w in sorted.windows(2) {
            let mid = (w[0] + w[1]) / 2.0;
            let m32 = mid as f32;
            for x in [w[0] as f32, m32, m32.next_up(), m32.next_down()] {
                v.push(x);
            }
        }
        let top = *sorted.last().unwrap();
        v.extend([
            top as f32 * 1.0001,
            top as f32 * 2.0,
            (top as f32).next_up(),
        ]);
    }
    for _ in 0..20_000 {
        v.push(f32::from_bits(rng.random()));
        let e: i32 = rng.random_range(-30..20);
        let x: f32 = rng.random_range(-1.0..1.0);
        v.push(x * 2f32.powi(e));
    }
    v
}

#[test]
fn cast_scalar_encode_matches_reference() {
    let mut rng = StdRng::seed_from_u64(rand::random());
    for dst in scalar_sources() {
        let probes = encode_probe_values(dst, &mut rng);
        for &x in &probes {
            let got = host_encode_from_f32(dst, x);
            let want = expected_code(dst, x);
            assert_eq!(
                got,
                want,
                "{}: encode({x:e}) = {got:#x}, want {want:#x}",
                type_name(dst)
            );
        }
    }
}

#[test]
fn cast_reference_decode_agrees_with_dtype() {
    for d in all_sources().into_iter().chain([DType::F16, DType::BF16]) {
        for c in 0..1u32 << d.bits() {
            let (a, b) = (ref_decode(d, c), d.decode(c));
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{d} {c:#x}"
            );
        }
    }
}

#[test]
fn cast_scalar_round_trips() {
    // decode(encode(decode(c))) == decode(c) for every finite code (infinities saturate).
    for dst in all_sources() {
        for c in 0..1u32 << width(dst) {
            let v = host_decode_to_f32(dst, c);
            if !v.is_finite() {
                continue;
            }
            let c2 = host_encode_from_f32(dst, v);
            assert_eq!(
                host_decode_to_f32(dst, c2).to_bits(),
                v.to_bits(),
                "{} {c:#x}",
                type_name(dst)
            );
        }
    }
}

#[test]
fn cast_scalar_text_has_only_documented_selects() {
    for d in scalar_sources() {
        let dec = decode_to_f32_expr(d, "code");
        let enc = encode_from_f32_expr(d, "value");
        let sel_dec = dec.matches('?').count();
        assert_eq!(sel_dec, usize::from(d == DType::F8E4M3), "{dec}");
        // Encodes: at most one select, always on isnan(value).
        assert!(enc.matches('?').count() <= 1, "{enc}");
        if enc.contains('?') {
            assert!(enc.starts_with("(isnan((value)) ?"), "{enc}");
        }
        assert!(!dec.contains("if") && !enc.contains("if "));
        assert!(!dec.contains('[') && !enc.contains('['));
        assert_eq!(dec.matches('(').count(), dec.matches(')').count());
        assert_eq!(enc.matches('(').count(), enc.matches(')').count());
    }
    assert_eq!(
        decode_to_f32_expr(DType::UInt(4), "c"),
        "((float)((c) & 0xfu))"
    );
}

/// Biased casts: every integer type of up to 6 bits, both targets, natural and split orders;
/// every code at every position of a group gives the code's value plus the bias of its
/// position (bit exact), the biases are independent of the codes and at most
/// 2^MAX_BIAS_LOG2 (+ 2^(bits-1) for signed codes), and each output word costs one `lop3` plus
/// the shared views, fewer ops than the exact plan.
#[test]
fn biased_casts_are_the_value_plus_a_fixed_small_bias() {
    let mut rng = StdRng::seed_from_u64(rand::random());
    let mut report = String::new();
    let ints = (1..=6u8).map(DType::UInt).chain((2..=6u8).map(DType::Int));
    for src in ints {
        for dst in [DType::F16, DType::BF16] {
            for order in [
                PackOrder::Natural,
                PackOrder::Split(2),
                PackOrder::Split(4),
                PackOrder::Split(8),
                PackOrder::Split(16),
            ] {
                let Some(plan) = cast_plan_biased(src, dst, order) else {
                    // The split that puts a pair's codes one lane apart always has a plan.
                    let lane =
                        matches!(order, PackOrder::Split(h) if width(src) as usize * h == 16);
                    assert!(!lane, "{src} -> {dst} {order:?}: no biased plan");
                    continue;
                };
                assert!(plan.biased && plan.fn_name.ends_with("_biased"));
                let bias = cast_biases(&plan);
                assert_eq!(bias.len(), plan.group);
                let signed = matches!(src, DType::Int(_));
                let sign = if signed {
                    2f64.powi(width(src) as i32 - 1)
                } else {
                    0.0
                };
                for &b in &bias {
                    let p = b - sign;
                    assert!(
                        p >= 1.0
                            && p <= 2f64.powi(vector::MAX_BIAS_LOG2)
                            && p.log2().fract() == 0.0,
                        "{src} -> {dst} {order:?}: bias {b}"
                    );
                }
                let ncodes = 1u32 << width(src);
                let check = |codes: &[u32], ctx: &str| {
                    let out = host_cast(&plan, &pack_words(width(src), codes));
                    for (k, &w) in out.iter().enumerate() {
                        for (lane, slot) in order.pair_slots(k).into_iter().enumerate() {
                            let bits = (w >> (16 * lane)) & 0xFFFF;
                            let got = dst.decode(bits);
                            let want = truth(src, codes[slot]) + bias[2 * k + lane];
                            assert_eq!(
                                got,
                                want,
                                "{src} -> {dst} {order:?} {ctx}: output {} (code {})",
                                2 * k + lane,
                                codes[slot]
                            );
                        }
                    }
                };
                for pos in 0..plan.group {
                    let mut codes: Vec<u32> = (0..plan.group)
                        .map(|_| rng.random_range(0..ncodes))
                        .collect();
                    for c in 0..ncodes {
                        codes[pos] = c;
                        check(&codes, &format!("position {pos}"));
                    }
                }
                if let Some(exact) = cast_plan_ordered(src, dst, order) {
                    let (b, e) = (cast_op_count(&plan), cast_op_count(&exact));
                    assert!(b < e, "{src} -> {dst} {order:?}: {b} ops biased, {e} exact");
                    report += &format!("{src} -> {dst} {order:?}: {b} ops biased, {e} exact\n");
                }
            }
        }
    }
    println!("{report}");
}
