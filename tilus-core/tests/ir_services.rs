//! The IR services: uniform operand access and the printer, over the paper's programs.

use std::collections::HashSet;
use tilus_core::ir::{Instruction, Program, Stmt, StmtKind, VarId};
use tilus_core::DType;

// The paper programs are example material of the facade (`tilus::programs`), included by
// path: the core crate must not depend on the facade.
#[allow(dead_code)]
#[path = "../../src/programs.rs"]
mod programs;

/// Definitions precede uses: every variable an instruction reads was defined earlier (as a
/// parameter, a `let`, a loop variable or an instruction output), walking in program order.
fn check_def_before_use(p: &Program) -> usize {
    fn walk(p: &Program, stmts: &[Stmt], defined: &mut HashSet<VarId>, count: &mut usize) {
        for s in stmts {
            match &s.kind {
                StmtKind::Let { var, value } | StmtKind::Assign { var, value } => {
                    for v in value.vars() {
                        assert!(
                            defined.contains(&v),
                            "{} reads {}",
                            p.var_name(*var),
                            p.var_name(v)
                        );
                    }
                    defined.insert(*var);
                }
                StmtKind::For { var, body, .. } => {
                    defined.insert(*var);
                    walk(p, body, defined, count);
                }
                StmtKind::While { .. } | StmtKind::If { .. } | StmtKind::Specialize { .. } => {
                    for body in s.kind.bodies() {
                        walk(p, body, defined, count);
                    }
                }
                StmtKind::Instr(i) => {
                    for v in i.inputs() {
                        assert!(
                            defined.contains(&v),
                            "`{}` reads `{}` before it is defined",
                            p.instruction_text(i),
                            p.var_name(v)
                        );
                    }
                    *count += 1;
                    defined.extend(i.outputs());
                }
            }
        }
    }
    let mut defined: HashSet<VarId> = p.params.iter().map(|q| q.var).collect();
    let mut count = 0;
    walk(p, &p.body, &mut defined, &mut count);
    count
}

#[test]
fn operands_are_defined_before_use_in_the_paper_programs() {
    for p in [
        programs::matmul_f16_int(DType::Int(6), 16, 64, 64),
        programs::relayout_int(DType::Int(4), 64, 64),
        programs::matmul_f16_pipelined(64, 64, 32, 3),
    ] {
        let n = check_def_before_use(&p);
        assert!(n > 5, "{}: {n} instructions", p.name);
        // Every instruction's listing line is in the program's Display.
        let text = p.to_string();
        p.visit_instructions(&mut |i| {
            assert!(
                text.contains(&p.instruction_text(i)),
                "{}",
                p.instruction_text(i)
            )
        });
    }
}

#[test]
fn dot_reads_three_tensors_and_writes_its_accumulator() {
    let p = programs::matmul_f16_pipelined(64, 64, 32, 3);
    let mut dots = 0;
    p.visit_instructions(&mut |i| {
        if let Instruction::Dot { a, b, c, out } = i {
            assert_eq!(i.inputs(), vec![*a, *b, *c]);
            assert_eq!(i.outputs(), vec![*out]);
            dots += 1;
        }
        if let Instruction::StoreGlobal { .. } = i {
            assert!(i.outputs().is_empty());
            assert_eq!(i.inputs().len(), 4, "src, dst and the two offset variables");
        }
    });
    assert_eq!(dots, 1);
}

/// The builder types new variables with the IR's inference, and the verifier checks every
/// defined variable against the same inference: a variable declared with another layout than
/// the instruction produces is an error naming both.
#[test]
fn builder_and_verifier_share_the_inference() {
    use tilus_core::ir::{ProgramBuilder, RegisterType, VarType};
    use tilus_core::{verify, Layout};
    let build = |declared: Option<&str>| {
        let mut b = ProgramBuilder::new("k", 32);
        let n = b.param_i32("n");
        let x = b.param_ptr("x", DType::F32, false);
        b.grid(vec![1.into()]);
        let gx = b.view_global("gx", x, DType::F32, vec![n.into()]);
        let layout = Layout::spatial(&[32]);
        let r = match declared {
            None => b.load_global("r", gx, layout.clone(), vec![0.into()]),
            Some(l) => {
                let ty = VarType::Register(RegisterType {
                    dtype: DType::F32,
                    layout: tilus_core::layout::parse(l).unwrap(),
                });
                let existing = b.new_var("r", ty);
                b.load_global(existing, gx, layout.clone(), vec![0.into()])
            }
        };
        (b.finish(), r, layout)
    };
    let (p, r, layout) = build(None);
    assert_eq!(
        p.ty(r),
        &VarType::Register(RegisterType {
            dtype: DType::F32,
            layout
        })
    );
    verify::verify(&p, &Default::default()).unwrap();
    let (p, _, _) = build(Some("local(2).spatial(16)"));
    let d = verify::verify(&p, &Default::default()).unwrap_err();
    assert!(
        d.iter()
            .any(|d| d.message.contains("but load_global produces")),
        "{d:?}"
    );
}

/// A hand-built program with a data type no API can construct is a verifier error naming the
/// variable, before any rule decodes values with it; the interpreter (which verifies first)
/// returns that error instead of panicking.
#[test]
fn invalid_dtypes_in_a_program_are_errors() {
    use tilus_core::ir::ProgramBuilder;
    use tilus_core::{interp, verify, Layout};
    for bad in [DType::Int(1), DType::UInt(0), DType::Int(40)] {
        let mut b = ProgramBuilder::new("k", 32);
        let n = b.param_i32("n");
        let x = b.param_ptr("x", bad, false);
        b.grid(vec![1.into()]);
        let gx = b.view_global("gx", x, bad, vec![n.into()]);
        b.load_global("r", gx, Layout::spatial(&[32]), vec![0.into()]);
        let p = b.finish();
        let d = verify::verify(&p, &Default::default()).unwrap_err();
        assert!(
            d.iter()
                .any(|d| d.message.starts_with("`x`: ") && d.message.contains("not a valid")),
            "{bad:?}: {d:?}"
        );
        let mut args = [interp::Arg::I32(32), interp::Arg::Buffer(vec![0u8; 64])];
        assert!(interp::run(&p, &mut args).is_err(), "{bad:?}");
    }
}
