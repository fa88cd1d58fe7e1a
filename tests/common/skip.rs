//! Visible skips for tests that need hardware or tools this machine may lack.
//!
//! libtest has no run-time "skipped" outcome: a test that returns early is reported as passed,
//! and what it prints is captured (shown only for failures or with `--nocapture`). So a skip is
//! reported here, outside libtest's capture, in two places:
//!
//! * one line per skipped test as it happens: `SKIPPED <test>: <reason>`;
//! * one summary line when the test binary exits, after libtest's own `test result:` line:
//!   `SKIPPED 7 of the tests above (gpu_linear): no usable GPU; libtest counted them as passed`.
//!
//! Both go straight to the process's stderr (`std::io::stderr()`, which libtest does not
//! capture, unlike `eprintln!`), so a plain `cargo test` and the device pack's `run-all.sh`
//! both show them. `TILUS_REQUIRE_GPU=1` / `TILUS_REQUIRE_NVRTC=1` turn a skip into a failure.
//!
//! Shared by the facade's test targets (`tests/common/mod.rs`) and by `tilus-runtime`'s
//! (`#[path]`), so it depends on nothing but std.
#![allow(dead_code)] // each target uses its own subset

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What a skipped test needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// A CUDA device and driver; `TILUS_REQUIRE_GPU=1` makes its absence a failure.
    Gpu,
    /// NVRTC, the CUDA headers (and for some tests ptxas / cuobjdump);
    /// `TILUS_REQUIRE_NVRTC=1` makes their absence a failure.
    Nvrtc,
    /// Python with numpy and safetensors (the checkpoint writer of `tests/checkpoint/`);
    /// `TILUS_REQUIRE_PYTHON=1` makes their absence a failure.
    Python,
}

impl Need {
    fn variable(self) -> &'static str {
        match self {
            Need::Gpu => "TILUS_REQUIRE_GPU",
            Need::Nvrtc => "TILUS_REQUIRE_NVRTC",
            Need::Python => "TILUS_REQUIRE_PYTHON",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Need::Gpu => "no usable GPU",
            Need::Nvrtc => "no usable NVRTC / CUDA compile tools",
            Need::Python => "no python with numpy and safetensors",
        }
    }

    /// Whether the environment asks for skips of this kind to fail.
    pub fn required(self) -> bool {
        std::env::var(self.variable()).is_ok_and(|v| v == "1")
    }
}

static SKIPPED: AtomicUsize = AtomicUsize::new(0);
static KINDS: Mutex<Vec<Need>> = Mutex::new(Vec::new());

/// Report that `test` skips because of `reason` (panics instead when `need` is required by the
/// environment). The caller then returns from the test.
pub fn skip(test: &str, need: Need, reason: &str) {
    if need.required() {
        panic!(
            "{test}: {}=1 but {}: {reason}",
            need.variable(),
            need.what()
        );
    }
    raw_stderr(&format!("SKIPPED {test}: {}\n", short(reason)));
    {
        let mut kinds = KINDS.lock().unwrap_or_else(|e| e.into_inner());
        if !kinds.contains(&need) {
            kinds.push(need);
        }
    }
    if SKIPPED.fetch_add(1, Ordering::SeqCst) == 0 {
        register_summary();
    }
}

/// The first sentence of `reason` on one line (the advice that follows it, e.g. how to install
/// NVRTC, is the same for every test; `tilus doctor` gives it in full).
pub fn short(reason: &str) -> String {
    let line = reason.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    match line.find(". ") {
        Some(end) => line[..end + 1].to_string(),
        None => line,
    }
}

/// The summary line for `count` skips of `kinds` in the binary `binary`.
pub fn summary(count: usize, binary: &str, kinds: &[Need]) -> String {
    let what: Vec<&str> = kinds.iter().map(|k| k.what()).collect();
    let vars: Vec<String> = kinds
        .iter()
        .map(|k| format!("{}=1", k.variable()))
        .collect();
    format!(
        "SKIPPED {count} of the tests above ({binary}): {}; libtest counted {} as passed \
         ({} to fail instead)",
        what.join(", "),
        if count == 1 { "it" } else { "them" },
        vars.join(" / ")
    )
}

/// Written with one `write_all` on the unbuffered stderr, so lines of parallel tests do not mix.
fn raw_stderr(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

extern "C" fn print_summary() {
    let count = SKIPPED.load(Ordering::SeqCst);
    let kinds = KINDS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| match s.rsplit_once('-') {
            // cargo names test binaries `<target>-<hash>`.
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
            _ => s,
        })
        .unwrap_or_else(|| "this binary".into());
    raw_stderr(&format!("{}\n", summary(count, &binary, &kinds)));
}

extern "C" {
    // The C library's `atexit` (std links it on every platform Rust tests run on). libtest returns
    // from `main` after printing its results, and the C runtime then runs this hook.
    fn atexit(hook: extern "C" fn()) -> std::ffi::c_int;
}

fn register_summary() {
    // SAFETY: `print_summary` is a plain `extern "C" fn()` that does not unwind: it only reads
    // atomics / a mutex and writes to stderr, ignoring errors.
    unsafe {
        atexit(print_summary);
    }
}
