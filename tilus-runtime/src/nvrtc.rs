//! NVRTC: loading the library without panicking, and compiling CUDA C++ to PTX or CUBIN.
//!
//! Nothing here needs a GPU, so CI uses [`compile_ptx`] and [`compile_cubin`] to check that
//! generated kernels compile. Options are fixed and few: `--gpu-architecture`, `-std=c++17`,
//! `-I<headers>` (see [`crate::discover`]), and on request `-lineinfo` and `--use_fast_math`
//! (off by default: it changes results).

use crate::discover::{self, Found};
use crate::error::{CompileFailure, Result, RuntimeError};
use cudarc::nvrtc::sys;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

/// What was loaded.
#[derive(Clone, Debug)]
pub struct NvrtcInfo {
    /// `nvrtcVersion()`, e.g. `(13, 0)`.
    pub version: (i32, i32),
    /// The file opened by absolute path, or `None` when the system loader found it by name.
    pub library: Option<Found>,
}

/// Load NVRTC once per process and return its version. A missing library is an error with a
/// hint, never a panic (cudarc panics on first use of a missing library, so this runs first).
pub fn nvrtc() -> Result<&'static NvrtcInfo> {
    static NVRTC: OnceLock<std::result::Result<NvrtcInfo, NvrtcProblem>> = OnceLock::new();
    NVRTC
        .get_or_init(load_nvrtc)
        .as_ref()
        .map_err(|problem| match problem {
            NvrtcProblem::Missing(hint) => RuntimeError::LibraryMissing {
                library: "libnvrtc.so",
                hint: hint.clone(),
            },
            NvrtcProblem::Unusable(message) => RuntimeError::Nvrtc {
                during: "loading NVRTC".into(),
                message: message.clone(),
            },
        })
}

enum NvrtcProblem {
    Missing(String),
    Unusable(String),
}

fn load_nvrtc() -> std::result::Result<NvrtcInfo, NvrtcProblem> {
    // SAFETY: opening a shared library runs its initializers; NVRTC's are benign.
    let mut library = None;
    if !crate::linking::nvrtc_present() {
        let candidates = discover::nvrtc_library_candidates();
        for cand in &candidates {
            // NVRTC opens its builtins library by name when it compiles; the loader finds it
            // only on the search path, or among loaded libraries. Load it first from beside
            // NVRTC so that a wheel-only install works without LD_LIBRARY_PATH.
            for builtins in discover::nvrtc_builtins_beside(&cand.path) {
                // SAFETY: as above.
                if let Ok(lib) = unsafe { libloading::Library::new(&builtins) } {
                    keep_loaded(lib);
                }
            }
            // SAFETY: as above.
            if let Ok(lib) = unsafe { libloading::Library::new(&cand.path) } {
                // Keep it loaded for the life of the process so that cudarc's by-name lookup
                // resolves to it (the loader matches the soname of loaded libraries).
                keep_loaded(lib);
                if crate::linking::nvrtc_present() {
                    library = Some(cand.clone());
                    break;
                }
            }
        }
        if library.is_none() {
            let tried = if candidates.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = candidates
                    .iter()
                    .map(|c| c.path.display().to_string())
                    .collect();
                format!(" (also tried: {})", list.join(", "))
            };
            return Err(NvrtcProblem::Missing(format!(
                "NVRTC, the CUDA runtime compiler, is needed to compile kernels. Install the CUDA \
                 toolkit (or put its lib64 on LD_LIBRARY_PATH), or `python3 -m pip install \
                 nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.88` and, if pip installed \
                 them outside python3's site-packages, set TILUS_PYTHON_SITE to that folder; \
                 TILUS_NVRTC_LIB may name the library file directly{tried}"
            )));
        }
    }
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: the library is present (checked above); both pointers are valid.
    let rc = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    if rc != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(NvrtcProblem::Unusable(format!(
            "the library was found but nvrtcVersion failed: {rc:?}"
        )));
    }
    // nvrtcGetCUBIN and sm_90a need NVRTC 12+; cudarc would panic on a missing entry point of
    // an older library instead of returning an error.
    if major < 12 {
        return Err(NvrtcProblem::Unusable(format!(
            "found NVRTC {major}.{minor}, but tilus needs NVRTC 12.0 or newer (13.0 recommended): \
             install a newer CUDA toolkit or the nvidia-cuda-nvrtc==13.0.88 wheel"
        )));
    }
    Ok(NvrtcInfo {
        version: (major, minor),
        library,
    })
}

fn keep_loaded(lib: libloading::Library) {
    static KEPT: std::sync::Mutex<Vec<libloading::Library>> = std::sync::Mutex::new(Vec::new());
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).push(lib);
}

/// The include directory NVRTC uses, found once per process (see [`crate::discover`]).
pub fn include_dir() -> Option<&'static Found> {
    static DIR: OnceLock<Option<Found>> = OnceLock::new();
    DIR.get_or_init(discover::include_dir).as_ref()
}

/// What to produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// PTX text for a virtual architecture (`compute_XY`); portable, JIT-compiled by the driver.
    Ptx,
    /// Machine code for one real architecture (`sm_XY`, `sm_90a`).
    Cubin,
}

/// NVRTC options. [`CompileOptions::new`] fills in the discovered include directory.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// `sm_90a`, `sm_80`, ... (`compute_XY` is accepted for PTX).
    pub arch: String,
    /// Emit line information for profilers (`-lineinfo`). Off by default.
    pub lineinfo: bool,
    /// `--use_fast_math`. Off by default: it changes numerical results.
    pub fast_math: bool,
    /// Header directories (`-I`).
    pub include_dirs: Vec<PathBuf>,
    /// Further raw options, appended last.
    pub extra: Vec<String>,
}

impl CompileOptions {
    /// Defaults for `arch`, with the discovered CUDA include directory (if any).
    pub fn new(arch: impl Into<String>) -> CompileOptions {
        CompileOptions {
            arch: arch.into(),
            lineinfo: false,
            fast_math: false,
            include_dirs: include_dir().map(|f| f.path.clone()).into_iter().collect(),
            extra: Vec::new(),
        }
    }

    /// The NVRTC argument list for `output` (this is also what the disk cache key hashes).
    pub fn args(&self, output: Output) -> Vec<String> {
        let arch = match output {
            Output::Ptx => virtual_arch(&self.arch),
            Output::Cubin => real_arch(&self.arch),
        };
        let mut args = vec![format!("--gpu-architecture={arch}"), "-std=c++17".into()];
        for dir in &self.include_dirs {
            args.push(format!("-I{}", dir.display()));
        }
        if self.lineinfo {
            args.push("-lineinfo".into());
        }
        if self.fast_math {
            args.push("--use_fast_math".into());
        }
        args.extend(self.extra.iter().cloned());
        args
    }
}

/// `sm_90a` -> `compute_90a`; `compute_80` stays.
fn virtual_arch(arch: &str) -> String {
    match arch.strip_prefix("sm_") {
        Some(rest) => format!("compute_{rest}"),
        None => arch.to_string(),
    }
}

/// `compute_90a` -> `sm_90a`; `sm_80` stays.
fn real_arch(arch: &str) -> String {
    match arch.strip_prefix("compute_") {
        Some(rest) => format!("sm_{rest}"),
        None => arch.to_string(),
    }
}

/// The NVRTC target for a device of compute capability `major.minor`: `sm_90a` on Hopper (so
/// that wgmma/setmaxnreg are available), `sm_XY` otherwise.
pub fn arch_for(major: i32, minor: i32) -> String {
    if (major, minor) == (9, 0) {
        "sm_90a".to_string()
    } else {
        format!("sm_{major}{minor}")
    }
}

/// Compile `source` to PTX for `arch` (`sm_80` or `compute_80`). Needs NVRTC, not a GPU.
pub fn compile_ptx(source: &str, arch: &str) -> Result<String> {
    let out = compile(
        "kernel",
        "",
        source,
        &CompileOptions::new(arch),
        Output::Ptx,
    )?;
    Ok(String::from_utf8_lossy(&out.image).into_owned())
}

/// Compile `source` to a CUBIN for `arch` (`sm_90a`, `sm_80`). Needs NVRTC, not a GPU.
pub fn compile_cubin(source: &str, arch: &str) -> Result<Vec<u8>> {
    Ok(compile(
        "kernel",
        "",
        source,
        &CompileOptions::new(arch),
        Output::Cubin,
    )?
    .image)
}

/// A successful compilation.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// PTX text (without the trailing NUL) or CUBIN bytes.
    pub image: Vec<u8>,
    /// NVRTC's log (warnings); usually empty.
    pub log: String,
}

/// Compile with full control. `kernel` and `config` only label errors.
pub fn compile(
    kernel: &str,
    config: &str,
    source: &str,
    opts: &CompileOptions,
    output: Output,
) -> Result<Compiled> {
    nvrtc()?;
    let invalid = |reason: String| RuntimeError::InvalidKernel {
        kernel: kernel.to_string(),
        reason,
    };
    let src = CString::new(source).map_err(|_| invalid("source contains a NUL byte".into()))?;
    let name = CString::new(program_name(kernel)).expect("sanitized name has no NUL");
    let args = opts.args(output);
    let c_args = args
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| invalid("an NVRTC option contains a NUL byte".into()))?;
    let arg_ptrs: Vec<*const c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    let nvrtc_err = |during: &str, rc: sys::nvrtcResult| RuntimeError::Nvrtc {
        during: format!("{during} for kernel `{kernel}`"),
        message: format!("{rc:?}"),
    };

    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NVRTC is loaded; `src` and `name` outlive the program (dropped after `Program`).
    let rc = unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(nvrtc_err("creating the NVRTC program", rc));
    }
    let prog = Program(prog);
    // SAFETY: valid program; the option strings outlive the call.
    let rc =
        unsafe { sys::nvrtcCompileProgram(prog.0, arg_ptrs.len() as c_int, arg_ptrs.as_ptr()) };
    let log = prog.log();
    match rc {
        sys::nvrtcResult::NVRTC_SUCCESS => {}
        sys::nvrtcResult::NVRTC_ERROR_COMPILATION
        | sys::nvrtcResult::NVRTC_ERROR_INVALID_OPTION => {
            let program = program_name(kernel);
            let line = first_error_line(&log, &program);
            return Err(RuntimeError::Compile(Box::new(CompileFailure {
                kernel: kernel.to_string(),
                config: config.to_string(),
                arch: opts.arch.clone(),
                excerpt: line.map(|l| excerpt(source, l, 3)).unwrap_or_default(),
                line,
                log: if log.trim().is_empty() {
                    format!("{rc:?} (options: {})", args.join(" "))
                } else {
                    log
                },
            })));
        }
        sys::nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE => {
            return Err(RuntimeError::Nvrtc {
                during: format!("compiling kernel `{kernel}`"),
                message: format!(
                    "NVRTC could not use its builtins library (libnvrtc-builtins.so, which must \
                     sit beside libnvrtc or on LD_LIBRARY_PATH): {}",
                    log.trim()
                ),
            })
        }
        rc => {
            return Err(RuntimeError::Nvrtc {
                during: format!("compiling kernel `{kernel}`"),
                message: format!("{rc:?} {}", log.trim()),
            })
        }
    }
    let image = match output {
        Output::Ptx => prog.ptx(),
        Output::Cubin => prog.cubin(),
    }
    .map_err(|rc| nvrtc_err("reading the compiled image", rc))?;
    Ok(Compiled { image, log })
}

/// Owns an `nvrtcProgram` and destroys it on drop.
struct Program(sys::nvrtcProgram);

impl Program {
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: valid program and out-pointer.
        if unsafe { sys::nvrtcGetProgramLogSize(self.0, &mut size) }
            != sys::nvrtcResult::NVRTC_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds `size` bytes as NVRTC asked for.
        if unsafe { sys::nvrtcGetProgramLog(self.0, buf.as_mut_ptr().cast()) }
            != sys::nvrtcResult::NVRTC_SUCCESS
        {
            return String::new();
        }
        c_bytes_to_string(&buf)
    }

    fn ptx(&self) -> std::result::Result<Vec<u8>, sys::nvrtcResult> {
        let mut size = 0usize;
        // SAFETY: valid program and out-pointer.
        check(unsafe { sys::nvrtcGetPTXSize(self.0, &mut size) })?;
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds `size` bytes.
        check(unsafe { sys::nvrtcGetPTX(self.0, buf.as_mut_ptr().cast()) })?;
        // Drop the trailing NUL (and anything after it).
        if let Some(end) = buf.iter().position(|&b| b == 0) {
            buf.truncate(end);
        }
        Ok(buf)
    }

    fn cubin(&self) -> std::result::Result<Vec<u8>, sys::nvrtcResult> {
        let mut size = 0usize;
        // SAFETY: valid program and out-pointer.
        check(unsafe { sys::nvrtcGetCUBINSize(self.0, &mut size) })?;
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds `size` bytes.
        check(unsafe { sys::nvrtcGetCUBIN(self.0, buf.as_mut_ptr().cast()) })?;
        Ok(buf)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed only here.
        unsafe {
            sys::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

fn check(rc: sys::nvrtcResult) -> std::result::Result<(), sys::nvrtcResult> {
    match rc {
        sys::nvrtcResult::NVRTC_SUCCESS => Ok(()),
        rc => Err(rc),
    }
}

fn c_bytes_to_string(buf: &[u8]) -> String {
    match CStr::from_bytes_until_nul(buf) {
        Ok(s) => s.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(buf).into_owned(),
    }
}

/// The file name NVRTC reports errors against: the kernel name, made file-name safe.
pub(crate) fn program_name(kernel: &str) -> String {
    let stem: String = kernel
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let stem = if stem.is_empty() {
        "kernel".into()
    } else {
        stem
    };
    format!("{stem}.cu")
}

/// The first line number in `log` of an error in `program` (`name.cu(12): error: ...`).
pub fn first_error_line(log: &str, program: &str) -> Option<usize> {
    log.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(program)?.strip_prefix('(')?;
        let close = rest.find(')')?;
        let number: usize = rest[..close].parse().ok()?;
        let after = rest[close + 1..]
            .trim_start()
            .strip_prefix(':')?
            .trim_start();
        (after.starts_with("error") || after.starts_with("catastrophic error")).then_some(number)
    })
}

/// Lines `line - context ..= line + context` of `source`, numbered, the error line marked `>`.
pub fn excerpt(source: &str, line: usize, context: usize) -> String {
    let lines: Vec<&str> = source.lines().collect();
    if line == 0 || line > lines.len() {
        return String::new();
    }
    let first = line.saturating_sub(context).max(1);
    let last = (line + context).min(lines.len());
    let width = last.to_string().len();
    let mut out = String::new();
    for n in first..=last {
        let mark = if n == line { '>' } else { ' ' };
        out.push_str(&format!("{mark} {n:>width$} | {}\n", lines[n - 1]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_mapping() {
        assert_eq!(arch_for(9, 0), "sm_90a");
        assert_eq!(arch_for(8, 0), "sm_80");
        assert_eq!(arch_for(8, 9), "sm_89");
        assert_eq!(arch_for(10, 0), "sm_100");
        assert_eq!(virtual_arch("sm_90a"), "compute_90a");
        assert_eq!(virtual_arch("compute_80"), "compute_80");
        assert_eq!(real_arch("compute_80"), "sm_80");
    }

    #[test]
    fn options_are_stable_and_complete() {
        let mut o = CompileOptions::new("sm_90a");
        o.include_dirs = vec!["/x/include".into()];
        assert_eq!(
            o.args(Output::Cubin),
            ["--gpu-architecture=sm_90a", "-std=c++17", "-I/x/include"]
        );
        o.lineinfo = true;
        o.fast_math = true;
        o.extra = vec!["-DFOO=1".into()];
        assert_eq!(
            o.args(Output::Ptx),
            [
                "--gpu-architecture=compute_90a",
                "-std=c++17",
                "-I/x/include",
                "-lineinfo",
                "--use_fast_math",
                "-DFOO=1"
            ]
        );
    }

    #[test]
    fn program_names_are_file_safe() {
        assert_eq!(program_name("matmul_f16_i6"), "matmul_f16_i6.cu");
        assert_eq!(program_name("a/b c"), "a_b_c.cu");
        assert_eq!(program_name(""), "kernel.cu");
    }

    #[test]
    fn finds_first_error_in_our_file_only() {
        let log = "/usr/local/cuda/include/cuda_fp16.hpp(10): error: something in a header\n\
                   mm.cu(7): warning #177-D: variable \"x\" was declared but never referenced\n\
                   mm.cu(12): error: identifier \"y\" is undefined\n\
                   mm.cu(15): error: expected a \";\"\n\
                   2 errors detected in the compilation of \"mm.cu\".";
        assert_eq!(first_error_line(log, "mm.cu"), Some(12));
        assert_eq!(first_error_line(log, "other.cu"), None);
        assert_eq!(
            first_error_line(
                "k.cu(3): catastrophic error: cannot open source file \"x.h\"",
                "k.cu"
            ),
            Some(3)
        );
    }

    #[test]
    fn excerpt_marks_the_line() {
        let src = (1..=20)
            .map(|i| format!("line{i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let ex = excerpt(&src, 10, 2);
        assert_eq!(
            ex,
            "   8 | line8\n   9 | line9\n> 10 | line10\n  11 | line11\n  12 | line12\n"
        );
        assert_eq!(
            excerpt(&src, 1, 2),
            "> 1 | line1\n  2 | line2\n  3 | line3\n"
        );
        assert_eq!(excerpt(&src, 99, 2), "");
    }
}
