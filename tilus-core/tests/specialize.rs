//! Warp specialization (`specialize!` regions) on the interpreter: roles that hand data to each
//! other through a shared ring ordered by mbarriers, the races and deadlocks a wrong protocol
//! makes, and the verifier's rules for regions.

use rand::Rng;
use tilus_core::interp::{run, Arg};
use tilus_core::ir::{BinaryOp, ElementOp, Expr, Operand, Program, ProgramBuilder, SpanId};
use tilus_core::layout::{parse, SharedLayout};
use tilus_core::verify::{verify, Target};
use tilus_core::{storage, DType};

const COLS: usize = 128;

/// What the ring kernel gets wrong on purpose.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Bug {
    None,
    /// The consumer reads a stage without waiting for it to be full.
    NoFullWait,
    /// The producer announces a stage full before it writes it.
    EarlyArrive,
    /// The consumer never hands a stage back.
    NoEmptyArrive,
    /// The producer overwrites a stage without waiting for it to be empty.
    NoEmptyWait,
}

/// `y[t, :] = 2 * x[t, :]` for `steps` rows: role 0 (`producer_warps`) copies row `t` into
/// stage `t % stages` of a shared ring, role 1 (4 warps) reads it back, doubles and stores it.
/// `full[s]` completes when the producer's warps have written stage `s`, `empty[s]` when the
/// consumer's have read it.
fn ring_kernel(stages: i32, producer_warps: u32, bug: Bug) -> Program {
    let threads = (producer_warps + 4) * 32;
    let mut b = ProgramBuilder::new("ring", threads);
    let steps = b.param_i32("steps");
    let x = b.param_ptr("x", DType::F32, false);
    let y = b.param_ptr("y", DType::F32, true);
    b.grid(vec![Expr::Int(1)]);
    let gx = b.view_global(
        "gx",
        x,
        DType::F32,
        vec![steps.into(), (COLS as i32).into()],
    );
    let gy = b.view_global(
        "gy",
        y,
        DType::F32,
        vec![steps.into(), (COLS as i32).into()],
    );
    let ring = b.allocate_shared(
        "ring",
        DType::F32,
        SharedLayout::row_major(&[stages as usize, COLS]),
    );
    let full = b.mbarriers("full", stages as u32, producer_warps);
    let empty = b.mbarriers("empty", stages as u32, 4);
    let row =
        |b: &mut ProgramBuilder, s: Expr| b.slice_shared("st", ring, vec![s, 0.into()], vec![COLS]);
    // 128 threads: with 8 producer warps each element has two holders (replicas).
    let producer_layout = parse("spatial(128)").unwrap();
    b.set_span(SpanId(7));
    b.specialize(&[(producer_warps, None), (4, None)], |b, role| {
        b.for_range("t", 0.into(), steps.into(), |b, t| {
            let s = b.let_("s", tilus_core::ir::ScalarType::I32, Expr::from(t) % stages);
            let round = Expr::from(t) / stages;
            if role == 0 {
                if bug != Bug::NoEmptyWait {
                    // Stage s was read `round` times: wait for the last of those reads.
                    let reused = Expr::binary(BinaryOp::Ge, t, stages);
                    b.if_else(
                        reused,
                        |b| {
                            b.set_span(SpanId(11));
                            b.mbarrier_wait(empty, s, (Expr::from(t) / stages - 1) % 2)
                        },
                        |_| {},
                    );
                }
                let v = b.load_global("v", gx, producer_layout.clone(), vec![t.into(), 0.into()]);
                let st = row(b, s.into());
                if bug == Bug::EarlyArrive {
                    b.mbarrier_arrive(full, s);
                }
                b.set_span(SpanId(12));
                b.store_shared(v, st, vec![0.into()]);
                if bug != Bug::EarlyArrive {
                    b.mbarrier_arrive(full, s);
                }
            } else {
                if bug != Bug::NoFullWait {
                    b.mbarrier_wait(full, s, round % 2);
                }
                let st = row(b, s.into());
                b.set_span(SpanId(21));
                let v = b.load_shared(
                    "w",
                    st,
                    parse("local(1).spatial(128)").unwrap(),
                    vec![0.into()],
                );
                let w = b.binary("w2", ElementOp::Mul, v, Operand::Imm(2.0));
                b.store_global(w, gy, vec![t.into(), 0.into()]);
                if bug != Bug::NoEmptyArrive {
                    b.mbarrier_arrive(empty, s);
                }
            }
        });
    });
    b.finish()
}

fn random_rows(steps: usize) -> (Vec<f32>, Vec<u8>) {
    let mut rng = rand::rng();
    let xs: Vec<f32> = (0..steps * COLS)
        .map(|_| rng.random_range(-4.0f32..4.0))
        .collect();
    let codes: Vec<u32> = xs.iter().map(|v| v.to_bits()).collect();
    (xs, storage::pack(DType::F32, &codes))
}

fn run_ring(p: &Program, steps: usize) -> Result<Vec<f32>, tilus_core::interp::InterpError> {
    let (_, src) = random_rows(steps);
    let mut args = [
        Arg::I32(steps as i32),
        Arg::Buffer(src),
        Arg::Buffer(vec![0xFF; steps * COLS * 4]),
    ];
    run(p, &mut args).map(|_| {
        let Arg::Buffer(y) = &args[2] else {
            unreachable!()
        };
        y.chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    })
}

#[test]
fn roles_hand_rows_through_a_ring() {
    for (stages, producer_warps, steps) in [(2, 4, 9), (3, 4, 3), (4, 8, 13), (1, 4, 5)] {
        let p = ring_kernel(stages, producer_warps, Bug::None);
        let (xs, src) = random_rows(steps);
        let mut args = [
            Arg::I32(steps as i32),
            Arg::Buffer(src),
            Arg::Buffer(vec![0xFF; steps * COLS * 4]),
        ];
        run(&p, &mut args).unwrap_or_else(|e| panic!("{stages} stages: {e}"));
        let Arg::Buffer(y) = &args[2] else {
            unreachable!()
        };
        for (i, c) in y.chunks(4).enumerate() {
            let got = f32::from_le_bytes(c.try_into().unwrap());
            assert_eq!(got, 2.0 * xs[i], "{stages} stages, element {i}");
        }
    }
    // Zero steps: both roles end at once.
    let p = ring_kernel(2, 4, Bug::None);
    assert!(run_ring(&p, 0).unwrap().is_empty());
}

#[test]
fn a_wrong_protocol_is_reported() {
    let p = ring_kernel(2, 4, Bug::NoFullWait);
    let e = run_ring(&p, 6).unwrap_err();
    assert_eq!(e.span, SpanId(21), "{e}");
    assert!(
        e.message
            .contains("role 1: load_shared: race on shared tensor `st`"),
        "{e}"
    );
    assert!(
        e.message
            .contains("mbarrier_arrive before and an mbarrier_wait after"),
        "{e}"
    );

    let p = ring_kernel(2, 4, Bug::EarlyArrive);
    let e = run_ring(&p, 6).unwrap_err();
    assert_eq!(e.span, SpanId(21), "{e}");
    assert!(
        e.message
            .contains("race on shared tensor `st`: thread 128 reads"),
        "{e}"
    );

    let p = ring_kernel(2, 4, Bug::NoEmptyArrive);
    let e = run_ring(&p, 6).unwrap_err();
    assert!(
        e.message
            .contains("deadlock: every role that has not finished waits"),
        "{e}"
    );
    assert!(
        e.message
            .contains("role 0 is waiting on barrier 0 of `empty`"),
        "{e}"
    );
    assert!(
        e.message
            .contains("role 1 is waiting on barrier 0 of `full`"),
        "{e}"
    );
    // Fewer steps than stages never reuse a stage: no wait, no deadlock.
    assert_eq!(run_ring(&p, 2).unwrap().len(), 2 * COLS);

    // The producer runs ahead over stages the consumer has not read: the consumer then waits
    // for a phase parity the barrier has already moved past.
    let p = ring_kernel(2, 4, Bug::NoEmptyWait);
    assert!(run_ring(&p, 6).is_err());
}

/// The shape of a region and what a role may do.
#[test]
fn the_verifier_checks_regions() {
    let sm90 = Target::SM90;
    let errors = |p: &Program, target: &Target| -> String {
        verify(p, target)
            .expect_err("should not verify")
            .iter()
            .map(|d| d.message.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let base = |warps: &[(u32, Option<u32>)], threads: u32| {
        let mut b = ProgramBuilder::new("r", threads);
        b.grid(vec![Expr::Int(1)]);
        b.specialize(warps, |_, _| {});
        b.finish()
    };
    assert!(verify(&base(&[(4, Some(40)), (8, Some(232))], 384), &sm90).is_ok());
    let e = errors(&base(&[(4, None), (6, None)], 320), &sm90);
    assert!(
        e.contains("role 1 has 6 warps; a role is whole warpgroups"),
        "{e}"
    );
    let e = errors(&base(&[(4, None), (4, None)], 384), &sm90);
    assert!(
        e.contains("the roles have 8 warps together, but the block has 12"),
        "{e}"
    );
    let e = errors(&base(&[(4, Some(44)), (8, Some(260))], 384), &sm90);
    assert!(
        e.contains("role 0: registers = 44; setmaxnreg takes a multiple of 8"),
        "{e}"
    );
    assert!(e.contains("role 1: registers = 260"), "{e}");
    let e = errors(&base(&[(4, Some(240)), (8, Some(240))], 384), &sm90);
    assert!(
        e.contains("the roles' registers (128 x 240 + 256 x 240 = 92160) exceed the 65536"),
        "{e}"
    );
    let e = errors(&base(&[(4, Some(40)), (8, Some(232))], 384), &Target::SM80);
    assert!(e.contains("setmaxnreg needs sm_90a"), "{e}");

    // Not the last statement, and inside a loop.
    let mut b = ProgramBuilder::new("r", 256);
    b.grid(vec![Expr::Int(1)]);
    b.specialize(&[(4, None), (4, None)], |_, _| {});
    b.synchronize();
    let e = errors(&b.finish(), &sm90);
    assert!(
        e.contains("must be the kernel's last top-level statement"),
        "{e}"
    );
    let mut b = ProgramBuilder::new("r", 256);
    b.grid(vec![Expr::Int(1)]);
    b.for_range("i", 0.into(), 2.into(), |b, _| {
        b.specialize(&[(8, None)], |_, _| {})
    });
    let e = errors(&b.finish(), &sm90);
    assert!(
        e.contains("must be the kernel's last top-level statement"),
        "{e}"
    );

    // What a role may not do.
    let mut b = ProgramBuilder::new("r", 256);
    let n = b.param_i32("n");
    b.grid(vec![Expr::Int(1)]);
    let outer = b.let_("k", tilus_core::ir::ScalarType::I32, Expr::from(n) + 1);
    let regs = b.allocate_register("acc", DType::F32, parse("spatial(256)").unwrap(), Some(1.0));
    b.specialize(&[(4, None), (4, None)], |b, role| {
        if role == 0 {
            b.assign(outer, Expr::from(n) + 2);
            b.allocate_shared("s", DType::F32, SharedLayout::row_major(&[4]));
            b.mbarriers("bars", 1, 1);
        } else {
            let _ = b.binary("r2", ElementOp::Add, regs, Operand::Imm(1.0));
            b.exit();
        }
    });
    let e = errors(&b.finish(), &sm90);
    for needle in [
        "assignment to `k` inside a specialize! role, but it is defined before the region",
        "shared allocates shared memory inside a specialize! role",
        "mbarriers initialises mbarriers inside a specialize! role",
        "register tensor `acc` is defined outside the specialize! region",
        "exit exits inside a specialize! role",
    ] {
        assert!(e.contains(needle), "`{needle}` not in:\n{e}");
    }
}
