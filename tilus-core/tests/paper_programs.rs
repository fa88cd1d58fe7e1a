//! The paper's programs (`tilus::programs`) on the interpreter, against f64 references on
//! fresh random data, at several tile sizes.

use programs::{PipelineBug, THREADS};
use rand::Rng;
use tilus_core::interp::{run, Arg};
use tilus_core::verify::{verify, Target};
use tilus_core::DType;

// The paper programs are example material of the facade (`tilus::programs`), included by
// path: the core crate must not depend on the facade.
#[allow(dead_code)]
#[path = "../../src/programs.rs"]
mod programs;

fn random_f16(rng: &mut impl Rng, len: usize) -> (Vec<f64>, Vec<u8>) {
    let mut values = Vec::with_capacity(len);
    let mut bytes = Vec::with_capacity(2 * len);
    for _ in 0..len {
        let h = half::f16::from_f32(rng.random_range(-1.0f32..1.0));
        values.push(h.to_f64());
        bytes.extend_from_slice(&h.to_bits().to_le_bytes());
    }
    (values, bytes)
}

/// Random codes of a signed `bits`-bit integer, as values.
fn random_int(rng: &mut impl Rng, bits: u32, len: usize) -> Vec<i64> {
    let half = 1i64 << (bits - 1);
    (0..len).map(|_| rng.random_range(-half..half)).collect()
}

/// Row-major compact packing, LSB first (written here, independently of `storage`).
fn pack_bits(values: &[i64], bits: u32) -> Vec<u8> {
    let mut out = vec![0u8; (values.len() * bits as usize).div_ceil(8)];
    for (j, &v) in values.iter().enumerate() {
        let code = (v as u64) & ((1u64 << bits) - 1);
        for b in 0..bits as usize {
            if code >> b & 1 == 1 {
                let bit = j * bits as usize + b;
                out[bit / 8] |= 1 << (bit % 8);
            }
        }
    }
    out
}

/// The Figure 8 weight format computed on the host from the layout definitions: tile `(i, j)`,
/// thread `t`'s locals of `b_tile` packed into its bytes, byte `q` of thread `t` in vectors of
/// `v` bytes, at `(q / v) * 128 * v + t * v + q % v`.
fn host_relayout(w: &[i64], k: usize, n: usize, bits: u32, bk: usize, bn: usize) -> Vec<u8> {
    let layout = programs::b_tile(bk, bn);
    let nb = programs::weight_bytes_per_thread(bk, bn, bits as usize);
    let v = programs::weight_vector_bytes(bk, bn, bits as usize);
    let tile_bytes = nb * THREADS;
    let mut out = vec![0u8; k * n * bits as usize / 8];
    for ti in 0..k / bk {
        for tj in 0..n / bn {
            let tile = &mut out[(ti * (n / bn) + tj) * tile_bytes..][..tile_bytes];
            for t in 0..THREADS {
                let locals: Vec<i64> = (0..layout.num_locals())
                    .map(|i| {
                        let idx = layout.eval(t, i);
                        w[(ti * bk + idx[0]) * n + tj * bn + idx[1]]
                    })
                    .collect();
                for (q, byte) in pack_bits(&locals, bits).into_iter().enumerate() {
                    tile[(q / v) * THREADS * v + t * v + q % v] = byte;
                }
            }
        }
    }
    out
}

fn decode_f16(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks(2)
        .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
        .collect()
}

fn reference(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for kk in 0..k {
            let x = a[i * k + kk];
            for j in 0..n {
                c[i * n + j] += x * b[kk * n + j];
            }
        }
    }
    c
}

fn rel_err(out: &[f64], reference: &[f64]) -> f64 {
    let num: f64 = out
        .iter()
        .zip(reference)
        .map(|(o, r)| (o - r).powi(2))
        .sum();
    let den: f64 = reference.iter().map(|r| r * r).sum();
    assert!(den > 0.0, "reference is all zeros");
    (num / den).sqrt()
}

fn take(arg: &Arg) -> &[u8] {
    match arg {
        Arg::Buffer(b) => b,
        _ => panic!("not a buffer"),
    }
}

/// Relayout `w` with Figure 8 on the interpreter, check it against the host re-layout.
fn relayout(w: &[i64], k: usize, n: usize, weight: DType, bk: usize, bn: usize) -> Vec<u8> {
    let bits = weight.bits();
    let program = programs::relayout_int(weight, bk, bn);
    verify(&program, &Target::default()).unwrap();
    let mut args = vec![
        Arg::I32(k as i32),
        Arg::I32(n as i32),
        Arg::Buffer(pack_bits(w, bits)),
        Arg::Buffer(vec![0xA5; k * n * bits as usize / 8]),
    ];
    run(&program, &mut args).unwrap();
    let bytes = take(&args[3]).to_vec();
    assert_eq!(
        bytes,
        host_relayout(w, k, n, bits, bk, bn),
        "relayout bytes differ"
    );
    bytes
}

fn matmul_int_weight(weight: DType, bm: usize, bn: usize, bk: usize, m: usize) {
    let mut rng = rand::rng();
    let (n, k) = (2 * bn, 2 * bk);
    let (a, a_bytes) = random_f16(&mut rng, m * k);
    let w = random_int(&mut rng, weight.bits(), k * n);
    let packed = relayout(&w, k, n, weight, bk, bn);
    let program = programs::matmul_f16_int(weight, bm, bn, bk);
    verify(&program, &Target::default()).unwrap();
    let mut args = vec![
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(k as i32),
        Arg::Buffer(a_bytes),
        Arg::Buffer(packed),
        Arg::Buffer(vec![0xFF; m * n * 2]),
    ];
    run(&program, &mut args).unwrap();
    let out = decode_f16(take(&args[5]));
    let wf: Vec<f64> = w.iter().map(|&x| x as f64).collect();
    let reference = reference(&a, &wf, m, n, k);
    assert!(out.iter().all(|x| x.is_finite()), "unwritten outputs");
    let e = rel_err(&out, &reference);
    assert!(e < 1e-2, "{}: relative error {e}", program.name);
}

#[test]
fn figure2_matmul_f16_i6_tile_sizes() {
    for (bm, bn, bk) in [(16, 64, 16), (32, 128, 32), (64, 64, 64), (16, 128, 64)] {
        for m in [3, 17, bm + 5] {
            matmul_int_weight(DType::Int(6), bm, bn, bk, m);
        }
    }
}

#[test]
fn figure2_other_weight_types() {
    for (weight, bm, bn, bk) in [
        (DType::Int(4), 16, 64, 32),
        (DType::Int(3), 32, 64, 32),
        (DType::Int(8), 16, 64, 16),
        (DType::Int(2), 16, 128, 16),
    ] {
        matmul_int_weight(weight, bm, bn, bk, 21);
    }
}

fn pipelined(bm: usize, bn: usize, bk: usize, stages: usize, m: usize, ktiles: usize) {
    let mut rng = rand::rng();
    let (n, k) = (2 * bn, ktiles * bk);
    let (a, a_bytes) = random_f16(&mut rng, m * k);
    let (b, b_bytes) = random_f16(&mut rng, k * n);
    let program = programs::matmul_f16_pipelined(bm, bn, bk, stages);
    verify(&program, &Target::default()).unwrap();
    let mut args = vec![
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(k as i32),
        Arg::Buffer(a_bytes),
        Arg::Buffer(b_bytes),
        Arg::Buffer(vec![0xFF; m * n * 2]),
    ];
    run(&program, &mut args).unwrap();
    let out = decode_f16(take(&args[5]));
    assert!(out.iter().all(|x| x.is_finite()), "unwritten outputs");
    let e = rel_err(&out, &reference(&a, &b, m, n, k));
    assert!(e < 1e-2, "{}: relative error {e}", program.name);
}

#[test]
fn figure14_pipelined_matmul_stages() {
    for stages in [2, 3, 4] {
        pipelined(16, 64, 16, stages, 19, 5);
        pipelined(32, 128, 32, stages, 40, 3);
    }
    // Fewer k-tiles than stages: the prologue's extra copies are masked.
    pipelined(64, 64, 16, 4, 64, 1);
}

fn broken(bug: PipelineBug, stages: usize) -> String {
    let mut rng = rand::rng();
    let (bm, bn, bk, m) = (16, 64, 16, 16);
    let (n, k) = (bn, 4 * bk);
    let program = programs::matmul_f16_pipelined_with(bm, bn, bk, stages, Some(bug));
    verify(&program, &Target::default()).unwrap();
    let mut args = vec![
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(k as i32),
        Arg::Buffer(random_f16(&mut rng, m * k).1),
        Arg::Buffer(random_f16(&mut rng, k * n).1),
        Arg::Buffer(vec![0xFF; m * n * 2]),
    ];
    run(&program, &mut args).unwrap_err().message
}

#[test]
fn figure14_missing_wait_is_caught() {
    for stages in [2, 3, 4] {
        let msg = broken(PipelineBug::MissingWait, stages);
        assert!(
            msg.contains("in flight; missing wait_group or mbarrier_wait?"),
            "{msg}"
        );
        assert!(msg.contains("load_shared"), "{msg}");
    }
}

#[test]
fn figure14_missing_synchronize_is_caught() {
    for stages in [2, 3, 4] {
        let msg = broken(PipelineBug::MissingSynchronize, stages);
        assert!(msg.contains("race on shared tensor"), "{msg}");
        assert!(msg.contains("missing synchronize?"), "{msg}");
    }
}
