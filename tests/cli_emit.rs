//! `tilus emit` end to end: the generated source for each paper kernel, configurations, and the
//! one-line errors (exit status 2) for unknown kernels, keys and unsupported configurations.

#[path = "common/skip.rs"]
mod skip;

use skip::{skip, Need};
use std::process::{Command, Output};

fn tilus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tilus"))
        .args(args)
        .output()
        .expect("run the tilus binary")
}

fn source(args: &[&str]) -> String {
    let out = tilus(args);
    assert!(
        out.status.success(),
        "tilus {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn error(args: &[&str]) -> String {
    let out = tilus(args);
    assert_eq!(out.status.code(), Some(2), "tilus {args:?} should exit 2");
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn emits_each_paper_kernel() {
    let s = source(&["emit", "fig2"]);
    assert!(s.contains(
        "extern \"C\" __global__ void __launch_bounds__(128, 1) matmul_f16_i6_bm16_bn64_bk64("
    ));
    assert!(s.contains("mma.sync.aligned.m16n8k16"));
    let s = source(&["emit", "fig8", "--config", "WEIGHT=u4", "--config", "BK=32"]);
    assert!(s.contains("relayout_u4_bk32_bn64("), "{s}");
    let s = source(&["emit", "fig14", "--config", "BM=32,BN=64,BK=32,STAGES=3"]);
    assert!(s.contains("matmul_f16_pipelined_bm32_bn64_bk32_s3("), "{s}");
    assert!(s.contains("cp.async.cg.shared.global") && s.contains("ldmatrix"));
    assert!(
        s.contains(
            "// Launch: grid [(m + 32 - 1) / 32, n / 64] (x, y, z), 128 threads, 18432 bytes"
        ),
        "{s}"
    );
    // Program names work too, case-insensitively.
    let s = source(&["emit", "MATMUL_F16_PIPELINED", "--config", "stages=2"]);
    assert!(s.contains("_s2("));
    let s = source(&["emit", "matmul_f16_i6", "--config", "BN=128"]);
    assert!(s.contains("matmul_f16_i6_bm16_bn128_bk64("));
}

#[test]
fn bad_kernels_and_configs_are_one_line_errors() {
    assert!(error(&["emit", "fig3"]).contains("unknown kernel `fig3`"));
    assert!(error(&["emit", "fig2", "--config", "STAGES=3"])
        .contains("unknown configuration key `STAGES`"));
    assert!(error(&["emit", "fig14", "--config", "BM"]).contains("expected KEY=VALUE"));
    assert!(error(&["emit", "fig14", "--config", "BM=x"]).contains("positive integer"));
    assert!(error(&["emit", "fig14", "--config", "BM=24"]).contains("unsupported configuration"));
    assert!(
        error(&["emit", "fig2", "--config", "WEIGHT=f16"]).contains("unsupported configuration")
    );
    assert!(error(&["emit", "fig2", "--config", "WEIGHT=q9"]).contains("WEIGHT=q9"));
    assert!(error(&["emit", "matmul_f16_i6", "--config", "WEIGHT=u4"]).contains("fixes WEIGHT"));
}

#[test]
fn emits_the_library_qmatmul() {
    let src = source(&[
        "emit",
        "qmatmul",
        "--config",
        "WDTYPE=u3,BN=256,BK=128,STAGES=4",
    ]);
    assert!(
        src.contains("qmatmul_f16_u3_g128_z_16x256x128_w4_s4_k1"),
        "{src}"
    );
    // Whole-tile groups scale the accumulator (one FFMA per element), not each weight, and the
    // zero points come off it too.
    assert!(src.contains("acc = mul_add(acc_g, "), "{src}");
    assert!(src.contains("asum = dot(ra, ones, asum)"), "{src}");
    assert!(!src.contains(" = sub("), "{src}");
    let split = source(&["emit", "qmatmul", "--config", "WDTYPE=i4,SPLIT_K=2,GROUP=0"]);
    // One program: the last block of each output tile sums the partial sums.
    assert!(!split.contains("qmatmul_reduce"), "{split}");
    assert!(split.contains("fence.acq_rel.gpu"), "{split}");
    assert!(split.contains("atomicAdd("), "{split}");
    assert!(error(&["emit", "qmatmul", "--config", "WDTYPE=f16"]).contains("wdtype"));
    assert!(error(&["emit", "qmatmul", "--config", "BN=48"]).contains("bn"));
    assert!(error(&["emit", "qmatmul", "--config", "STAGES=x"]).contains("STAGES"));
    // The gemv method: the weight as the mma's A operand, 8 activation rows per block.
    let gemv = source(&[
        "emit",
        "qmatmul",
        "--config",
        "WDTYPE=u2,BN=256,METHOD=gemv",
    ]);
    assert!(
        gemv.contains("qmatmul_f16_u2_g128_z_8x256x64_w4_s3_k1_gemv"),
        "{gemv}"
    );
    assert!(error(&["emit", "qmatmul", "--config", "METHOD=fast"]).contains("METHOD=fast"));
    assert!(error(&["emit", "qmatmul", "--config", "METHOD=gemv,BM=12"]).contains("bm"));
    // Token tiles: 16 rows per block; and the warpgroup form (k tiles of 64, sm_90a).
    let tiles = source(&[
        "emit",
        "qmatmul",
        "--config",
        "WDTYPE=u2,BN=256,METHOD=gemv,BM=16",
    ]);
    assert!(
        tiles.contains("qmatmul_f16_u2_g128_z_16x256x64_w4_s3_k1_gemv"),
        "{tiles}"
    );
    let wgmma = source(&[
        "emit",
        "qmatmul",
        "--config",
        "WDTYPE=i4,BN=128,METHOD=gemv_wgmma",
    ]);
    assert!(wgmma.contains("wgmma.mma_async"), "{wgmma}");
    assert!(error(&["emit", "qmatmul", "--config", "METHOD=gemv_wgmma,BK=128"]).contains("bk"));
}

/// `--ptx ARCH` prints NVRTC's PTX of every program of the kernel (the split-k qmatmul has one);
/// without NVRTC it is a one-line error, unless TILUS_REQUIRE_NVRTC=1 makes that a failure.
#[test]
fn ptx_for_an_architecture() {
    let args = [
        "emit",
        "qmatmul",
        "--config",
        "WDTYPE=i2,BN=256,BK=128,STAGES=4,SPLIT_K=4",
        "--ptx",
        "sm_90a",
    ];
    let out = tilus(&args);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("NVRTC"), "{err}");
        skip("ptx_for_an_architecture", Need::Nvrtc, &err);
        return;
    }
    let ptx = String::from_utf8(out.stdout).unwrap();
    assert_eq!(ptx.matches(".target sm_90a").count(), 1, "one program");
    assert!(ptx.contains(".entry qmatmul_f16_i2_g128_16x256x128_w4_s4_k4("));
    // The in-kernel split-k reduction: fences around the semaphore's atomic.
    assert!(ptx.contains("fence.acq_rel.gpu"), "{ptx}");
    assert!(ptx.contains("atom.global.add"), "{ptx}");
    assert!(ptx.contains("mma.sync.aligned.m16n8k16"));
    // The split packing order of i2: no byte permute in the cast.
    assert!(
        !ptx.contains("prmt.b32"),
        "the i2 cast should not permute bytes"
    );
}

/// `--ir` prints the verified program: signature, grid, body with the configuration's
/// constants, and the tensors' types; the quantized matmul with split-k is one program.
#[test]
fn ir_listing_of_the_verified_program() {
    let text = source(&["emit", "fig14", "--config", "BK=32,STAGES=3", "--ir"]);
    assert!(
        text.contains("// grid = [(m + 64 - 1) / 64, n / 64], 128 threads (4 warps)"),
        "{text}"
    );
    assert!(
        text.contains("a: Global<f16>") && text.contains("c: GlobalMut<f16>"),
        "{text}"
    );
    assert!(text.contains("for kk in 0..k / 32 {"), "{text}");
    assert!(text.contains("acc = dot(ra, rb, acc);"), "{text}");
    assert!(text.contains("copy_async_wait_group(1);"), "{text}");
    assert!(text.contains("//   acc: register f32[64, 64]"), "{text}");
    assert!(!text.contains("__global__"), "{text}");
    let split = source(&["emit", "qmatmul", "--config", "SPLIT_K=2", "--ir"]);
    assert_eq!(split.matches("// grid = ").count(), 1, "{split}");
    // The in-kernel reduction: two fences around the semaphore's atomic.
    assert_eq!(split.matches("fence();").count(), 2, "{split}");
    assert!(split.contains("atomic_add("), "{split}");
    // Both at once is a usage error (clap's, exit status 2).
    let out = tilus(&["emit", "fig14", "--ir", "--ptx", "sm_90a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

fn help(args: &[&str]) -> String {
    let out = tilus(args);
    assert!(out.status.success(), "tilus {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn emit_help_lists_the_kernels_and_their_keys() {
    let h = help(&["emit", "--help"]);
    for kernel in ["fig2", "fig8", "fig14", "qmatmul"] {
        assert!(h.contains(kernel), "{kernel} missing from:\n{h}");
    }
    let qmatmul = &h[h.find("  qmatmul ").expect("a qmatmul entry")..];
    for key in [
        "WDTYPE", "ADTYPE", "GROUP", "BM", "BN", "BK", "WARPS", "STAGES", "SPLIT_K", "METHOD",
    ] {
        assert!(
            qmatmul.contains(key),
            "qmatmul key {key} missing from:\n{h}"
        );
    }
    // The accepted values, not only the names.
    assert!(
        qmatmul.contains("f16 or bf16") && qmatmul.contains("per-channel"),
        "{h}"
    );
}

/// The options of a `--help` text (lines starting with `-` under `Options:`) and whether each
/// has a description after its name.
fn undescribed_options(help: &str) -> Vec<String> {
    let options = help.split("Options:").nth(1).unwrap_or("");
    options
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('-'))
        .filter(|l| {
            // `--name <VALUE>  Description [default: ..]`: a description is separated from the
            // name by at least two spaces.
            l.split_once("  ")
                .is_none_or(|(_, rest)| rest.trim().is_empty())
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_bench_option_has_a_description() {
    let top = help(&["bench", "--help"]);
    let subcommands: Vec<&str> = top
        .split("Commands:")
        .nth(1)
        .expect("a command list")
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&c| c != "help")
        .collect();
    for expected in ["copy", "qmatmul", "sweep", "tune", "gemm"] {
        assert!(
            subcommands.contains(&expected),
            "{expected}: {subcommands:?}"
        );
    }
    for sub in subcommands {
        let h = help(&["bench", sub, "--help"]);
        assert!(h.contains("Options:"), "{sub}: {h}");
        let bare = undescribed_options(&h);
        assert!(
            bare.is_empty(),
            "tilus bench {sub}: options without a description: {bare:?}"
        );
    }
    // The check itself sees a bare option.
    assert_eq!(
        undescribed_options("Options:\n      --m <M>\n  -h, --help  Print help\n"),
        ["--m <M>"]
    );
}

#[test]
fn skip_reports_are_one_short_line() {
    assert_eq!(
        skip::short("libnvrtc.so not found: needed.\nInstall the toolkit. Or pip."),
        "libnvrtc.so not found: needed."
    );
    assert_eq!(skip::short("no device"), "no device");
    assert_eq!(
        skip::summary(3, "gpu_linear", &[Need::Gpu]),
        "SKIPPED 3 of the tests above (gpu_linear): no usable GPU; libtest counted them as \
         passed (TILUS_REQUIRE_GPU=1 to fail instead)"
    );
}

/// Configurations that once took gigabytes or minutes (issue 13): each is one line and exit
/// status 2, quickly. Run under a 4 GB address-space limit so that a regression aborts instead
/// of exhausting the machine's memory.
#[cfg(unix)]
#[test]
fn huge_configurations_fail_fast() {
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["emit", "fig2", "--config", "BM=2147483648"],
            &["BM=2147483648", "at most 2147483647"],
        ),
        (
            &["emit", "fig2", "--config", "BM=2147483632"],
            &[
                "register tensor `acc`: each thread holds 1073741816 f32 elements",
                "more than the limit of 512",
            ],
        ),
        (
            &["emit", "fig2", "--config", "BM=65536,BN=65536,BK=65536"],
            &["unsupported configuration", "must fit the VM's i32"],
        ),
        (
            &["emit", "fig8", "--config", "BK=65536"],
            &["register tensor `r`: each thread holds 32768 i6 elements in 6144 32-bit registers, more than the limit of 512"],
        ),
        (
            &["emit", "qmatmul", "--config", "BM=100000000"],
            &["config field `bm`", "50000000 32-bit registers", "f32 accumulator", "limit of 512"],
        ),
    ];
    for (args, needles) in cases {
        let start = std::time::Instant::now();
        let out = Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 4000000 && exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_tilus"))
            .args(args)
            .output()
            .expect("run the tilus binary");
        let elapsed = start.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "tilus {args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        for n in needles {
            assert!(err.contains(n), "tilus {args:?}: `{n}` not in {err}");
        }
        assert!(
            elapsed.as_secs_f64() < 5.0,
            "tilus {args:?} took {elapsed:?}"
        );
    }
}

/// Large but legal tiles still generate code (the limits are not tighter than the hardware).
#[test]
fn large_legal_tiles_still_emit() {
    let s = source(&["emit", "fig8", "--config", "BK=1024"]);
    assert!(s.contains("relayout_i6_bk1024_bn64("));
    let s = source(&["emit", "qmatmul", "--config", "BN=1024,STAGES=2"]);
    assert!(s.contains("mma.sync.aligned.m16n8k16"));
}
