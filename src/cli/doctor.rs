//! `tilus doctor [--strict]`: is this machine set up to compile and run tilus kernels?
//!
//! One line per check, each `ok`, `warn` or `FAIL` followed by what was found or what to do:
//! driver, GPU(s), NVRTC, CUDA headers, a test compile, the kernel cache directory, and (for
//! information) `ptxas`.
//!
//! Severity and exit status:
//! * A machine without an NVIDIA driver or GPU is a **warning**, not a failure: CI and laptops
//!   still build, test through the CPU interpreter and compile kernels with NVRTC.
//! * Missing NVRTC or CUDA headers are warnings without a GPU and **failures** with one (kernels
//!   cannot run). A driver too old for CUDA 13.0, a driver call that fails, or a test compile
//!   that fails are failures. An unusable cache directory is a warning (kernels are then cached
//!   in memory only).
//! * Exit status 0 when nothing failed (warnings allowed), 1 when something failed; with
//!   `--strict` warnings also give 1.
//!
//! Doctor never panics: each check runs under `catch_unwind` and a panic in one is reported as
//! a failure of that check.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;
use tilus_runtime::disk_cache;
use tilus_runtime::{discover, nvrtc, RuntimeError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Info,
    Ok,
    Warn,
    Fail,
}

#[derive(Clone, Debug)]
pub struct Check {
    pub level: Level,
    pub what: String,
    pub detail: String,
}

fn check(level: Level, what: impl Into<String>, detail: impl Into<String>) -> Check {
    Check {
        level,
        what: what.into(),
        detail: detail.into(),
    }
}

/// Run every check. Never panics.
pub fn checks() -> Vec<Check> {
    let mut out = Vec::new();

    // Driver and devices.
    let mut gpu_arch: Option<String> = None;
    let mut have_gpu = false;
    guarded(
        &mut out,
        "driver",
        |out| match tilus_runtime::driver_version() {
            Ok(v) => {
                out.push(check(
                    Level::Ok,
                    "driver",
                    format!(
                        "NVIDIA driver supporting CUDA {}.{}",
                        v / 1000,
                        (v % 1000) / 10
                    ),
                ));
                devices(out, &mut gpu_arch, &mut have_gpu);
            }
            Err(e @ RuntimeError::DriverTooOld { .. }) => {
                out.push(check(Level::Fail, "driver", e.to_string()))
            }
            // No driver library, or the toolkit's stub: a machine without a GPU.
            Err(e) if e.is_unavailable() => out.push(check(Level::Warn, "driver", e.to_string())),
            Err(e) => out.push(check(Level::Fail, "driver", e.to_string())),
        },
    );

    // NVRTC, headers, and a test compile. Missing pieces only fail where there is a GPU.
    let missing = if have_gpu { Level::Fail } else { Level::Warn };
    let mut nvrtc_ok = false;
    guarded(&mut out, "nvrtc", |out| match nvrtc::nvrtc() {
        Ok(info) => {
            nvrtc_ok = true;
            let origin = match &info.library {
                Some(f) => format!("{} (via {})", f.path.display(), f.via),
                None => "found by the system loader".into(),
            };
            out.push(check(
                Level::Ok,
                "nvrtc",
                format!("NVRTC {}.{}, {origin}", info.version.0, info.version.1),
            ));
        }
        Err(e) => out.push(check(missing, "nvrtc", e.to_string())),
    });
    let mut headers_ok = false;
    guarded(&mut out, "headers", |out| match nvrtc::include_dir() {
        Some(dir) => {
            headers_ok = true;
            out.push(check(
                Level::Ok,
                "headers",
                format!("{} (via {})", dir.path.display(), dir.via),
            ));
        }
        None => {
            let tried: Vec<String> = discover::include_candidates(true)
                .iter()
                .map(|f| f.path.display().to_string())
                .collect();
            out.push(check(
                missing,
                "headers",
                format!(
                    "no CUDA include directory with cuda_fp16.h. Set TILUS_CUDA_INCLUDE, or install \
                     the CUDA toolkit, or `python3 -m pip install nvidia-cuda-runtime==13.0.88` \
                     (and TILUS_PYTHON_SITE if pip installed it outside python3's site-packages). \
                     Tried: {}",
                    if tried.is_empty() { "nothing".into() } else { tried.join(", ") }
                ),
            ));
        }
    });
    if nvrtc_ok && headers_ok {
        let arch = gpu_arch.clone().unwrap_or_else(|| "sm_90a".into());
        guarded(&mut out, "compile", |out| {
            let src = "#include <cuda_fp16.h>\n\
                       extern \"C\" __global__ void doctor(__half* x) { x[threadIdx.x] = __float2half(1.0f); }\n";
            let t = Instant::now();
            match tilus_runtime::compile_cubin(src, &arch) {
                Ok(_) => out.push(check(
                    Level::Ok,
                    "compile",
                    format!(
                        "test kernel compiled for {arch} in {:.0} ms",
                        t.elapsed().as_secs_f64() * 1e3
                    ),
                )),
                Err(e) => out.push(check(Level::Fail, "compile", e.to_string())),
            }
        });
    }

    guarded(&mut out, "cache", cache);

    guarded(&mut out, "ptxas", |out| {
        match discover::cuda_tool("ptxas") {
        Some(f) => out.push(check(
            Level::Info,
            "ptxas",
            format!("{} (via {})", f.path.display(), f.via),
        )),
        None => out.push(check(
            Level::Info,
            "ptxas",
            "not found; only needed for offline SASS checks (pip install nvidia-cuda-nvcc==13.0.88)",
        )),
    }
    });
    out
}

fn devices(out: &mut Vec<Check>, gpu_arch: &mut Option<String>, have_gpu: &mut bool) {
    let count = match tilus_runtime::device_count() {
        Ok(n) => n,
        Err(e) => {
            let level = if e.is_unavailable() {
                Level::Warn
            } else {
                Level::Fail
            };
            out.push(check(level, "gpu", e.to_string()));
            return;
        }
    };
    if count == 0 {
        let hint = match std::env::var("CUDA_VISIBLE_DEVICES") {
            Ok(v) => format!(" (CUDA_VISIBLE_DEVICES={v})"),
            Err(_) => String::new(),
        };
        out.push(check(
            Level::Warn,
            "gpu",
            format!("the driver sees no device{hint}"),
        ));
        return;
    }
    for ordinal in 0..count {
        let what = format!("gpu {ordinal}");
        // The disk cache is checked on its own below.
        match tilus_runtime::Context::builder(ordinal)
            .no_disk_cache()
            .build()
        {
            Ok(ctx) => {
                let d = ctx.device();
                *have_gpu = true;
                gpu_arch.get_or_insert_with(|| d.arch.clone());
                out.push(check(
                    Level::Ok,
                    what,
                    format!(
                        "{}, compute capability {}.{} (compiles for {}), {} SMs, {:.1} GiB, \
                         {} KiB shared memory per block",
                        d.name,
                        d.compute_capability.0,
                        d.compute_capability.1,
                        d.arch,
                        d.multiprocessors,
                        d.total_memory as f64 / (1u64 << 30) as f64,
                        d.smem_per_block_optin / 1024
                    ),
                ));
            }
            Err(e) => out.push(check(Level::Fail, what, e.to_string())),
        }
    }
}

fn cache(out: &mut Vec<Check>) {
    if disk_cache::env_disables_cache() {
        out.push(check(
            Level::Ok,
            "cache",
            "disk cache disabled by TILUS_CACHE; kernels compile once per process",
        ));
        return;
    }
    let Some(dir) = disk_cache::default_dir() else {
        out.push(check(
            Level::Warn,
            "cache",
            "no user cache directory; set TILUS_CACHE_DIR (kernels are cached in memory only)",
        ));
        return;
    };
    // Probe with a real atomic write, the same way entries are written.
    let probe = format!(".doctor-probe-{}", std::process::id());
    match disk_cache::write_atomic(&dir, &probe, b"probe") {
        Ok(()) => {
            let _ = std::fs::remove_file(dir.join(&probe));
            let entries = std::fs::read_dir(&dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .filter(|e| e.path().extension().is_some_and(|x| x == "cubin"))
                        .count()
                })
                .unwrap_or(0);
            out.push(check(
                Level::Ok,
                "cache",
                format!("{} (writable, {entries} cached kernels)", dir.display()),
            ));
        }
        Err(e) => out.push(check(
            Level::Warn,
            "cache",
            format!(
                "{} is not writable ({e}); kernels will be cached in memory only. Set \
                 TILUS_CACHE_DIR to a writable directory or TILUS_CACHE=off",
                dir.display()
            ),
        )),
    }
}

/// Run `f`, turning a panic into a failed check named `what`.
fn guarded(out: &mut Vec<Check>, what: &str, f: impl FnOnce(&mut Vec<Check>)) {
    let mut local = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut local)));
    out.append(&mut local);
    if let Err(payload) = result {
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        out.push(check(
            Level::Fail,
            what,
            format!("internal error (please report): {msg}"),
        ));
    }
}

/// The report as printed.
pub fn render(checks: &[Check]) -> String {
    let mut s = String::new();
    let width = checks.iter().map(|c| c.what.len()).max().unwrap_or(0);
    for c in checks {
        let tag = match c.level {
            Level::Info => "info",
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        let _ = writeln!(s, "{tag:<4}  {:<width$}  {}", c.what, c.detail);
    }
    let fails = checks.iter().filter(|c| c.level == Level::Fail).count();
    let warns = checks.iter().filter(|c| c.level == Level::Warn).count();
    let _ = match (fails, warns) {
        (0, 0) => write!(s, "all checks passed"),
        (0, w) => write!(s, "{w} warning(s), no failures"),
        (f, w) => write!(s, "{f} failure(s), {w} warning(s)"),
    };
    s
}

/// 0 when nothing failed (and, with `strict`, nothing warned), else 1.
pub fn exit_code(checks: &[Check], strict: bool) -> u8 {
    let worst = checks.iter().map(|c| c.level).max().unwrap_or(Level::Ok);
    match worst {
        Level::Fail => 1,
        Level::Warn if strict => 1,
        _ => 0,
    }
}

/// `tilus doctor`.
pub fn run(strict: bool) -> ExitCode {
    // Panics are caught per check; keep the default hook from printing them as well.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let checks = checks();
    std::panic::set_hook(hook);
    // Not println!: a closed pipe (`tilus doctor | head -1`) must not panic.
    let _ = writeln!(std::io::stdout(), "{}", render(&checks));
    ExitCode::from(exit_code(&checks, strict))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_runs_anywhere() {
        let checks = checks();
        let names: Vec<&str> = checks.iter().map(|c| c.what.as_str()).collect();
        for needed in ["driver", "nvrtc", "headers", "cache", "ptxas"] {
            assert!(names.contains(&needed), "{names:?}");
        }
        let text = render(&checks);
        assert!(text.lines().count() >= 5, "{text}");
    }

    #[test]
    fn exit_codes() {
        let ok = check(Level::Ok, "a", "");
        let warn = check(Level::Warn, "b", "");
        let fail = check(Level::Fail, "c", "");
        let info = check(Level::Info, "d", "");
        assert_eq!(exit_code(&[ok.clone(), info.clone()], true), 0);
        assert_eq!(exit_code(&[ok.clone(), warn.clone()], false), 0);
        assert_eq!(exit_code(&[ok.clone(), warn.clone()], true), 1);
        assert_eq!(exit_code(&[warn, fail.clone()], false), 1);
        assert!(render(&[ok, fail]).ends_with("1 failure(s), 0 warning(s)"));
    }

    #[test]
    fn panics_become_failures() {
        let mut out = Vec::new();
        guarded(&mut out, "boom", |_| panic!("kaboom"));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].level, Level::Fail);
        assert!(out[0].detail.contains("kaboom"));
    }
}
