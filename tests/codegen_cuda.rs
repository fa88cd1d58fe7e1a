//! Compile checks of the CUDA code generator, no GPU needed: every paper program in
//! `tilus::programs` (several configurations each) is generated, compiled by NVRTC to PTX
//! for sm_80 and sm_90a (through `tilus_runtime`), assembled by `ptxas -v` for both, and its
//! SASS disassembled with `cuobjdump -sass` (or `nvdisasm`). Asserted: no stack frame, no spill
//! stores or loads, no local-memory instructions (LDL/STL); HMMA in the mma matmuls, LDGSTS in
//! the cp.async pipeline, LDSM wherever the generator selected `ldmatrix`.
//!
//! Without NVRTC (or without ptxas/cuobjdump) each test reports `SKIPPED` with the reason (see
//! `tests/common/skip.rs`) and passes; with
//! `TILUS_REQUIRE_NVRTC=1` (set by `.ci/run`, which installs the pinned pip wheels) a missing
//! tool fails the test instead.

#[allow(dead_code)]
#[path = "common/reduce_programs.rs"]
mod reduce_programs;
#[path = "common/skip.rs"]
mod skip;

#[path = "kernels/addressing.rs"]
#[allow(dead_code)]
mod addressing_kernels;
#[allow(dead_code)]
#[path = "kernels/language.rs"]
mod language;
#[allow(dead_code)]
#[path = "kernels/launch.rs"]
mod launch_kernels;

#[allow(dead_code)]
#[path = "common/math.rs"]
mod math_programs;

#[allow(dead_code)]
#[path = "kernels/tma_store.rs"]
mod tma_store_kernels;
#[allow(dead_code)]
#[path = "kernels/wgmma_rs.rs"]
mod wgmma_rs_kernels;

use skip::{skip, Need};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use tilus::core::codegen::{emit, CudaKernel};
use tilus::core::ir::Program;
use tilus::programs;
use tilus::runtime::{compile_ptx, discover, nvrtc};
use tilus::DType;

/// Why the compile tools are unusable, if they are; panics instead when they are required.
fn tools(test: &str) -> Option<(PathBuf, PathBuf)> {
    let problem = match nvrtc::nvrtc() {
        Err(e) => e.to_string(),
        Ok(_) => match nvrtc::include_dir() {
            None => "NVRTC is present but no CUDA include directory was found".to_string(),
            Some(_) => {
                let ptxas = discover::cuda_tool("ptxas");
                let disasm =
                    discover::cuda_tool("cuobjdump").or_else(|| discover::cuda_tool("nvdisasm"));
                match (ptxas, disasm) {
                    (Some(p), Some(d)) => return Some((p.path, d.path)),
                    (None, _) => "ptxas was not found (pip wheel nvidia-cuda-nvcc)".to_string(),
                    (_, None) => "neither cuobjdump nor nvdisasm was found (pip wheels \
                         nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)"
                        .to_string(),
                }
            }
        },
    };
    skip(test, Need::Nvrtc, &problem);
    None
}

/// A fresh scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tilus-codegen-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a kernel's SASS must contain.
#[derive(Clone, Copy, Default)]
struct Expect {
    hmma: bool,
    ldgsts: bool,
}

/// The result of assembling one kernel.
struct Assembled {
    ptxas_log: String,
    sass: String,
}

fn assemble(
    ptxas: &Path,
    disasm: &Path,
    dir: &Path,
    name: &str,
    ptx: &str,
    arch: &str,
) -> Assembled {
    let ptx_file = dir.join(format!("{name}.{arch}.ptx"));
    let cubin = dir.join(format!("{name}.{arch}.cubin"));
    std::fs::write(&ptx_file, ptx).unwrap();
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg("-o")
        .arg(&cubin)
        .arg(&ptx_file)
        .output()
        .expect("ptxas runs");
    let ptxas_log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{name} ({arch}): ptxas failed:\n{ptxas_log}"
    );
    let is_nvdisasm = disasm
        .file_name()
        .is_some_and(|f| f.to_string_lossy().starts_with("nvdisasm"));
    let mut cmd = Command::new(disasm);
    if !is_nvdisasm {
        cmd.arg("-sass");
    }
    let out = cmd.arg(&cubin).output().expect("the disassembler runs");
    assert!(
        out.status.success(),
        "{name} ({arch}): disassembly failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Assembled {
        ptxas_log,
        sass: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// Opcodes of the SASS listing (the first word of each instruction, predicates removed).
fn opcodes(sass: &str) -> Vec<String> {
    sass.lines()
        .filter_map(|l| {
            let l = l.trim();
            let body = l.strip_prefix("/*")?.split_once("*/")?.1.trim();
            let body = if body.starts_with('@') {
                body.split_once(' ')?.1.trim()
            } else {
                body
            };
            let op = body.split([' ', ';']).next()?;
            (!op.is_empty()).then(|| op.to_string())
        })
        .collect()
}

fn check_kernel(
    ptxas: &Path,
    disasm: &Path,
    dir: &Path,
    name: &str,
    k: &CudaKernel,
    expect: Expect,
) {
    check_kernel_with(ptxas, disasm, dir, name, k, expect, &[], &[]);
}

/// [`check_kernel`], and the SASS has an instruction of each opcode of `need` (`LDS.64`
/// matches `LDS.64` and `LDS.64.X`..) and none of `forbid`. Returns the sm_90a opcodes.
#[allow(clippy::too_many_arguments)]
fn check_kernel_with(
    ptxas: &Path,
    disasm: &Path,
    dir: &Path,
    name: &str,
    k: &CudaKernel,
    expect: Expect,
    need: &[&str],
    forbid: &[&str],
) -> Vec<String> {
    let uses_ldsm = k.source.contains("tilus_ldsm_x");
    let mut last = Vec::new();
    for arch in ["sm_80", "sm_90a"] {
        let ptx = compile_ptx(&k.source, arch)
            .unwrap_or_else(|e| panic!("{name}: NVRTC failed for {arch}: {e}\n{}", k.source));
        let a = assemble(ptxas, disasm, dir, name, &ptx, arch);
        assert!(
            a.ptxas_log
                .contains("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
            "{name} ({arch}): stack frame or spills:\n{}",
            a.ptxas_log
        );
        let ops = opcodes(&a.sass);
        assert!(
            !ops.is_empty(),
            "{name} ({arch}): no SASS read from the disassembly"
        );
        let has = |p: &str| {
            ops.iter()
                .any(|o| o == p || o.starts_with(&format!("{p}.")))
        };
        for local in ["LDL", "STL"] {
            assert!(
                !has(local),
                "{name} ({arch}): local memory access {local} in SASS"
            );
        }
        if expect.hmma {
            assert!(
                has("HMMA") || has("IMMA"),
                "{name} ({arch}): no HMMA/IMMA in SASS"
            );
        }
        if expect.ldgsts {
            assert!(has("LDGSTS"), "{name} ({arch}): no LDGSTS in SASS");
        }
        if uses_ldsm {
            assert!(
                has("LDSM"),
                "{name} ({arch}): ldmatrix selected but no LDSM in SASS"
            );
        }
        for op in need {
            assert!(has(op), "{name} ({arch}): no {op} in SASS");
        }
        for op in forbid {
            assert!(!has(op), "{name} ({arch}): {op} in SASS");
        }
        let regs = a
            .ptxas_log
            .lines()
            .find(|l| l.contains("Used") && l.contains("registers"))
            .unwrap_or("")
            .trim()
            .to_string();
        eprintln!("{name} ({arch}): ok; {regs}");
        last = ops;
    }
    last
}

fn run(test: &str, kernels: Vec<(String, Program, Expect)>) {
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new(test);
    // Two at a time: compiles are independent and CI machines have two cores.
    let chunks: Vec<Vec<(String, Program, Expect)>> = {
        let mut v: Vec<Vec<_>> = vec![Vec::new(), Vec::new()];
        for (i, k) in kernels.into_iter().enumerate() {
            v[i % 2].push(k);
        }
        v
    };
    std::thread::scope(|s| {
        for chunk in chunks {
            let (ptxas, disasm, dir) = (&ptxas, &disasm, &scratch.0);
            s.spawn(move || {
                for (name, program, expect) in chunk {
                    let k = emit(&program, &Default::default())
                        .unwrap_or_else(|e| panic!("{name}: codegen failed: {e}"));
                    check_kernel(ptxas, disasm, dir, &name, &k, expect);
                }
            });
        }
    });
}

const MMA: Expect = Expect {
    hmma: true,
    ldgsts: false,
};

#[test]
fn fig2_matmul_compiles_without_spills() {
    let mut ks = Vec::new();
    for (w, bm, bn, bk) in [
        (DType::Int(6), 16, 64, 64),
        (DType::Int(6), 32, 128, 64),
        (DType::UInt(4), 64, 128, 32),
        (DType::Int(8), 16, 64, 16),
        (DType::UInt(2), 32, 64, 64),
        (DType::Int(3), 16, 128, 64),
    ] {
        ks.push((
            format!("fig2_{w}_bm{bm}_bn{bn}_bk{bk}"),
            programs::matmul_f16_int(w, bm, bn, bk),
            MMA,
        ));
    }
    run("fig2_matmul_compiles_without_spills", ks);
}

#[test]
fn fig8_relayout_compiles_without_spills() {
    let mut ks = Vec::new();
    for (w, bk, bn) in [
        (DType::Int(6), 64, 64),
        (DType::UInt(4), 32, 128),
        (DType::Int(8), 16, 64),
        (DType::UInt(3), 64, 128),
    ] {
        ks.push((
            format!("fig8_{w}_bk{bk}_bn{bn}"),
            programs::relayout_int(w, bk, bn),
            Expect::default(),
        ));
    }
    run("fig8_relayout_compiles_without_spills", ks);
}

#[test]
fn fig14_pipelined_compiles_without_spills() {
    let mut ks = Vec::new();
    for (bm, bn, bk, stages) in [
        (64, 64, 32, 3),
        (16, 128, 64, 4),
        (32, 64, 16, 2),
        (64, 128, 32, 3),
    ] {
        ks.push((
            format!("fig14_bm{bm}_bn{bn}_bk{bk}_s{stages}"),
            programs::matmul_f16_pipelined(bm, bn, bk, stages),
            Expect {
                hmma: true,
                ldgsts: true,
            },
        ));
    }
    run("fig14_pipelined_compiles_without_spills", ks);
}

#[test]
fn fig14_selects_ldmatrix_and_cp_async() {
    let k = emit(
        &programs::matmul_f16_pipelined(64, 64, 32, 3),
        &Default::default(),
    )
    .unwrap();
    assert!(k.source.contains("tilus_ldsm_x4("), "{}", k.source);
    assert!(k.source.contains("tilus_ldsm_x4_trans("), "{}", k.source);
    assert!(k.source.contains("tilus_cp_async_16("), "{}", k.source);
    assert!(k
        .source
        .contains("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
}

fn l(s: &str) -> tilus::Layout {
    tilus::core::layout::parse(s).unwrap()
}

/// One warp's mma on `dtype` operands (f16/bf16 with f32, i8/u8 with i32), through `k` tiles.
fn mma_program(dtype: DType, k: usize, with_print: bool) -> Program {
    use tilus::core::ir::{Expr, ProgramBuilder};
    let (acc_t, a_frag, b_frag) = if dtype.bits() == 8 {
        (
            DType::Int(32),
            "local(2,1).spatial(8,4).local(1,4)",
            "column_spatial(4,8).local(4,1)",
        )
    } else {
        (
            DType::F32,
            "column_local(2,2).spatial(8,4).local(1,2)",
            "local(2,1).column_spatial(4,8).local(2,1)",
        )
    };
    let mut b = ProgramBuilder::new(&format!("mma_{dtype}"), 64);
    let pa = b.param_ptr("a", dtype, false);
    let pb = b.param_ptr("b", dtype, false);
    let pc = b.param_ptr("c", acc_t, true);
    b.grid(vec![1.into()]);
    let ga = b.view_global("ga", pa, dtype, vec![32.into(), (16 * k as i32).into()]);
    let gb = b.view_global("gb", pb, dtype, vec![(16 * k as i32).into(), 16.into()]);
    let gc = b.view_global("gc", pc, acc_t, vec![32.into(), 16.into()]);
    let ra = b.load_global(
        "ra",
        ga,
        l(&format!("reduce(spatial(2,1),[1]).local(1,{k}).{a_frag}"))
            .compose(&l("local(1,1)"))
            .unwrap(),
        vec![0.into(), 0.into()],
    );
    let _ = Expr::Int(0);
    let rb = b.load_global(
        "rb",
        gb,
        l(&format!("reduce(spatial(2,1),[0]).local({k},2).{b_frag}")),
        vec![0.into(), 0.into()],
    );
    let acc = b.allocate_register(
        "acc",
        acc_t,
        l("spatial(2,1).local(1,2).local(2,1).spatial(8,4).local(1,2)"),
        Some(1.0),
    );
    let acc = b.dot(acc, ra, rb, acc);
    if with_print {
        b.print("acc", tilus::core::ir::Operand::Tensor(acc));
        b.print("inf \"%\"", tilus::core::ir::Operand::Imm(f64::INFINITY));
    }
    b.store_global(acc, gc, vec![0.into(), 0.into()]);
    b.finish()
}

#[test]
fn mma_of_every_operand_type_compiles() {
    let ks = [DType::F16, DType::BF16, DType::Int(8), DType::UInt(8)]
        .into_iter()
        .map(|d| (format!("mma_{d}"), mma_program(d, 2, false), MMA))
        .collect();
    run("mma_of_every_operand_type_compiles", ks);
}

/// `print` compiles (printf's argument buffer is the one stack frame a kernel may have).
#[test]
fn print_compiles() {
    let Some((ptxas, disasm)) = tools("print_compiles") else {
        return;
    };
    let scratch = Scratch::new("print");
    let k = emit(&mma_program(DType::F16, 1, true), &Default::default()).unwrap();
    assert!(k.source.contains("printf("));
    let ptx = compile_ptx(&k.source, "sm_90a").unwrap_or_else(|e| panic!("{e}\n{}", k.source));
    let a = assemble(&ptxas, &disasm, &scratch.0, "print", &ptx, "sm_90a");
    assert!(
        a.ptxas_log
            .contains("0 bytes spill stores, 0 bytes spill loads"),
        "{}",
        a.ptxas_log
    );
}

/// `launch_dependents()` and `wait_prior_grid()` compile to `PREEXIT` and `ACQBULK` for sm_90a,
/// and the same source to neither for sm_80 (guarded: launches there are never dependent).
#[test]
fn grid_dependency_compiles_per_architecture() {
    #[allow(dead_code)]
    #[path = "kernels/grid_dependency.rs"]
    mod pdl;
    let test = "grid_dependency_compiles_per_architecture";
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new(test);
    for (name, source, op) in [
        (
            "pdl_produce",
            pdl::pdl_produce::source(&pdl::pdl_produce::SPACE[0]),
            "PREEXIT",
        ),
        (
            "pdl_consume",
            pdl::pdl_consume::source(&pdl::pdl_consume::SPACE[0]),
            "ACQBULK",
        ),
    ] {
        let source = source.unwrap();
        for arch in ["sm_80", "sm_90a"] {
            let ptx = compile_ptx(source, arch)
                .unwrap_or_else(|e| panic!("{name}: NVRTC failed for {arch}: {e}\n{source}"));
            let a = assemble(&ptxas, &disasm, &scratch.0, name, &ptx, arch);
            let n = opcodes(&a.sass).iter().filter(|o| *o == op).count();
            assert_eq!(n, (arch == "sm_90a") as usize, "{name} ({arch}): {n} {op}");
        }
    }
}

/// The quantized matmul's decode configurations, one per way of dequantizing: the split pack
/// orders (u1, i2, u4 with zero points on the accumulator, i3), the natural order (i8, the
/// float types), bf16 activations, per-channel scales, and the split-k reduction, each also as
/// the gemv method (biased casts); the integer-mma gemv's first tilings (3- and 5-bit codes from
/// two planes, 2-bit fields); plus the dequantize program of prefill. No spills, cp.async and
/// HMMA or IMMA where they belong.
#[test]
fn qmatmul_configurations_compile_without_spills() {
    use tilus::kernels::qmatmul::{build, QMatmulConfig, QMatmulMethod};
    let pipelined = Expect {
        hmma: true,
        ldgsts: true,
    };
    let mut ks = Vec::new();
    for (wd, ad, group, bn, split_k) in [
        ("u1", "f16", Some(128), 256, 4),
        ("i2", "f16", Some(128), 256, 4),
        ("u4", "bf16", Some(128), 128, 8),
        ("i3", "f16", None, 256, 1),
        ("i8", "f16", Some(128), 128, 2),
        ("f6e3m2", "bf16", Some(64), 128, 1),
    ] {
        let (wd, ad): (DType, DType) = (wd.parse().unwrap(), ad.parse().unwrap());
        let base = QMatmulConfig::default_for(wd, ad, group, matches!(wd, DType::UInt(_)));
        let cfg = QMatmulConfig {
            bn,
            bk: 128,
            stages: 4,
            split_k,
            ..base
        };
        let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        ks.push((kernel.main.name.clone(), kernel.main, pipelined));
        // The gemv method in the same tiles: biased casts for the integers, the exact ones
        // for the others.
        let gemv = QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm: 8,
            group_rows: group.filter(|&g| g >= 128),
            ..cfg
        };
        let kernel = build(&gemv).unwrap_or_else(|e| panic!("{gemv:?}: {e}"));
        ks.push((kernel.main.name.clone(), kernel.main, pipelined));
    }
    // One token on the integer mma, in the tuner's first tilings: 3- and 5-bit codes rebuilt
    // from two planes (two blocks a multiprocessor, registers capped), 2-bit fields, and 1-bit
    // ones in groups of 128 (two scale groups a 256-row tile).
    for (wd, bk, bn, warps, stages, split_k, blocks_per_sm) in [
        ("i3", 128, 896, 8, 2, 4, 2),
        ("u3", 128, 512, 8, 5, 8, 1),
        ("i5", 64, 896, 8, 2, 4, 2),
        ("u5", 64, 512, 8, 5, 8, 1),
        ("u2", 128, 512, 8, 4, 2, 1),
        ("u1", 256, 896, 8, 4, 2, 1),
    ] {
        let wd: DType = wd.parse().unwrap();
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm: 1,
            bn,
            bk,
            warps,
            stages,
            split_k,
            blocks_per_sm,
            ..QMatmulConfig::default_for(wd, DType::F16, Some(128), matches!(wd, DType::UInt(_)))
        };
        let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        ks.push((kernel.main.name.clone(), kernel.main, pipelined));
    }
    let dequant = QMatmulConfig {
        method: QMatmulMethod::DequantizeThenGemm,
        ..QMatmulConfig::default_for(DType::Int(4), DType::F16, Some(128), false)
    };
    let p = build(&dequant).unwrap().dequant.unwrap();
    ks.push((p.name.clone(), p, Expect::default()));
    run("qmatmul_configurations_compile_without_spills", ks);
}

const PLAIN: Expect = Expect {
    hmma: false,
    ldgsts: false,
};

/// The elementwise math, bit, comparison, `select`, `arange` and fill-load programs compile for
/// sm_80 and sm_90a without spills or local memory. `sin` and `cos` are checked for spills
/// only: `sinf`/`cosf` keep a small local array for the Payne-Hanek reduction of huge
/// arguments (their slow path), which is a stack frame by design.
#[test]
fn math_instructions_compile_without_spills() {
    use tilus::core::ir::{CmpOp, MathOp};
    let mut kernels = Vec::new();
    let mut trig = Vec::new();
    for op in MathOp::ALL.into_iter().filter(|o| !o.is_integer()) {
        let p = math_programs::unary_program(op, DType::F32);
        if matches!(op, MathOp::Sin | MathOp::Cos) {
            trig.push(p);
        } else {
            kernels.push((p.name.clone(), p, PLAIN));
        }
    }
    for (op, d) in [(MathOp::Gelu, DType::F16), (MathOp::Sigmoid, DType::BF16)] {
        let p = math_programs::unary_program(op, d);
        kernels.push((p.name.clone(), p, PLAIN));
    }
    for d in [DType::Int(8), DType::UInt(4), DType::UInt(32)] {
        let p = math_programs::bits_program(d);
        kernels.push((p.name.clone(), p, PLAIN));
    }
    for (d, op) in [(DType::F16, CmpOp::Lt), (DType::Int(8), CmpOp::Eq)] {
        let p = math_programs::compare_select_program(d, op);
        kernels.push((p.name.clone(), p, PLAIN));
    }
    let p = math_programs::masked_row_program();
    kernels.push((p.name.clone(), p, PLAIN));
    run("math_instructions_compile_without_spills", kernels);
    let Some((ptxas, disasm)) = tools("math_instructions_compile_without_spills") else {
        return;
    };
    let scratch = Scratch::new("trig");
    for p in trig {
        let k = emit(&p, &Default::default()).unwrap();
        assert!(k.source.contains("sinf(") || k.source.contains("cosf("));
        for arch in ["sm_80", "sm_90a"] {
            let ptx = compile_ptx(&k.source, arch).unwrap_or_else(|e| panic!("{e}\n{}", k.source));
            let a = assemble(&ptxas, &disasm, &scratch.0, &p.name, &ptx, arch);
            assert!(
                a.ptxas_log
                    .contains("0 bytes spill stores, 0 bytes spill loads"),
                "{}: {}",
                p.name,
                a.ptxas_log
            );
        }
    }
}

/// Every reduction layout of `reduce_programs::CASES` (locals, lanes, warps, replicas, a digit
/// of three) compiles without spills for sum, argmax (value and index through every stage) and
/// `any`, and so does `x - reduce_max(x, 1)`.
#[test]
fn reductions_compile_without_spills() {
    use tilus::core::ir::ReduceOp;
    let plain = Expect {
        hmma: false,
        ldgsts: false,
    };
    let mut ks = Vec::new();
    for (k, rc) in reduce_programs::CASES.iter().enumerate() {
        for (op, d) in [
            (ReduceOp::Sum, DType::F32),
            (ReduceOp::ArgMax, DType::F16),
            (ReduceOp::Any, DType::UInt(1)),
            (ReduceOp::Sum, DType::Int(8)),
        ] {
            ks.push((
                format!("reduce_{k}_{op:?}_{d}"),
                reduce_programs::reduce_program(rc, op, d),
                plain,
            ));
        }
    }
    for (k, sc) in reduce_programs::SCAN_CASES.iter().enumerate() {
        for d in [DType::F32, DType::F16, DType::Int(32), DType::Int(8)] {
            ks.push((
                format!("cumsum_{k}_{d}"),
                reduce_programs::scan_program(sc, d),
                plain,
            ));
        }
    }
    ks.push((
        "sub_row_max".to_string(),
        reduce_programs::sub_max_program("local(2,1).spatial(2,64)", 128),
        plain,
    ));
    run("reductions_compile_without_spills", ks);
}

#[allow(dead_code)]
#[path = "../tilus-core/tests/programs/addressing.rs"]
mod addressing;

/// `item`, `gather`, `scatter` and every atomic (global and shared, each dtype they take)
/// compile without spills or local memory.
#[test]
fn data_dependent_addressing_compiles() {
    use tilus::core::ir::AtomicOp;
    let none = Expect::default();
    let mut ks = vec![("paged_item".to_string(), addressing::paged_program(), none)];
    for d in [DType::UInt(8), DType::F16, DType::F32] {
        for shared in [false, true] {
            ks.push((
                format!("gather_{d}_{shared}"),
                addressing::gather_program(d, shared),
                none,
            ));
            ks.push((
                format!("scatter_{d}_{shared}"),
                addressing::scatter_program(d, shared, shared),
                none,
            ));
        }
    }
    for op in [
        AtomicOp::Add,
        AtomicOp::Max,
        AtomicOp::Min,
        AtomicOp::Exchange,
        AtomicOp::Cas,
    ] {
        for d in [DType::Int(32), DType::UInt(32), DType::F32] {
            for shared in [false, true] {
                let old = matches!(op, AtomicOp::Exchange | AtomicOp::Cas);
                ks.push((
                    format!("atomic_{op:?}_{d}_{shared}"),
                    addressing::atomic_program(op, d, shared, old),
                    none,
                ));
            }
        }
    }
    run("data_dependent_addressing_compiles", ks);
}

/// `gather_rows` from shared tables: a row of 4 f16 is one `LDS.64` and a row of 8 f16 one
/// `LDS.128` (no 16-bit shared loads left), for a plain index layout and the VQ kernels'
/// column-spatial one; 2-f16 rows are one 32-bit `LDS`; 32-byte i32 rows two `LDS.128`. The
/// other sources (swizzled, strided, global) and dtypes compile without spills or local
/// memory.
#[test]
fn gather_rows_compiles_to_vector_shared_loads() {
    use addressing::{gather_rows_program, RowSrc};
    let test = "gather_rows_compiles_to_vector_shared_loads";
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new("gather_rows");
    let layouts = [
        "spatial(32, 4).local(2, 1)",
        "spatial(1, 4).local(2, 2).column_spatial(4, 8)",
    ];
    let vectors = [
        (DType::F16, 4, "LDS.64"),
        (DType::F16, 8, "LDS.128"),
        (DType::F16, 2, "LDS"),
        (DType::Int(32), 8, "LDS.128"),
        (DType::UInt(8), 4, "LDS"),
    ];
    for (dtype, w, need) in vectors {
        for (i, layout) in layouts.iter().enumerate() {
            let name = format!("gather_rows_{dtype}_{w}_{i}");
            let p = gather_rows_program(dtype, w, layout, 0, RowSrc::Shared);
            let k = emit(&p, &Default::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
            let narrow: &[&str] = &["LDS.U16", "LDS.U8"];
            check_kernel_with(
                &ptxas,
                &disasm,
                &scratch.0,
                &name,
                &k,
                Expect::default(),
                &[need],
                narrow,
            );
        }
    }
    let mut ks = Vec::new();
    for src in RowSrc::ALL {
        for (dtype, w) in [(DType::F16, 4), (DType::UInt(8), 8), (DType::Int(32), 1)] {
            ks.push((
                format!("gather_rows_{src:?}_{dtype}_{w}"),
                gather_rows_program(dtype, w, layouts[1], 1, src),
                Expect::default(),
            ));
        }
    }
    run(test, ks);
}

/// `scatter_rows` into shared tables: the VQ kernels' codebook copies (`[4096, 4]` f16: 256
/// entries x 16 copies) are written with `uint2` stores, `STS.64` in the SASS, `[4096, 8]`
/// with `uint4`, `STS.128`, `[768, 4]` u8 with 32-bit `STS` (no 16- or 8-bit shared stores
/// left: `scatter_rows` is the programs' only shared store); every table placement, index
/// layout kind and dtype compiles without spills or local memory.
#[test]
fn scatter_rows_compiles_to_vector_shared_stores() {
    use addressing::{book_copies_program, scatter_rows_program, RowSrc, ROW_INDEX_LAYOUTS};
    let test = "scatter_rows_compiles_to_vector_shared_stores";
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new("scatter_rows");
    let narrow: &[&str] = &["STS.U16", "STS.U8"];
    for (dtype, w, copies, need, vector) in [
        (DType::F16, 4, 16, "STS.64", "uint2"),
        (DType::F16, 8, 16, "STS.128", "uint4"),
        (DType::UInt(8), 4, 3, "STS", "uint32_t"),
    ] {
        let name = format!("book_copies_{dtype}_{w}_{copies}");
        let p = book_copies_program(dtype, w, copies);
        let k = emit(&p, &Default::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The vector is the generator's (NVVM would also merge aligned element stores).
        let stores = k
            .source
            .matches(&format!("*({vector}*)(tilus_smem"))
            .count();
        assert_eq!(stores, copies * 2, "{name}: {}", k.source);
        check_kernel_with(
            &ptxas,
            &disasm,
            &scratch.0,
            &name,
            &k,
            Expect::default(),
            &[need],
            narrow,
        );
    }
    let mut ks = Vec::new();
    for (k, dst) in RowSrc::ALL.into_iter().enumerate() {
        for (j, (dtype, w)) in [(DType::F16, 4), (DType::UInt(8), 8), (DType::Int(32), 2)]
            .into_iter()
            .enumerate()
        {
            let (layout, dims) = ROW_INDEX_LAYOUTS[(3 * k + j) % ROW_INDEX_LAYOUTS.len()];
            let dim = dims[(k + j) % dims.len()];
            ks.push((
                format!("scatter_rows_{dst:?}_{dtype}_{w}_{dim}"),
                scatter_rows_program(dtype, w, layout, dim, dst),
                Expect::default(),
            ));
        }
    }
    run(test, ks);
}

#[allow(dead_code)]
#[path = "../tilus-core/tests/programs/fence.rs"]
mod fence_programs;

/// `fence()` becomes a GPU-scope fence in the PTX (`fence.acq_rel.gpu`; `membar.gl` is what
/// `__threadfence()` would give), in the last-block reduction and in the split-k quantized
/// matmul (main and gemv programs), next to the semaphore's atomic; all compile without
/// spills.
#[test]
fn fence_compiles_to_a_gpu_fence() {
    use tilus::kernels::qmatmul::{build, QMatmulConfig, QMatmulMethod};
    let Some(_) = tools("fence_compiles_to_a_gpu_fence") else {
        return;
    };
    let base = QMatmulConfig::default_for(DType::Int(4), DType::F16, Some(128), false);
    let main = QMatmulConfig {
        bk: 128,
        split_k: 4,
        ..base
    };
    let gemv = QMatmulConfig {
        method: QMatmulMethod::Gemv,
        bm: 8,
        bn: 256,
        ..main
    };
    let mut ks = vec![(
        "last_block_reduce".to_string(),
        fence_programs::last_block_reduce_program(4, fence_programs::Reducer::Last),
        Expect::default(),
    )];
    for cfg in [main, gemv] {
        let p = build(&cfg).unwrap().main;
        ks.push((p.name.clone(), p, MMA));
    }
    for (name, p, _) in &ks {
        let k = emit(p, &Default::default()).unwrap();
        for arch in ["sm_80", "sm_90a"] {
            let ptx = compile_ptx(&k.source, arch)
                .unwrap_or_else(|e| panic!("{name}: NVRTC failed for {arch}: {e}"));
            assert!(
                ptx.contains("fence.acq_rel.gpu") || ptx.contains("membar.gl"),
                "{name} ({arch}): no GPU-scope fence in the PTX"
            );
            assert!(ptx.contains("atom.global.add"), "{name} ({arch})");
        }
    }
    run("fence_compiles_to_a_gpu_fence", ks);
}

/// Every configuration of the f16 row-wise kernels (`kernels::rowwise`; the bf16 ones differ
/// only in the conversions) compiles for sm_80 and sm_90a without spills under their occupancy
/// hint (`blocks_per_sm`: at most 64 registers per thread at 128 or 256 threads).
#[test]
fn rowwise_kernels_compile_without_spills() {
    use tilus::kernels::rowwise::programs::*;
    let none = Expect::default();
    let mut ks = Vec::new();
    macro_rules! all {
        ($k:ident) => {
            for cfg in $k::SPACE {
                ks.push((
                    format!("{}_{cfg}", stringify!($k)),
                    $k::program(cfg).unwrap(),
                    none,
                ));
            }
        };
    }
    all!(softmax_f16);
    all!(softmax_long_f16);
    all!(rms_norm_f16);
    all!(add_rms_norm_f16);
    all!(layer_norm_f16);
    all!(argmax_f16);
    all!(silu_and_mul_f16);
    all!(rotary_f16);
    run("rowwise_kernels_compile_without_spills", ks);
}

/// The act-order input permutation (`kernels::permute`, a `gather` per row) compiles for both
/// activation types.
#[test]
fn permute_kernels_compile_without_spills() {
    use tilus::kernels::permute::{permute_columns_bf16, permute_columns_f16};
    let none = Expect::default();
    let ks = vec![
        (
            "permute_columns_f16".to_string(),
            permute_columns_f16::program(&permute_columns_f16::SPACE[0]).unwrap(),
            none,
        ),
        (
            "permute_columns_bf16".to_string(),
            permute_columns_bf16::program(&permute_columns_bf16::SPACE[0]).unwrap(),
            none,
        ),
    ];
    run("permute_kernels_compile_without_spills", ks);
}

/// Scalar conversions through i64: `i64 as f32` (`__ll2float_rn`), `f32 as i64`
/// (`__float2ll_rz`), `i64 as i32` (`(int)`), and an i64 difference as an offset.
fn i64_conversions_program() -> Program {
    use tilus::core::ir::{ElementOp, Expr, Operand, ProgramBuilder, ScalarType, UnaryOp};
    let mut b = ProgramBuilder::new("conv", 32);
    let v = b.param_i64("v");
    let s = b.param_f32("s");
    let y = b.param_ptr("y", DType::F32, true);
    b.grid(vec![1.into()]);
    let f = b.let_(
        "f",
        ScalarType::F32,
        Expr::Unary(UnaryOp::ToF32, Box::new(v.into())),
    );
    let w = b.let_(
        "w",
        ScalarType::I64,
        Expr::Unary(UnaryOp::ToI64, Box::new(s.into())),
    );
    let n = b.let_(
        "n",
        ScalarType::I32,
        Expr::Unary(UnaryOp::ToI32, Box::new(Expr::var(w) - v)),
    );
    let gy = b.view_global("gy", y, DType::F32, vec![64.into()]);
    let r = b.allocate_register("r", DType::F32, l("spatial(32)"), Some(1.0));
    let r = b.binary("r2", ElementOp::Mul, r, Operand::Scalar(f.into()));
    b.store_global(r, gy, vec![n.into()]);
    b.store_global(r, gy, vec![Expr::var(w) - v]);
    b.finish()
}

/// Kernels with i64 parameters, arithmetic, conversions and global offsets (load_global,
/// store_global, copy_async) compile without spills or local memory.
#[test]
fn i64_scalars_compile() {
    let none = Expect::default();
    let ks = vec![
        (
            "wide_offsets".to_string(),
            language::wide_offsets::program(&language::wide_offsets::SPACE[0]).unwrap(),
            none,
        ),
        (
            "narrow_wide".to_string(),
            language::narrow_wide::program(&language::narrow_wide::SPACE[0]).unwrap(),
            none,
        ),
        (
            "far_load_at".to_string(),
            launch_kernels::far_load_at::program(&launch_kernels::far_load_at::SPACE[0]).unwrap(),
            none,
        ),
        (
            "i64_conversions".to_string(),
            i64_conversions_program(),
            none,
        ),
    ];
    let conv = emit(&ks[3].1, &Default::default()).unwrap().source;
    for want in [
        "__ll2float_rn(v)",
        "__float2ll_rz(s)",
        "(int)((w - v))",
        "long long v",
    ] {
        assert!(conv.contains(want), "{want}:\n{conv}");
    }
    run("i64_scalars_compile", ks);
}

/// The decode attention kernels (`kernels::attention::kernel`) compile for sm_80 and sm_90a
/// without spills: every paged configuration of the main kernel's declared space (the
/// contiguous ones differ only in a row's address), the combine step and the appends; the main
/// kernel reads K with `ldmatrix` and V with `ldmatrix.trans` and multiplies on the tensor cores.
#[test]
fn attention_decode_kernels_compile_without_spills() {
    use tilus::kernels::attention::kernel::{
        attention_combine, attention_decode, kv_append, kv_append_quantized,
    };
    let mut ks = Vec::new();
    for cfg in attention_decode::SPACE.iter().filter(|c| c.PAGED == 1) {
        let source = attention_decode::source(cfg).unwrap();
        assert!(
            source.contains("tilus_ldsm_x4(") && source.contains("tilus_ldsm_x4_trans("),
            "{cfg}: K and V are not read with ldmatrix"
        );
        ks.push((
            format!("attention_decode_{cfg}"),
            attention_decode::program(cfg).unwrap(),
            Expect {
                hmma: true,
                ldgsts: true,
            },
        ));
    }
    for cfg in attention_combine::SPACE {
        ks.push((
            format!("attention_combine_{cfg}"),
            attention_combine::program(cfg).unwrap(),
            Expect::default(),
        ));
    }
    for cfg in kv_append::SPACE {
        ks.push((
            format!("kv_append_{cfg}"),
            kv_append::program(cfg).unwrap(),
            Expect::default(),
        ));
    }
    for cfg in kv_append_quantized::SPACE.iter().filter(|c| c.D == 128) {
        ks.push((
            format!("kv_append_quantized_{cfg}"),
            kv_append_quantized::program(cfg).unwrap(),
            Expect::default(),
        ));
    }
    run("attention_decode_kernels_compile_without_spills", ks);
}

/// The causal prefill attention (`kernels::attention::prefill`): every configuration of its
/// sweep list for both head dimensions in f16 (the first is the default), and the defaults in
/// bf16, compile for sm_80 and sm_90a without spills, with HMMA, LDGSTS (the K/V pipeline)
/// and LDSM.
#[test]
fn prefill_attention_compiles_without_spills() {
    use tilus::kernels::attention::prefill::{default_config, prefill_configs};
    let pipelined = Expect {
        hmma: true,
        ldgsts: true,
    };
    let mut ks = Vec::new();
    for d in [64, 128] {
        let mut cfgs: Vec<_> = prefill_configs(d, DType::F16).unwrap();
        cfgs.push(default_config(d, DType::BF16).unwrap());
        for cfg in cfgs {
            let p = tilus::kernels::attention::prefill::program(&cfg).unwrap();
            ks.push((format!("prefill_{cfg}"), p, pipelined));
        }
    }
    run("prefill_attention_compiles_without_spills", ks);
}

#[allow(dead_code)]
#[path = "../tilus-core/tests/programs/bmma.rs"]
mod bmma_programs;

/// Compile `program` for sm_80 and sm_90a and assert: no spills or stack frame, no local
/// memory, at least `bmma` SASS `BMMA` (the 1-bit mma, `.and.popc` only), no HMMA/IMMA.
fn assert_bmma(
    ptxas: &Path,
    disasm: &Path,
    dir: &Path,
    name: &str,
    program: &Program,
    bmma: usize,
) {
    assert_bmma_with(ptxas, disasm, dir, name, program, bmma, &[]);
}

/// [`assert_bmma`], and each opcode of `need` (a prefix, e.g. `LDGSTS`) present.
fn assert_bmma_with(
    ptxas: &Path,
    disasm: &Path,
    dir: &Path,
    name: &str,
    program: &Program,
    bmma: usize,
    need: &[&str],
) -> Vec<(usize, usize)> {
    let k = emit(program, &Default::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        k.source.contains(".and.popc") && !k.source.contains(".xor.popc"),
        "{name}: the AND form only"
    );
    // (BMMA, register moves among them) per architecture.
    let mut counts = Vec::new();
    for arch in ["sm_80", "sm_90a"] {
        let ptx = compile_ptx(&k.source, arch)
            .unwrap_or_else(|e| panic!("{name}: NVRTC failed for {arch}: {e}\n{}", k.source));
        let a = assemble(ptxas, disasm, dir, name, &ptx, arch);
        assert!(
            a.ptxas_log
                .contains("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
            "{name} ({arch}): stack frame or spills:\n{}",
            a.ptxas_log
        );
        let ops = opcodes(&a.sass);
        let count = |p: &str| {
            ops.iter()
                .filter(|o| *o == p || o.starts_with(&format!("{p}.")))
                .count()
        };
        assert_eq!(
            count("LDL") + count("STL"),
            0,
            "{name} ({arch}): local memory"
        );
        assert!(
            count("BMMA") >= bmma,
            "{name} ({arch}): {} BMMA, expected at least {bmma}",
            count("BMMA")
        );
        assert_eq!(count("HMMA") + count("IMMA"), 0, "{name} ({arch})");
        for op in need {
            assert!(count(op) > 0, "{name} ({arch}): no {op} in SASS");
        }
        let regs = a
            .ptxas_log
            .lines()
            .find(|l| l.contains("Used") && l.contains("registers"))
            .unwrap_or("")
            .trim()
            .to_string();
        eprintln!("{name} ({arch}): ok, {} BMMA; {regs}", count("BMMA"));
        // Register moves among the BMMAs (from the first to the last: the k loop's body).
        let at = |o: &String| o.starts_with("BMMA");
        let (first, last) = (ops.iter().position(at), ops.iter().rposition(at));
        let moves = match (first, last) {
            (Some(f), Some(l)) => ops[f..=l]
                .iter()
                .filter(|o| *o == "MOV" || o.starts_with("MOV.") || o.starts_with("IMAD.MOV"))
                .count(),
            _ => 0,
        };
        counts.push((count("BMMA"), moves));
    }
    counts
}

/// The u1 `dot` selects the 1-bit tensor-core mma: SASS `BMMA` (the `.and.popc` form, native on
/// sm_80 and sm_90), no local memory, no spills, for one warp tile and a multi-warp tiling.
#[test]
fn u1_dot_compiles_to_bmma() {
    use bmma_programs::{bmma_program, Tiling};
    let Some((ptxas, disasm)) = tools("u1_dot_compiles_to_bmma") else {
        return;
    };
    let scratch = Scratch::new("bmma");
    for t in [
        Tiling {
            wm: 1,
            wn: 1,
            fm: 1,
            fn_: 1,
            kt: 1,
        },
        Tiling {
            wm: 2,
            wn: 2,
            fm: 2,
            fn_: 4,
            kt: 2,
        },
    ] {
        let name = format!("bmma_{}x{}x{}", t.bm(), t.bn(), t.bk());
        // One BMMA per warp tile and k tile of the loop body.
        let tiles = t.fm * t.fn_ * t.kt;
        assert_bmma(
            &ptxas,
            &disasm,
            &scratch.0,
            &name,
            &bmma_program(t, 0),
            tiles,
        );
        // The paired fragments: the same instruction, with 8-byte loads of the words.
        let paired = bmma_programs::bmma_program_paired(t, 0);
        let src = emit(&paired, &Default::default()).unwrap().source;
        assert!(
            src.contains("tilus_mma_b1_paired("),
            "{name}: paired helper"
        );
        let pname = format!("{name}_paired");
        assert_bmma(&ptxas, &disasm, &scratch.0, &pname, &paired, tiles);
        let ptx = compile_ptx(&src, "sm_90a").unwrap();
        let a = assemble(&ptxas, &disasm, &scratch.0, &pname, &ptx, "sm_90a");
        assert!(
            opcodes(&a.sass)
                .iter()
                .any(|o| o.starts_with("LDG") && o.contains(".64")),
            "{name}: no 8-byte global loads with the paired fragments"
        );
    }
}

/// The APT-LLM kernels (`src/kernels/apt`): the bit-serial GEMM's and the fused decode
/// kernel's configurations of the bench compile to BMMA without local memory (one per plane
/// pair, warp tile and k tile), the activation quantizer without local memory. The decode
/// kernels have tests of their own below.
#[test]
fn apt_kernels_compile_to_bmma() {
    use tilus::kernels::apt::kernel::{apt_gemm, apt_quantize_act};
    let Some((ptxas, disasm)) = tools("apt_kernels_compile_to_bmma") else {
        return;
    };
    let scratch = Scratch::new("apt");
    for cfg in tilus::kernels::apt::compile_check_configs() {
        let name = format!("apt_gemm_{cfg}").replace([',', '='], "_");
        let tiles = (cfg.WBITS * cfg.ABITS * cfg.FM * cfg.FN * cfg.KT) as usize;
        let p = apt_gemm::program(&cfg).unwrap_or_else(|e| panic!("{cfg}: {e}"));
        let src = emit(&p, &Default::default()).unwrap().source;
        // Register prefetch: the paired fragments (8-byte global loads). The cp.async ring: the
        // standard ones, LDGSTS in and 4-byte shared loads out, each word landing in the
        // register the instruction reads (the paired A needed four moves per BMMA there).
        assert_eq!(
            src.contains("tilus_mma_b1_paired("),
            cfg.STAGES == 0,
            "{cfg}: the paired fragments exactly without the ring"
        );
        let need: &[&str] = if cfg.STAGES > 0 {
            &["LDGSTS", "LDS"]
        } else {
            &[]
        };
        for (bmma, moves) in assert_bmma_with(&ptxas, &disasm, &scratch.0, &name, &p, tiles, need) {
            assert!(
                cfg.STAGES == 0 || 4 * moves <= bmma,
                "{name}: {moves} register moves for {bmma} BMMA"
            );
        }
    }
    for cfg in tilus::kernels::apt::compile_check_gemv_configs() {
        use tilus::kernels::apt::kernel::apt_gemv;
        let name = format!("apt_gemv_{cfg}").replace([',', '='], "_");
        let tiles = (cfg.WBITS * cfg.ABITS * cfg.FN * cfg.KT) as usize;
        let p = apt_gemv::program(&cfg).unwrap_or_else(|e| panic!("{cfg}: {e}"));
        let need: &[&str] = if cfg.STAGES > 0 {
            &["LDGSTS", "LDS"]
        } else {
            &["LDS.64"]
        };
        // The ring reads A and B from shared memory in the standard fragments: no moves.
        for (bmma, moves) in assert_bmma_with(&ptxas, &disasm, &scratch.0, &name, &p, tiles, need) {
            assert!(
                cfg.STAGES == 0 || 4 * moves <= bmma,
                "{name}: {moves} register moves for {bmma} BMMA"
            );
        }
    }
    for abits in [2, 4, 8] {
        let cfg = tilus::kernels::apt::linear::quantizer_config(64, 4096, abits as u32);
        let p = apt_quantize_act::program(&cfg).unwrap();
        let k = emit(&p, &Default::default()).unwrap();
        check_kernel(
            &ptxas,
            &disasm,
            &scratch.0,
            &format!("apt_quantize_act_{abits}"),
            &k,
            Expect::default(),
        );
    }
}

/// The popc decode kernel: POPC on the CUDA cores, no 1-bit mma, the weight words in 16-byte
/// (or 8-byte) loads or a cp.async ring, the activation words broadcast from shared memory.
/// (A test of its own, as the integer-mma one below: the APT kernels take minutes of ptxas,
/// which the test threads share only across tests.)
#[test]
fn apt_popc_kernels_compile_to_popc() {
    let Some((ptxas, disasm)) = tools("apt_popc_kernels_compile_to_popc") else {
        return;
    };
    let scratch = Scratch::new("apt_popc");
    for cfg in tilus::kernels::apt::compile_check_popc_configs() {
        use tilus::kernels::apt::kernel::apt_gemv_popc;
        let name = format!("apt_gemv_popc_{cfg}").replace([',', '='], "_");
        let p = apt_gemv_popc::program(&cfg).unwrap_or_else(|e| panic!("{cfg}: {e}"));
        let k = emit(&p, &Default::default()).unwrap();
        let vector: &[&str] = match (cfg.VEC, cfg.STAGES) {
            (4, 0) => &["POPC", "LDG.E.128", "LDS.128"],
            (_, 0) => &["POPC", "LDG.E.64", "LDS.64"],
            (4, _) => &["POPC", "LDGSTS", "LDS.128"],
            _ => &["POPC", "LDGSTS", "LDS.64"],
        };
        let ops = check_kernel_with(
            &ptxas,
            &disasm,
            &scratch.0,
            &name,
            &k,
            Expect::default(),
            vector,
            &["BMMA"],
        );
        // A token read in one trip is copied in a group of its own, and every copy of the
        // prologue (that group and the ring's `STAGES - 1`) is committed before the first wait,
        // the token's f16 converted only after it: as register loads, ptxas scheduled the
        // token's arithmetic ahead of the weight's first requests.
        if cfg.KWP <= 2 * 32 * cfg.WARPS / cfg.QS {
            let wait = ops
                .iter()
                .position(|o| o.starts_with("DEPBAR"))
                .expect("a wait");
            let commits = ops[..wait].iter().filter(|o| *o == "LDGDEPBAR").count();
            assert_eq!(
                commits,
                cfg.STAGES.max(1) as usize,
                "{name}: commits before the wait"
            );
            let convert = ops
                .iter()
                .position(|o| o.starts_with("HADD2.F32"))
                .expect("casts");
            assert!(
                convert > wait,
                "{name}: the token converted before its wait"
            );
        }
    }
}

/// The integer-mma decode kernel: IMMA on the tensor cores, the weight through the cp.async
/// ring, no 1-bit mma, no POPC, no spills; a split of k with one global atomic.
#[test]
fn apt_imma_kernels_compile_to_imma() {
    let Some((ptxas, disasm)) = tools("apt_imma_kernels_compile_to_imma") else {
        return;
    };
    let scratch = Scratch::new("apt_imma");
    for cfg in tilus::kernels::apt::compile_check_imma_configs() {
        use tilus::kernels::apt::kernel::apt_gemv_imma;
        let name = format!("apt_gemv_imma_{cfg}").replace([',', '='], "_");
        let p = apt_gemv_imma::program(&cfg).unwrap_or_else(|e| panic!("{cfg}: {e}"));
        let k = emit(&p, &Default::default()).unwrap();
        // A split counts its slices with one global atomic.
        let split: &[&str] = if cfg.SPLIT > 1 { &["ATOMG.E.ADD"] } else { &[] };
        check_kernel_with(
            &ptxas,
            &disasm,
            &scratch.0,
            &name,
            &k,
            Expect::default(),
            &[&["IMMA.16832.U8.S8", "LDGSTS", "LDS"], split].concat(),
            &["BMMA", "POPC"],
        );
    }
}

/// The weight re-layout of APT (`apt_split_planes`), every width: without local memory, the
/// codes in 16-byte loads.
#[test]
fn apt_relayout_compiles_without_local_memory() {
    use tilus::kernels::apt::kernel::apt_split_planes;
    let Some((ptxas, disasm)) = tools("apt_relayout_compiles_without_local_memory") else {
        return;
    };
    let scratch = Scratch::new("apt_relayout");
    for bits in 1..=8 {
        let cfg = apt_split_planes::Config {
            BITS: bits,
            WARPS: 4,
        };
        let k = emit(
            &apt_split_planes::program(&cfg).unwrap(),
            &Default::default(),
        )
        .unwrap();
        check_kernel_with(
            &ptxas,
            &disasm,
            &scratch.0,
            &format!("apt_split_planes_{bits}"),
            &k,
            Expect::default(),
            &["LDG.E.128"],
            &[],
        );
    }
}

/// The look-up method (`qmatmul_lut`, one token) in the tuner's tiling of 1-bit weights at
/// 57344 x 8192: no spills or local memory, `LDG.E.128` weights, and the first weight tile
/// requested before the first tables are stored. Built first, the tables (the token's round
/// trip, about 200 instructions and a barrier) delayed the weight's first request in every
/// block. The program requests them first in every tiling, but where the tile is narrower
/// (u1 at 512 columns, i2) ptxas 13.0 still sinks the register loads below the tables: this
/// checks the tiling where it keeps them.
#[test]
fn lut_kernel_requests_its_weights_before_its_tables() {
    use tilus::kernels::qmatmul::{build, QMatmulConfig};
    let Some((ptxas, disasm)) = tools("lut_kernel_requests_its_weights_before_its_tables") else {
        return;
    };
    let scratch = Scratch::new("lut_order");
    let (wd, bn, split_k): (DType, usize, usize) = ("u1".parse().unwrap(), 896, 4);
    let base = QMatmulConfig::default_for(wd, DType::F16, Some(128), matches!(wd, DType::UInt(_)));
    let cfg = base.lut(bn, 8, split_k, 2);
    let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
    let name = format!("qmatmul_lut_{wd}_{bn}");
    let k = emit(&kernel.main, &Default::default()).unwrap();
    let ops = check_kernel_with(
        &ptxas,
        &disasm,
        &scratch.0,
        &name,
        &k,
        Expect::default(),
        &["LDG.E.128"],
        &[],
    );
    let weights = ops.iter().position(|o| o.starts_with("LDG.E.128")).unwrap();
    let tables = ops
        .iter()
        .position(|o| o.starts_with("STS"))
        .expect("table stores");
    assert!(
        weights < tables,
        "{name}: the first weight load (instruction {weights}) after the first table store ({tables})"
    );
}

/// The VQ-GEMV kernels (`src/kernels/vq`): the codebook-centric kernel for GPTVQ-2 (16 copies
/// of the codebook, and one), AQLM-2x8 (8 copies), AQLM-3 and QuiP#-4 (the E8P table), whole
/// and with k split in four, and the naive GC
/// kernel compile to HMMA without local memory or spills; the codebook-centric one stages with
/// cp.async and looks a codebook row up with one vector load (`LDS.64` for vectors of 4,
/// `LDS.128` for 8). GPTVQ-2's 16 copies in two buffers make 256-byte rows, whose look-ups
/// address with one `PRMT` each in every product (at least a k step's 32). The dense weight's
/// kernel reads a codebook row in one `LDG.E.64`/`LDG.E.128` and stores 16 bytes at a time.
#[test]
fn vq_kernels_compile_without_spills() {
    use tilus::kernels::vq::kernel::{vq_dequant, vq_gemv, vq_gemv_gc};
    use tilus::kernels::vq::linear::{
        default_cache, dequant_config, gc_config, kernel_config, warps_for,
    };
    use tilus::kernels::vq::VqCache;
    use tilus::vq::VqConfig;
    let test = "vq_kernels_compile_without_spills";
    let mut kernels = Vec::new();
    let mut lookups = Vec::new();
    let mut dequants = Vec::new();
    for c in [
        VqConfig::GPTVQ_2,
        VqConfig::AQLM_2X8,
        VqConfig::AQLM_3,
        VqConfig::QUIP_4,
    ] {
        let mut caches = vec![default_cache(c)];
        if c.vector_size == 4 {
            caches.push(VqCache { replicas: 1 });
        }
        for cache in caches {
            // Whole k in the 16-token product; split in four in the transposed one of 8 (the
            // partials added in order, one launch) and in the 16-token one (by atomics).
            for (split, product, ordered) in [(1, 0, true), (4, 1, true), (4, 0, false)] {
                let warps = warps_for(c, 57344, 8192);
                let cfg =
                    kernel_config(c, cache, warps, (57344, 8192), (3, split), product, ordered);
                let p = vq_gemv::program(&cfg).unwrap_or_else(|e| panic!("{cfg}: {e}"));
                let name = format!(
                    "vq_gemv_{}_x{}_split{split}_t{product}{}",
                    c.name,
                    cache.replicas,
                    if ordered { "" } else { "_atomic" }
                );
                {
                    let wide = if c.vector_size == 4 {
                        "LDS.64"
                    } else {
                        "LDS.128"
                    };
                    let rows256 = c.vector_size == 4 && cache.replicas == 16;
                    lookups.push((name.clone(), p.clone(), wide, rows256));
                }
                kernels.push((
                    name,
                    p,
                    Expect {
                        hmma: true,
                        ldgsts: true,
                    },
                ));
            }
        }
        let cfg = gc_config(c);
        let p = vq_gemv_gc::program(&cfg).unwrap_or_else(|e| panic!("{cfg}: {e}"));
        kernels.push((format!("vq_gemv_gc_{}", c.name), p, MMA));
        let cfg = dequant_config(c);
        let p = vq_dequant::program(&cfg).unwrap_or_else(|e| panic!("{cfg}: {e}"));
        let name = format!("vq_dequant_{}", c.name);
        let wide = if c.vector_size == 4 {
            "LDG.E.64"
        } else {
            "LDG.E.128"
        };
        dequants.push((name.clone(), p.clone(), wide));
        kernels.push((name, p, Expect::default()));
    }
    let fin = tilus::kernels::vq::kernel::vq_finalize::program(
        &tilus::kernels::vq::kernel::vq_finalize::SPACE[0],
    )
    .unwrap();
    kernels.push(("vq_finalize".to_string(), fin, Expect::default()));
    run(test, kernels);
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new("vq_lookups");
    for (name, p, wide, rows256) in lookups {
        let src = emit(&p, &Default::default()).unwrap().source;
        let ptx = compile_ptx(&src, "sm_90a").unwrap();
        let a = assemble(&ptxas, &disasm, &scratch.0, &name, &ptx, "sm_90a");
        let ops = opcodes(&a.sass);
        assert!(
            ops.iter().any(|o| o == wide),
            "{name}: no {wide} look-ups in {ops:?}"
        );
        if rows256 {
            let prmt = ops.iter().filter(|o| o.starts_with("PRMT")).count();
            assert!(
                prmt >= 32,
                "{name}: {prmt} PRMTs, not one a look-up (32 a k step)"
            );
        }
    }
    // The dense weight: a codebook row is one vector load from global memory, and a thread's
    // 16 values leave in 16-byte stores.
    for (name, p, wide) in dequants {
        let src = emit(&p, &Default::default()).unwrap().source;
        let ptx = compile_ptx(&src, "sm_90a").unwrap();
        let a = assemble(&ptxas, &disasm, &scratch.0, &name, &ptx, "sm_90a");
        let ops = opcodes(&a.sass);
        assert!(
            ops.iter().any(|o| o.starts_with(wide)),
            "{name}: no {wide} codebook rows in {ops:?}"
        );
        let stores: Vec<_> = ops.iter().filter(|o| o.starts_with("STG")).collect();
        assert!(
            !stores.is_empty() && stores.iter().all(|o| o.starts_with("STG.E.128")),
            "{name}: stores {stores:?}, not 16-byte ones"
        );
    }
}

/// The wgmma GEMM (`tilus::kernels::gemm`), every configuration of both dtypes, for sm_90a (the
/// warpgroup MMA has no sm_80 form): no spills or stack frame, no local memory, `HGMMA` (the
/// warpgroup MMA, 4 per k step and warpgroup block; `IGMMA` for i8 operands, `QGMMA` for fp8)
/// and `LDGSTS` (the cp.async pipeline) or `UTMALDG` (the copy engine), and no warp-level HMMA;
/// APT's plane GEMM `BGMMA` (1-bit operands) with `UTMALDG`; the dequantizing kernels without
/// `HMNMX2`.
#[test]
fn wgmma_gemm_compiles_to_hgmma_without_spills() {
    let test = "wgmma_gemm_compiles_to_hgmma_without_spills";
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new(test);
    let mut kernels = Vec::new();
    for cfg in tilus::kernels::gemm::gemm_f16::SPACE {
        kernels.push((
            format!("gemm_f16_{cfg}"),
            tilus::kernels::gemm::gemm_f16::program(cfg),
        ));
    }
    for cfg in tilus::kernels::gemm::gemm_bf16::SPACE.iter().take(2) {
        kernels.push((
            format!("gemm_bf16_{cfg}"),
            tilus::kernels::gemm::gemm_bf16::program(cfg),
        ));
    }
    for cfg in tilus::kernels::gemm::w4::gemm_w4_f16::SPACE {
        kernels.push((
            format!("gemm_w4_f16_{cfg}"),
            tilus::kernels::gemm::w4::gemm_w4_f16::program(cfg),
        ));
    }
    for cfg in tilus::kernels::gemm::w4::gemm_w4t_f16::SPACE {
        kernels.push((
            format!("gemm_tma_w4t_f16_{cfg}"),
            tilus::kernels::gemm::w4::gemm_w4t_f16::program(cfg),
        ));
    }
    // The fused VQ-GEMM (prefill): GPTVQ-2's per-tile codebooks at every block height,
    // AQLM-2x8 (one codebook, vectors of 8, scales), AQLM-3 (4096 entries, 12-bit codes; blocks
    // of 128 on a ring of 3 stages).
    {
        use tilus::kernels::vq::gemm::{gemm_config, vq_gemm};
        use tilus::vq::VqConfig;
        for (c, bm) in [
            (VqConfig::GPTVQ_2, 64),
            (VqConfig::GPTVQ_2, 128),
            (VqConfig::GPTVQ_2, 256),
            (VqConfig::AQLM_2X8, 128),
            (VqConfig::AQLM_3, 64),
            (VqConfig::AQLM_3, 128),
        ] {
            let cfg = gemm_config(c, bm);
            let p = vq_gemm::program(&cfg).unwrap_or_else(|e| panic!("{cfg}: {e}"));
            kernels.push((format!("vq_gemm_{}_bm{bm}", c.name), Some(p)));
        }
    }
    // The quantized matmul's warpgroup gemv: 1-, 2- and 4-bit weights, zero points (one fma
    // per pair), 8 to 64 tokens, one and two warpgroups, split-k; the tuner's 256-column tiles
    // of one warpgroup at 32 and 64 tokens (u1 there needs 232 of the 255 registers, 251 with
    // session 39's saturation clamps); the copy engine's ring up to 256 columns, cp.async's at
    // 512; the tall tiles of prefill (128 and 256 tokens: a 256 x 128 tile holds a
    // 128-register accumulator per thread).
    {
        use tilus::kernels::qmatmul::{build, QMatmulConfig, QMatmulMethod};
        for (w, bm, bn, warps, split_k, stages) in [
            (DType::UInt(2), 8, 256, 4, 4, 6),
            (DType::Int(4), 32, 128, 4, 1, 6),
            (DType::Int(4), 16, 256, 8, 2, 6),
            (DType::UInt(1), 64, 256, 4, 1, 6),
            (DType::Int(4), 64, 256, 4, 1, 6),
            (DType::UInt(2), 32, 256, 4, 1, 6),
            // Wider than a copy-engine box row: the cp.async ring.
            (DType::UInt(2), 16, 512, 8, 1, 6),
            (DType::Int(4), 256, 128, 8, 1, 5),
            (DType::UInt(2), 128, 128, 8, 2, 5),
            (DType::Int(8), 256, 64, 4, 1, 5),
        ] {
            let cfg = QMatmulConfig {
                method: QMatmulMethod::GemvWgmma,
                bm,
                bn,
                bk: 64,
                warps,
                stages,
                split_k,
                ..QMatmulConfig::default_for(w, DType::F16, Some(128), w == DType::UInt(2))
            };
            let p = build(&cfg).unwrap().main;
            kernels.push((p.name.clone(), Some(p)));
        }
    }
    // The integer warpgroup gemv (`IGMMA .U8.S8`, the weight fields as register A): the tuner's
    // tilings, 8 to 64 tokens, 2 and 4 bits, a tile a group and two, split k. Its wgmmas stay
    // in flight while the tile before is combined only if no register move sits among them
    // (perf note 65): "serialized" is checked below like spills.
    {
        use tilus::kernels::qmatmul::{build, QMatmulConfig, QMatmulMethod};
        for (w, bm, bn, warps, bk, group, split_k) in [
            (DType::UInt(2), 16, 128, 4, 128, 128, 4),
            (DType::Int(2), 8, 128, 4, 128, 256, 1),
            (DType::UInt(4), 32, 128, 4, 128, 128, 1),
            (DType::Int(4), 64, 64, 4, 256, 256, 2),
            (DType::UInt(2), 64, 128, 8, 128, 128, 1),
        ] {
            let cfg = QMatmulConfig {
                method: QMatmulMethod::GemvIgmma,
                bm,
                bn,
                bk,
                warps,
                stages: 4,
                split_k,
                ..QMatmulConfig::default_for(w, DType::F16, Some(group), w == DType::UInt(2))
            };
            let p = build(&cfg).unwrap().main;
            kernels.push((p.name.clone(), Some(p)));
        }
    }
    for cfg in tilus::kernels::gemm::gemm_tma_f16::SPACE {
        kernels.push((
            format!("gemm_tma_f16_{cfg}"),
            tilus::kernels::gemm::gemm_tma_f16::program(cfg),
        ));
    }
    for cfg in tilus::kernels::gemm::gemm_tma_bf16::SPACE.iter().take(1) {
        kernels.push((
            format!("gemm_tma_bf16_{cfg}"),
            tilus::kernels::gemm::gemm_tma_bf16::program(cfg),
        ));
    }
    // The persistent GEMM: its tiles' epilogues stored by the copy engine.
    for cfg in tilus::kernels::gemm::gemm_persistent_f16::SPACE
        .iter()
        .step_by(2)
    {
        kernels.push((
            format!("gemm_persistent_f16_{cfg}"),
            tilus::kernels::gemm::gemm_persistent_f16::program(cfg),
        ));
    }
    // The warp-specialized persistent GEMM: a producer warpgroup, consumers with more
    // registers.
    for cfg in tilus::kernels::gemm::gemm_ws_f16::SPACE.iter().step_by(2) {
        kernels.push((
            format!("gemm_ws_f16_{cfg}"),
            tilus::kernels::gemm::gemm_ws_f16::program(cfg),
        ));
    }
    // The 8-bit operands: IGMMA for i8, QGMMA for fp8 (below).
    {
        use tilus::kernels::gemm::{gemm_tma_e4m3, gemm_tma_e5m2, gemm_tma_i8};
        for cfg in gemm_tma_i8::SPACE.iter().take(2) {
            kernels.push((format!("gemm_tma_i8_{cfg}"), gemm_tma_i8::program(cfg)));
        }
        let cfg = &gemm_tma_e4m3::SPACE[0];
        kernels.push((format!("gemm_tma_e4m3_{cfg}"), gemm_tma_e4m3::program(cfg)));
        let cfg = &gemm_tma_e5m2::SPACE[1];
        kernels.push((format!("gemm_tma_e5m2_{cfg}"), gemm_tma_e5m2::program(cfg)));
    }
    // APT's bit planes on the 1-bit warpgroup MMA (BGMMA), copied as bits by the copy engine:
    // the layer's rule for W2A2 at 64 and 256 tokens (outputs stored by the copy engine), W1A2,
    // and W3A4's 12 plane pairs.
    {
        use tilus::kernels::apt::{kernel::apt_gemm_bgmma, AptLinear};
        for (w, a, m) in [(2, 2, 64), (2, 2, 256), (1, 2, 64), (3, 4, 64)] {
            let layer = AptLinear::new(&vec![0.5; 256 * 64], 256, 64, w, a, None).unwrap();
            let rule = layer.bgmma_config(m, false);
            // The rule's tiles, and the widest the rule takes: two warpgroups of the columns
            // of 192 accumulator registers.
            let c = layer.bgmma_columns(192) as i32;
            let wide = layer.bgmma_tiles(64, 2 * c, 2, false).unwrap();
            // And the widest with the outputs through the copy engine, where the rule would.
            let boxed = layer.bgmma_store(wide, 64);
            let mut cfgs = vec![rule, wide];
            if boxed != wide {
                cfgs.push(boxed);
            }
            for cfg in cfgs {
                kernels.push((
                    format!("apt_gemm_bgmma_{cfg}").replace([',', '='], "_"),
                    apt_gemm_bgmma::program(&cfg).ok(),
                ));
            }
        }
    }
    for (name, program) in kernels {
        let k = emit(&program.unwrap(), &Default::default()).unwrap();
        let arch = "sm_90a";
        let ptx = compile_ptx(&k.source, arch)
            .unwrap_or_else(|e| panic!("{name}: NVRTC failed for {arch}: {e}\n{}", k.source));
        let a = assemble(&ptxas, &disasm, &scratch.0, &name, &ptx, arch);
        assert!(
            a.ptxas_log
                .contains("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
            "{name}: stack frame or spills:\n{}",
            a.ptxas_log
        );
        // ptxas serializes wgmmas it cannot prove safe to overlap, and says so. The warpgroup
        // gemv's 64-token, 256-column tile is the exception: four wgmma tiles per warpgroup
        // leave too few registers to overlap them, and it still measured the fastest
        // (docs/perf-notes.md entry 29).
        let known = name.starts_with("qmatmul_") && name.contains("_64x256x64_w4_");
        assert!(
            known || !a.ptxas_log.contains("serialized"),
            "{name}: wgmma serialized:\n{}",
            a.ptxas_log
        );
        let ops = opcodes(&a.sass);
        let count = |p: &str| {
            ops.iter()
                .filter(|o| *o == p || o.starts_with(&format!("{p}.")))
                .count()
        };
        assert_eq!(count("LDL") + count("STL"), 0, "{name}: local memory");
        // The warpgroup MMA of the operand type: HGMMA (16-bit floats), IGMMA (8-bit
        // integers), QGMMA (fp8).
        let gmma = if name.starts_with("gemm_tma_i8") || name.ends_with("_gemvigmma") {
            "IGMMA"
        } else if name.starts_with("apt_gemm_bgmma") {
            "BGMMA"
        } else if name.starts_with("gemm_tma_e") {
            "QGMMA"
        } else {
            "HGMMA"
        };
        assert!(count(gmma) >= 4, "{name}: {} {gmma}", count(gmma));
        // APT's GEMM follows the quantizer as a programmatic dependent: it waits (ACQBULK)
        // before it reads the activations.
        if name.starts_with("apt_gemm_bgmma") {
            assert_eq!(count("ACQBULK"), 1, "{name}: griddepcontrol.wait");
            // Outputs through the copy engine (UTMASTG) where the rule gives them to it.
            let boxed = !name.ends_with("STORE_BOX_0");
            assert_eq!(
                count("UTMASTG") > 0,
                boxed,
                "{name}: {} UTMASTG",
                count("UTMASTG")
            );
        }
        // The warp-specialized GEMM re-sizes its roles' registers, which the block's pool
        // only allows when ptxas gives the kernel the whole cap (`LaunchSpec::min_registers`,
        // checked again by the launcher).
        if name.starts_with("gemm_ws") {
            assert!(
                count("USETMAXREG") >= 2,
                "{name}: {} USETMAXREG",
                count("USETMAXREG")
            );
            let used = a
                .ptxas_log
                .lines()
                .find_map(|l| {
                    let (_, rest) = l.split_once("Used ")?;
                    rest.split_whitespace().next()?.parse::<u32>().ok()
                })
                .unwrap_or(0);
            assert!(
                used >= k.launch.min_registers,
                "{name}: ptxas gave {used} registers, the roles need {}",
                k.launch.min_registers
            );
        }
        // The persistent GEMMs store a tile's `BN / 64` boxes through the copy engine.
        if name.starts_with("gemm_persistent") || name.starts_with("gemm_ws") {
            assert!(
                count("UTMASTG") >= 2,
                "{name}: {} UTMASTG",
                count("UTMASTG")
            );
        }
        // The copy-engine kernels: the dense GEMM's, and the warpgroup gemv's tiles of at most
        // 256 columns.
        if k.source.contains("cp.async.bulk.tensor") {
            // The copy engine fills the stages (UTMALDG), completing on mbarriers (SYNCS).
            assert!(
                count("UTMALDG") >= 2,
                "{name}: {} UTMALDG",
                count("UTMALDG")
            );
            // (The fused VQ-GEMM copies its codebooks by cp.async on purpose: a stage's
            // codebook is a rank-3 table the copy engine's boxes do not describe.)
            if !name.starts_with("vq_gemm") {
                assert_eq!(count("LDGSTS"), 0, "{name}: cp.async left");
            }
        } else {
            assert!(count("LDGSTS") > 0, "{name}: no LDGSTS");
        }
        assert_eq!(count("HMMA"), 0, "{name}: warp-level HMMA");
        // The VM's half arithmetic rounds as IEEE does (`DType::round`): a dequantizing
        // kernel's f16 arithmetic is one HFMA2 or HMUL2 per pair, without the two HMNMX2
        // clamps that saturating semantics cost (perf note 57). (The integer gemv dequantizes
        // nothing in f16.)
        if ["qmatmul_", "gemm_w4", "gemm_tma_w4t"]
            .iter()
            .any(|p| name.starts_with(p))
            && !name.ends_with("_gemvigmma")
        {
            assert_eq!(count("HMNMX2"), 0, "{name}: f16 clamps in SASS");
            assert!(count("HFMA2") > 0, "{name}: no HFMA2");
        }
        let regs = a
            .ptxas_log
            .lines()
            .find(|l| l.contains("Used") && l.contains("registers"))
            .unwrap_or("")
            .trim()
            .to_string();
        eprintln!("{name}: ok, {} {gmma}; {regs}", count(gmma));
    }
}

/// The RS form of wgmma (`a` in registers, `tests/kernels/wgmma_rs.rs`), every configuration,
/// f16, bf16 and u8 x s8, for sm_90a: `HGMMA` (`IGMMA .U8.S8`; two dots of `2 / WG` blocks by
/// 4 k steps per warpgroup), no local memory, no spills, nothing serialized, no warp-level MMA.
#[test]
fn wgmma_rs_compiles_to_hgmma_without_local_memory() {
    use wgmma_rs_kernels::{wgmma_rs_bf16, wgmma_rs_f16};
    let test = "wgmma_rs_compiles_to_hgmma_without_local_memory";
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new(test);
    let mut kernels = Vec::new();
    for cfg in wgmma_rs_f16::SPACE {
        let hgmma = 2 * (2 / cfg.WG as usize) * 4;
        kernels.push((
            format!("rs_f16_{cfg}"),
            wgmma_rs_f16::program(cfg),
            hgmma,
            "HGMMA",
        ));
    }
    for cfg in wgmma_rs_bf16::SPACE {
        let hgmma = 2 * (2 / cfg.WG as usize) * 4;
        kernels.push((
            format!("rs_bf16_{cfg}"),
            wgmma_rs_bf16::program(cfg),
            hgmma,
            "HGMMA",
        ));
    }
    for cfg in wgmma_rs_kernels::wgmma_rs_split_n::SPACE {
        let program = wgmma_rs_kernels::wgmma_rs_split_n::program(cfg);
        kernels.push((format!("rs_split_n_{cfg}"), program, 2 * 4, "HGMMA"));
    }
    // u8 weights against i8 activations: the integer tensor cores' `IGMMA .U8.S8`, also from
    // a fresh zero tile (no register moves among the wgmmas, nothing serialized).
    for cfg in wgmma_rs_kernels::wgmma_rs_u8s8::SPACE {
        let program = wgmma_rs_kernels::wgmma_rs_u8s8::program(cfg);
        let igmma = 2 * (2 / cfg.WG as usize) * 4;
        kernels.push((format!("rs_u8s8_{cfg}"), program, igmma, "IGMMA"));
    }
    for (name, program, hgmma, op) in kernels {
        let k = emit(&program.unwrap(), &Default::default()).unwrap();
        let arch = "sm_90a";
        let ptx = compile_ptx(&k.source, arch)
            .unwrap_or_else(|e| panic!("{name}: NVRTC failed for {arch}: {e}\n{}", k.source));
        assert!(
            ptx.contains("wgmma.mma_async.sync.aligned.m64n"),
            "{name}: no wgmma in the PTX"
        );
        let a = assemble(&ptxas, &disasm, &scratch.0, &name, &ptx, arch);
        assert!(
            a.ptxas_log
                .contains("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
            "{name}: stack frame or spills:\n{}",
            a.ptxas_log
        );
        assert!(
            !a.ptxas_log.contains("serialized"),
            "{name}: wgmma serialized:\n{}",
            a.ptxas_log
        );
        let ops = opcodes(&a.sass);
        let count = |p: &str| {
            ops.iter()
                .filter(|o| *o == p || o.starts_with(&format!("{p}.")))
                .count()
        };
        assert_eq!(count("LDL") + count("STL"), 0, "{name}: local memory");
        assert_eq!(count(op), hgmma, "{name}: {op}");
        assert_eq!(count("HMMA") + count("IMMA"), 0, "{name}: warp-level MMA");
        if op == "IGMMA" {
            assert!(
                a.sass.contains("IGMMA.64x128x32.U8.S8"),
                "{name}: not u8 x s8"
            );
        }
        eprintln!("{name}: ok, {} {op}", count(op));
    }
}

/// The fp8 `dot` on the mma fragments (`mma.sync.m16n8k32 .e4m3`, sm_89+) compiles for sm_90a
/// to the tensor cores' HMMA (two n tiles a step), without local memory or spills.
#[test]
fn fp8_dot_compiles_to_hmma_on_sm90() {
    let test = "fp8_dot_compiles_to_hmma_on_sm90";
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new(test);
    let p = language::fp8_mma::program(&language::fp8_mma::SPACE[0]).unwrap();
    let k = emit(&p, &Default::default()).unwrap();
    let ptx = compile_ptx(&k.source, "sm_90a")
        .unwrap_or_else(|e| panic!("NVRTC failed for sm_90a: {e}\n{}", k.source));
    assert!(ptx.contains("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"));
    let a = assemble(&ptxas, &disasm, &scratch.0, "fp8_mma", &ptx, "sm_90a");
    assert!(
        a.ptxas_log
            .contains("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
        "stack frame or spills:\n{}",
        a.ptxas_log
    );
    let ops = opcodes(&a.sass);
    let count = |p: &str| {
        ops.iter()
            .filter(|o| *o == p || o.starts_with(&format!("{p}.")))
            .count()
    };
    assert_eq!(count("LDL") + count("STL"), 0, "local memory");
    assert!(count("HMMA") >= 2, "no fp8 HMMA in the SASS:\n{}", a.sass);
}

/// The 8-bit integer `dot` on the k32 fragments compiles for sm_80 and sm_90a to one
/// `IMMA.16832` per fragment with each operand's signedness (`.U8.S8` for a u8 weight against
/// s8 activations), without local memory or spills.
#[test]
fn int8_k32_dot_compiles_to_imma_16832() {
    let test = "int8_k32_dot_compiles_to_imma_16832";
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new(test);
    for cfg in language::int8_mma::SPACE.iter() {
        let p = language::int8_mma::program(cfg).unwrap();
        let k = emit(&p, &Default::default()).unwrap();
        let sign = |d: tilus::DType| {
            if d == tilus::DType::Int(8) {
                "s8"
            } else {
                "u8"
            }
        };
        let (ta, tb) = (sign(cfg.A), sign(cfg.B));
        for arch in ["sm_80", "sm_90a"] {
            let ptx = compile_ptx(&k.source, arch)
                .unwrap_or_else(|e| panic!("NVRTC failed for {arch}: {e}\n{}", k.source));
            assert!(
                ptx.contains(&format!(
                    "mma.sync.aligned.m16n8k32.row.col.s32.{ta}.{tb}.s32"
                )),
                "{ta} x {tb} on {arch}"
            );
            let a = assemble(&ptxas, &disasm, &scratch.0, "int8_mma", &ptx, arch);
            assert!(
                a.ptxas_log
                    .contains("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
                "stack frame or spills:\n{}",
                a.ptxas_log
            );
            let want = format!("IMMA.16832.{}.{}", ta.to_uppercase(), tb.to_uppercase());
            assert!(a.sass.contains(&want), "no {want} on {arch}:\n{}", a.sass);
            let ops = opcodes(&a.sass);
            assert!(
                !ops.iter()
                    .any(|o| o.starts_with("LDL") || o.starts_with("STL")),
                "local memory on {arch}"
            );
        }
    }
}

/// The batched `dot` (one product per warp): HMMA for the mma layouts, scalar FMAs for the
/// thread-local ones, no local memory either way.
#[test]
fn batched_dot_compiles_to_hmma_per_warp() {
    let Some((ptxas, disasm)) = tools("batched_dot_compiles_to_hmma_per_warp") else {
        return;
    };
    let scratch = Scratch::new("batched_mma");
    for cfg in language::batched_mma::SPACE {
        let name = format!("batched_mma_{}", cfg.TL);
        let p = language::batched_mma::program(cfg).unwrap();
        let k = emit(&p, &Default::default()).unwrap();
        assert_eq!(
            k.source.contains("tilus_mma_f16("),
            cfg.TL == 0,
            "{name}: mma only for the mma layouts"
        );
        check_kernel(
            &ptxas,
            &disasm,
            &scratch.0,
            &name,
            &k,
            Expect {
                hmma: cfg.TL == 0,
                ldgsts: false,
            },
        );
    }
}

/// CQ decode attention: the codebook look-ups are 8-byte shared loads straight into the
/// fragments (`LDS.64`), the products HMMA, the codes ride `cp.async`; no local memory.
#[test]
fn cq_attention_compiles_to_hmma_and_lds64() {
    use tilus::kernels::attention::cq_kernel::attention_decode_cq;
    let Some((ptxas, disasm)) = tools("cq_attention_compiles_to_hmma_and_lds64") else {
        return;
    };
    let scratch = Scratch::new("cq_attention");
    for (tw, rep, occ) in [(16, 16, 1), (32, 16, 1), (32, 8, 3)] {
        let cfg = attention_decode_cq::Config {
            D: 128,
            V: 4,
            NW: 4,
            TW: tw,
            STAGES: 4,
            PG: 0,
            REP: rep,
            OCC: occ,
            A: tilus::DType::F16,
        };
        let p = attention_decode_cq::program(&cfg).unwrap();
        let k = emit(&p, &Default::default()).unwrap();
        check_kernel_with(
            &ptxas,
            &disasm,
            &scratch.0,
            &format!("cq_attention_{tw}_{rep}_{occ}"),
            &k,
            Expect {
                hmma: true,
                ldgsts: true,
            },
            &["LDS.64"],
            &[],
        );
    }
}

/// The run fragments (`mma_a_k4`/`mma_b_k4`, `..k8`): the dot is an mma (`tilus_mma_f16` on
/// reordered words, `R / 4` HMMA per fragment pair), without local memory.
#[test]
fn run_fragments_compile_to_hmma() {
    let Some((ptxas, disasm)) = tools("run_fragments_compile_to_hmma") else {
        return;
    };
    let scratch = Scratch::new("run_mma");
    for cfg in language::run_mma::SPACE {
        let name = format!("run_mma_{}", cfg.R);
        let p = language::run_mma::program(cfg).unwrap();
        let k = emit(&p, &Default::default()).unwrap();
        assert!(k.source.contains("tilus_mma_f16("), "{name}: an mma");
        check_kernel(
            &ptxas,
            &disasm,
            &scratch.0,
            &name,
            &k,
            Expect {
                hmma: true,
                ldgsts: false,
            },
        );
        let ptx = compile_ptx(&k.source, "sm_90a").unwrap();
        let a = assemble(&ptxas, &disasm, &scratch.0, &name, &ptx, "sm_90a");
        let ops = opcodes(&a.sass);
        // Two fragments of k by two tiles of n per warp and step: 4 R / 4 HMMA per step.
        let hmma = ops.iter().filter(|o| o.starts_with("HMMA")).count();
        assert!(hmma >= cfg.R as usize, "{name}: {hmma} HMMA");
    }
}

/// `tma_store` (`tests/kernels/tma_store.rs`), unswizzled and swizzled, for sm_90a: two bulk
/// tensor stores (`UTMASTG`), each waited for its reads, and no local memory.
#[test]
fn tma_store_compiles_to_utmastg() {
    use tma_store_kernels::{tma_store_plain, tma_store_swizzled};
    let test = "tma_store_compiles_to_utmastg";
    let Some((ptxas, disasm)) = tools(test) else {
        return;
    };
    let scratch = Scratch::new(test);
    let kernels = [
        (
            "plain",
            tma_store_plain::program(&tma_store_plain::SPACE[0]),
        ),
        (
            "swizzled",
            tma_store_swizzled::program(&tma_store_swizzled::SPACE[0]),
        ),
    ];
    for (name, program) in kernels {
        let k = emit(&program.unwrap(), &Default::default()).unwrap();
        let arch = "sm_90a";
        let ptx = compile_ptx(&k.source, arch)
            .unwrap_or_else(|e| panic!("{name}: NVRTC failed for {arch}: {e}\n{}", k.source));
        let a = assemble(&ptxas, &disasm, &scratch.0, name, &ptx, arch);
        let ops = opcodes(&a.sass);
        let count = |p: &str| {
            ops.iter()
                .filter(|o| *o == p || o.starts_with(&format!("{p}.")))
                .count()
        };
        assert_eq!(count("LDL") + count("STL"), 0, "{name}: local memory");
        assert_eq!(count("UTMASTG"), 2, "{name}: UTMASTG in\n{}", a.sass);
        assert!(
            count("FENCE") >= 2,
            "{name}: no proxy fences in\n{}",
            a.sass
        );
        eprintln!("{name}: ok, {} UTMASTG", count("UTMASTG"));
    }
}

/// `gather_rows` from a register table compiles to warp shuffles (`SHFL.IDX`), one per slot
/// and word, with no shared or local memory, for every placement in `warp_rows`' space.
#[test]
fn register_rows_compile_to_shuffles() {
    let Some((ptxas, disasm)) = tools("register_rows_compile_to_shuffles") else {
        return;
    };
    let scratch = Scratch::new("register_rows");
    for cfg in addressing_kernels::warp_rows::SPACE {
        let p = addressing_kernels::warp_rows::program(cfg).unwrap();
        let k = emit(&p, &Default::default()).unwrap();
        let words = (cfg.W / 2) as usize;
        let want = 2 * words * cfg.SLOTS as usize;
        let ops = check_kernel_with(
            &ptxas,
            &disasm,
            &scratch.0,
            &format!("warp_rows_{}_{}_{}", cfg.SLOTS, cfg.BLOCKED, cfg.W),
            &k,
            Expect {
                hmma: false,
                ldgsts: false,
            },
            &["SHFL"],
            &["LDS", "STS"],
        );
        let got = ops.iter().filter(|o| o.starts_with("SHFL")).count();
        assert_eq!(got, want, "{cfg:?} (sm_90a): {got} shuffles, want {want}");
    }
}

/// The three-tier codebook cache's GEMV at every point of its tuning space for the formats it
/// serves: no local memory, the shared tier's rows as `LDS.64`/`LDS.128`, the register tier's
/// as `SHFL.IDX` (where it holds entries), the shared tier loaded by `LDGSTS`.
#[test]
fn cached_vq_gemv_compiles_to_shuffles_and_vector_loads() {
    use tilus::kernels::vq::cache::{cached_config, vq_gemv_cached, CacheTiers};
    use tilus::vq::VqConfig;
    let Some((ptxas, disasm)) = tools("cached_vq_gemv_compiles_to_shuffles_and_vector_loads")
    else {
        return;
    };
    let scratch = Scratch::new("cached_vq_gemv");
    for c in [VqConfig::GPTVQ_2, VqConfig::AQLM_2X8, VqConfig::AQLM_3] {
        for t in CacheTiers::candidates(c) {
            let cfg = cached_config(c, t);
            let p = vq_gemv_cached::program(&cfg).unwrap();
            let k = emit(&p, &Default::default()).unwrap();
            let row = if c.vector_size == 4 {
                "LDS.64"
            } else {
                "LDS.128"
            };
            let mut need = vec![row];
            if t.n_reg > 0 {
                need.push("SHFL");
            }
            check_kernel_with(
                &ptxas,
                &disasm,
                &scratch.0,
                &format!("vq_gemv_cached_{}_{t}", c.name),
                &k,
                Expect {
                    hmma: false,
                    ldgsts: true,
                },
                &need,
                &[],
            );
        }
    }
}
