//! NVRTC compile checks: no GPU needed, only the NVRTC library and CUDA headers.
//!
//! Without NVRTC (a plain `cargo test` on a machine with no CUDA) each test reports `SKIPPED`
//! with the reason and passes (the facade's `tests/common/skip.rs`, shared by path). With
//! `TILUS_REQUIRE_NVRTC=1` (set by `.ci/run`, which installs the pip wheels) a missing NVRTC or
//! missing headers fail the test instead.

// The facade's skip reporter, shared by path (it depends on nothing but std).
#[path = "../../tests/common/skip.rs"]
mod skip;

use skip::{skip, Need};
use std::path::PathBuf;
use std::process::Command;
use tilus_runtime::nvrtc::{self, CompileOptions, Output};
use tilus_runtime::{compile_cubin, compile_ptx, discover, RuntimeError};

const ADD_F16: &str = r#"
#include <cuda_fp16.h>

extern "C" __global__ void add_f16(int n, const __half* __restrict__ a,
                                   const __half* __restrict__ b, __half* __restrict__ c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = __hadd(a[i], b[i]);
    }
}
"#;

fn required() -> bool {
    std::env::var("TILUS_REQUIRE_NVRTC").is_ok_and(|v| v == "1")
}

/// True when NVRTC and the CUDA headers are usable; otherwise prints why and returns false, or
/// panics when they are required.
fn nvrtc_ready(test: &str) -> bool {
    let problem = match nvrtc::nvrtc() {
        Err(e) => e.to_string(),
        Ok(info) => match nvrtc::include_dir() {
            Some(inc) => {
                eprintln!(
                    "{test}: NVRTC {}.{} ({}), headers {} (via {})",
                    info.version.0,
                    info.version.1,
                    info.library
                        .as_ref()
                        .map(|f| format!("{} via {}", f.path.display(), f.via))
                        .unwrap_or_else(|| "found by the system loader".into()),
                    inc.path.display(),
                    inc.via
                );
                return true;
            }
            None => "NVRTC is present but no CUDA include directory (with cuda_fp16.h) was \
                     found; set TILUS_CUDA_INCLUDE or TILUS_PYTHON_SITE"
                .to_string(),
        },
    };
    skip(test, Need::Nvrtc, &problem);
    false
}

#[test]
fn f16_kernel_to_ptx_for_sm80() {
    if !nvrtc_ready("f16_kernel_to_ptx_for_sm80") {
        return;
    }
    let ptx = compile_ptx(ADD_F16, "sm_80").expect("compiles");
    assert!(ptx.contains(".target sm_80"), "{ptx}");
    assert!(ptx.contains(".visible .entry add_f16("), "{ptx}");
    assert!(
        ptx.contains("add.f16") || ptx.contains("add.rn.f16"),
        "{ptx}"
    );

    // Assemble it with ptxas when the tool is there (the nvcc wheel in CI).
    match discover::cuda_tool("ptxas") {
        Some(ptxas) => {
            let dir = std::env::temp_dir().join(format!("tilus-ptxas-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let (ptx_file, cubin_file) = (dir.join("add.ptx"), dir.join("add.cubin"));
            std::fs::write(&ptx_file, &ptx).unwrap();
            let out = Command::new(&ptxas.path)
                .args(["-arch=sm_80", "-o"])
                .arg(&cubin_file)
                .arg(&ptx_file)
                .output()
                .expect("ptxas runs");
            assert!(
                out.status.success(),
                "ptxas failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(std::fs::read(&cubin_file).unwrap().starts_with(b"\x7fELF"));
            std::fs::remove_dir_all(&dir).unwrap();
        }
        None if required() => panic!("TILUS_REQUIRE_NVRTC=1 but ptxas was not found"),
        None => eprintln!("ptxas not found: PTX not assembled"),
    }
}

#[test]
fn f16_kernel_to_cubin_for_sm90a() {
    if !nvrtc_ready("f16_kernel_to_cubin_for_sm90a") {
        return;
    }
    let cubin = compile_cubin(ADD_F16, "sm_90a").expect("compiles");
    assert!(cubin.starts_with(b"\x7fELF"), "a CUBIN is an ELF file");
    assert!(
        cubin.windows(7).any(|w| w == b"add_f16"),
        "the entry symbol is in the CUBIN"
    );
}

#[test]
fn compile_error_names_kernel_config_and_quotes_source() {
    if !nvrtc_ready("compile_error_names_kernel_config_and_quotes_source") {
        return;
    }
    let src = "#include <cuda_fp16.h>\n\
               extern \"C\" __global__ void broken(float* x) {\n\
               \x20   int i = threadIdx.x;\n\
               \x20   x[i] = undefined_name * 2.0f;\n\
               }\n";
    let opts = CompileOptions::new("sm_90a");
    let err = nvrtc::compile("matmul_f16_i6", "BM=16,BN=64", src, &opts, Output::Cubin)
        .expect_err("must not compile");
    let RuntimeError::Compile(failure) = &err else {
        panic!("expected a compile error, got {err:?}");
    };
    assert_eq!(failure.line, Some(4), "log was: {}", failure.log);
    assert!(failure.log.contains("undefined_name"), "{}", failure.log);
    assert!(failure.excerpt.contains(">"), "{}", failure.excerpt);
    assert!(failure.excerpt.contains("undefined_name * 2.0f"));
    let msg = err.to_string();
    for needle in [
        "matmul_f16_i6",
        "BM=16,BN=64",
        "sm_90a",
        "source around line 4",
        "undefined_name",
    ] {
        assert!(msg.contains(needle), "missing {needle:?} in:\n{msg}");
    }
    eprintln!("{msg}");
}

#[test]
fn missing_header_and_bad_source_are_errors() {
    if !nvrtc_ready("missing_header_and_bad_source_are_errors") {
        return;
    }
    let err = compile_ptx("#include <no_such_header.h>\n", "sm_80").unwrap_err();
    assert!(matches!(err, RuntimeError::Compile(_)), "{err:?}");
    assert!(err.to_string().contains("no_such_header.h"), "{err}");

    let err = compile_ptx("extern \"C\" __global__ void k() {}\0", "sm_80").unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidKernel { .. }), "{err:?}");

    let err = compile_cubin("extern \"C\" __global__ void k() {}", "sm_1").unwrap_err();
    assert!(matches!(err, RuntimeError::Compile(_)), "{err:?}");
}

#[test]
fn options_reach_nvrtc() {
    if !nvrtc_ready("options_reach_nvrtc") {
        return;
    }
    // A macro that only an -D option defines: compiles with it, fails without.
    let src = "extern \"C\" __global__ void k(float* x) { x[0] = TILUS_TEST_VALUE; }";
    let mut opts = CompileOptions::new("sm_80");
    assert!(nvrtc::compile("k", "", src, &opts, Output::Ptx).is_err());
    opts.extra.push("-DTILUS_TEST_VALUE=3.5f".into());
    opts.lineinfo = true;
    let ptx = nvrtc::compile("k", "", src, &opts, Output::Ptx).expect("compiles");
    let ptx = String::from_utf8(ptx.image).unwrap();
    // 3.5f is 0x40600000 = 1080033280.
    assert!(
        ptx.contains("1080033280") || ptx.contains("0f40600000"),
        "3.5f in PTX: {ptx}"
    );
    assert!(ptx.contains(".loc"), "-lineinfo emits .loc: {ptx}");
}

#[test]
fn include_dir_is_a_cuda_include_dir() {
    if !nvrtc_ready("include_dir_is_a_cuda_include_dir") {
        return;
    }
    let inc: PathBuf = nvrtc::include_dir().unwrap().path.clone();
    assert!(inc.join("cuda_fp16.h").is_file());
    assert!(inc.join("cuda_bf16.h").is_file());
}
