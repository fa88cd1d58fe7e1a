//! `fence()`: the instruction's services (table, printer, builder), its code, and the split
//! reduction whose last block sums the others' partial results, run on the interpreter in
//! every arrival order it can model (all permutations of small grids, seeded shuffles of larger
//! ones) against a Rust reference on fresh random data (outputs and workspace poisoned).

#[allow(dead_code)]
#[path = "programs/fence.rs"]
mod programs;

use programs::{last_block_reduce_program, Reducer, TILE};
use rand::Rng;
use tilus_core::codegen::emit;
use tilus_core::interp::{run, run_ordered, Arg, BlockOrder};
use tilus_core::ir::syntax::{lookup, Family, Op};
use tilus_core::ir::{Instruction, ProgramBuilder, StmtKind};
use tilus_core::verify::{verify, Target};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn buf(a: &Arg) -> &[u8] {
    match a {
        Arg::Buffer(b) => b,
        _ => panic!("not a buffer"),
    }
}

/// Fresh random inputs in [-1, 1), never all zero.
fn random_input(len: usize) -> Vec<f32> {
    let mut rng = rand::rng();
    loop {
        let v: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        if v.iter().any(|&x| x != 0.0) {
            return v;
        }
    }
}

/// The arguments of one launch: workspace and output poisoned with NaN, counters as given.
fn args(tiles: i32, split: i32, x: &[f32], counters: Vec<u8>) -> Vec<Arg> {
    let len = (split * tiles * TILE) as usize;
    vec![
        Arg::I32(tiles),
        Arg::Buffer(f32_bytes(x)),
        Arg::Buffer(f32::NAN.to_le_bytes().repeat(len)),
        Arg::Buffer(counters),
        Arg::Buffer(f32::NAN.to_le_bytes().repeat((tiles * TILE) as usize)),
    ]
}

/// The partials added in split order in f32, as the program does: exact, bit for bit.
fn reference(tiles: i32, split: i32, x: &[f32]) -> Vec<f32> {
    let cols = (tiles * TILE) as usize;
    (0..cols)
        .map(|e| {
            let mut acc = 2.0 * x[e];
            for s in 1..split as usize {
                acc += 2.0 * x[s * cols + e];
            }
            acc
        })
        .collect()
}

/// Every permutation of `0..n` (Heap's algorithm).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn heap(k: usize, v: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if k <= 1 {
            out.push(v.clone());
            return;
        }
        for i in 0..k {
            heap(k - 1, v, out);
            let j = if k.is_multiple_of(2) { i } else { 0 };
            v.swap(j, k - 1);
        }
    }
    let mut out = Vec::new();
    heap(n, &mut (0..n).collect(), &mut out);
    out
}

#[test]
fn fence_has_one_row_prints_and_verifies() {
    let row = lookup("fence").expect("a row");
    assert_eq!(row.op, Op::Fence);
    assert_eq!(row.family, Family::Control);
    assert_eq!(row.arity, (0, 0));
    assert_eq!(Instruction::Fence.name(), "fence");
    assert!(Instruction::Fence.inputs().is_empty());
    assert!(Instruction::Fence.outputs().is_empty());
    let p = last_block_reduce_program(4, Reducer::Last);
    let text = p.to_string();
    assert_eq!(text.matches("fence()").count(), 2, "{text}");
    verify(&p, &Target::default()).unwrap();
    verify(&p, &Target::SM90).unwrap();
    // A fence anywhere, alone, is a valid program (no operands, no scope).
    let mut b = ProgramBuilder::new("only_fence", 32);
    b.grid(vec![1.into()]);
    b.fence();
    let p = b.finish();
    assert!(matches!(
        p.body.last().map(|s| &s.kind),
        Some(StmtKind::Instr(Instruction::Fence))
    ));
    verify(&p, &Target::default()).unwrap();
    run(&p, &mut []).unwrap();
}

#[test]
fn fence_is_fence_acq_rel_gpu_in_every_thread() {
    let p = last_block_reduce_program(2, Reducer::Last);
    for target in [Target::default(), Target::SM90] {
        let k = emit(&p, &target).unwrap();
        assert_eq!(
            k.source
                .matches("asm volatile(\"fence.acq_rel.gpu;\\n\" ::: \"memory\");")
                .count(),
            2,
            "{}",
            k.source
        );
        // Not inside the one-replica guard of the atomic: every thread fences.
        let fence = k.source.find("fence.acq_rel.gpu").unwrap();
        let atomic = k.source.find("atomicAdd(").unwrap();
        assert!(fence < atomic, "{}", k.source);
    }
}

/// Small grids in every order, larger ones in shuffled and reversed orders: the result is the
/// split-order sum, bit for bit, whichever block of a tile arrives last; the counters are back
/// at zero after each launch; a second launch on the same counters gives the same result.
#[test]
fn the_last_block_reduces_whatever_the_arrival_order() {
    let mut rng = rand::rng();
    let mut cases: Vec<(i32, i32, Vec<BlockOrder>)> = Vec::new();
    for (tiles, split) in [(1, 2), (1, 3), (2, 2), (1, 4)] {
        let total = (tiles * split) as usize;
        let all = permutations(total)
            .into_iter()
            .map(BlockOrder::Explicit)
            .collect();
        cases.push((tiles, split, all));
    }
    for (tiles, split) in [(3, 2), (2, 4), (3, 8)] {
        let mut orders = vec![BlockOrder::Launch, BlockOrder::Reversed];
        orders.extend((0..6).map(|_| BlockOrder::Shuffled(rng.random())));
        cases.push((tiles, split, orders));
    }
    for (tiles, split, orders) in cases {
        let p = last_block_reduce_program(split, Reducer::Last);
        for order in orders {
            let x = random_input((split * tiles * TILE) as usize);
            let want = reference(tiles, split, &x);
            // Counters start at zero once (as the layer allocates them), then carry over.
            let mut counters = vec![0u8; 4 * tiles as usize];
            for launch in 0..2 {
                let mut a = args(tiles, split, &x, counters);
                run_ordered(&p, &mut a, &order)
                    .unwrap_or_else(|e| panic!("{tiles}x{split} {order:?} launch {launch}: {e}"));
                let got = f32s(buf(&a[4]));
                for (e, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        w.to_bits(),
                        "{tiles}x{split} {order:?} launch {launch} element {e}: {g} vs {w}"
                    );
                }
                // The f64 sum agrees to f32 rounding of split - 1 additions.
                let cols = (tiles * TILE) as usize;
                for e in 0..cols {
                    let exact: f64 = (0..split as usize)
                        .map(|s| 2.0 * x[s * cols + e] as f64)
                        .sum();
                    let bound = split as f64 * 2.0 * f32::EPSILON as f64 * 2.0 * split as f64;
                    assert!((got[e] as f64 - exact).abs() <= bound, "{e}");
                }
                counters = buf(&a[3]).to_vec();
                assert!(i32s(&counters).iter().all(|&c| c == 0), "{counters:?}");
            }
        }
    }
}

/// The tests can tell: a program that lets the *first* block of a tile reduce reads partials
/// that no block wrote yet (poisoned NaN), in every order.
#[test]
fn a_wrong_reducer_is_caught_in_every_order() {
    let (tiles, split) = (2, 3);
    let p = last_block_reduce_program(split, Reducer::First);
    let x = random_input((split * tiles * TILE) as usize);
    for order in [
        BlockOrder::Launch,
        BlockOrder::Reversed,
        BlockOrder::Shuffled(7),
    ] {
        let mut a = args(tiles, split, &x, vec![0u8; 4 * tiles as usize]);
        let bad = match run_ordered(&p, &mut a, &order) {
            Err(_) => true,
            Ok(()) => {
                let got = f32s(buf(&a[4]));
                got.iter()
                    .zip(reference(tiles, split, &x))
                    .any(|(g, w)| g.to_bits() != w.to_bits())
            }
        };
        assert!(bad, "{order:?}: a first-block reduction went unnoticed");
    }
}

#[test]
fn block_orders_are_permutations() {
    let p = last_block_reduce_program(2, Reducer::Last);
    let x = random_input((2 * TILE) as usize);
    for bad in [vec![0, 0], vec![0], vec![0, 1, 2], vec![2, 0]] {
        let mut a = args(1, 2, &x, vec![0u8; 4]);
        let e = run_ordered(&p, &mut a, &BlockOrder::Explicit(bad.clone())).unwrap_err();
        assert!(e.message.contains("block"), "{bad:?}: {}", e.message);
    }
}
