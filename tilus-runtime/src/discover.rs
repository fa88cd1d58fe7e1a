//! Finding the CUDA pieces the runtime needs at run time: the headers NVRTC compiles against and
//! the NVRTC library itself. Nothing here needs a GPU.
//!
//! Header directories are tried in this order; the first that holds `cuda_fp16.h` wins:
//!
//! 1. `$TILUS_CUDA_INCLUDE` (a directory to use as is),
//! 2. `$CUDA_PATH/include`, 3. `$CUDA_HOME/include`, 4. `/usr/local/cuda/include`,
//! 5. Python wheels: `nvidia/cu13/include`, `nvidia/cuda_runtime/include` and
//!    `nvidia/cuda_nvrtc/include` under each Python site directory.
//!
//! Python site directories are `$TILUS_PYTHON_SITE` (a `:`-separated list; `pip install
//! --target DIR` makes such a folder) followed by what `python3` reports (`site` module), asked
//! once per process and only when the earlier places came up empty.
//!
//! The NVRTC library is first looked up by name by the system loader (`LD_LIBRARY_PATH`,
//! `ldconfig`). When that fails, the runtime opens it by absolute path from, in order,
//! `$TILUS_NVRTC_LIB` (the library file), `lib64`/`lib` of the toolkit roots above, then the
//! wheels' `nvidia/cu13/lib` and `nvidia/cuda_nvrtc/lib`. A library opened by path stays loaded,
//! and the loader then resolves later by-name look-ups (cudarc's) to it through its soname.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A directory or file the discovery produced, and how it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    /// Where the path came from, e.g. `TILUS_CUDA_INCLUDE`, `CUDA_HOME`, `python wheel`.
    pub via: String,
}

impl Found {
    fn new(path: impl Into<PathBuf>, via: impl Into<String>) -> Self {
        Found {
            path: path.into(),
            via: via.into(),
        }
    }
}

const WHEEL_INCLUDE_DIRS: [&str; 3] = [
    "nvidia/cu13/include",
    "nvidia/cuda_runtime/include",
    "nvidia/cuda_nvrtc/include",
];
const WHEEL_LIB_DIRS: [&str; 2] = ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"];

fn env_path(name: &str) -> Option<PathBuf> {
    env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Toolkit root directories from the environment and the usual install location, in order.
fn toolkit_roots() -> Vec<Found> {
    let mut roots = Vec::new();
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        if let Some(p) = env_path(var) {
            roots.push(Found::new(p, var));
        }
    }
    roots.push(Found::new("/usr/local/cuda", "/usr/local/cuda"));
    roots
}

/// Python site directories: `$TILUS_PYTHON_SITE` entries, then (if `ask_python`) those that
/// `python3` reports. Only existing directories are returned.
pub fn python_site_dirs(ask_python: bool) -> Vec<Found> {
    let mut dirs = Vec::new();
    if let Some(list) = env::var_os("TILUS_PYTHON_SITE") {
        for p in env::split_paths(&list) {
            if p.is_dir() {
                dirs.push(Found::new(p, "TILUS_PYTHON_SITE"));
            }
        }
    }
    if ask_python {
        for p in python_reported_sites() {
            if p.is_dir() && !dirs.iter().any(|d| d.path == *p) {
                dirs.push(Found::new(p.clone(), "python3 site-packages"));
            }
        }
    }
    dirs
}

/// The site directories `python3` reports, asked once per process. Empty when there is no
/// `python3` or it fails.
fn python_reported_sites() -> &'static [PathBuf] {
    static SITES: OnceLock<Vec<PathBuf>> = OnceLock::new();
    SITES.get_or_init(|| {
        let script = "import site\n\
                      dirs = list(site.getsitepackages())\n\
                      dirs.append(site.getusersitepackages())\n\
                      print('\\n'.join(dirs))";
        match Command::new("python3").arg("-c").arg(script).output() {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(PathBuf::from)
                .collect(),
            _ => Vec::new(),
        }
    })
}

/// Every place the header search looks at, in order (existing or not), without asking Python.
/// `tilus doctor` prints these when nothing is found.
pub fn include_candidates(ask_python: bool) -> Vec<Found> {
    let mut out = Vec::new();
    if let Some(p) = env_path("TILUS_CUDA_INCLUDE") {
        out.push(Found::new(p, "TILUS_CUDA_INCLUDE"));
    }
    for root in toolkit_roots() {
        out.push(Found::new(root.path.join("include"), root.via));
    }
    for site in python_site_dirs(ask_python) {
        for sub in WHEEL_INCLUDE_DIRS {
            out.push(Found::new(
                site.path.join(sub),
                format!("python wheel ({})", site.via),
            ));
        }
    }
    out
}

fn has_cuda_headers(dir: &Path) -> bool {
    dir.join("cuda_fp16.h").is_file()
}

/// The CUDA include directory NVRTC should use: the first candidate that holds `cuda_fp16.h`.
/// Python is asked only when no earlier candidate matched.
pub fn include_dir() -> Option<Found> {
    let pick = |c: Vec<Found>| c.into_iter().find(|f| has_cuda_headers(&f.path));
    pick(include_candidates(false)).or_else(|| pick(include_candidates(true)))
}

/// A CUDA command-line tool (`ptxas`, `cuobjdump`, `nvdisasm`) for compile-only checks:
/// `bin/` of the toolkit roots, then the wheels' `nvidia/cu13/bin` (and
/// `nvidia/cuda_nvcc/bin`, `nvidia/cuda_cuobjdump/bin`, `nvidia/cuda_nvdisasm/bin` of CUDA 12
/// wheels), then `PATH`.
pub fn cuda_tool(name: &str) -> Option<Found> {
    let mut dirs: Vec<Found> = toolkit_roots()
        .into_iter()
        .map(|r| Found::new(r.path.join("bin"), r.via))
        .collect();
    for site in python_site_dirs(true) {
        for sub in [
            "nvidia/cu13/bin",
            "nvidia/cuda_nvcc/bin",
            "nvidia/cuda_cuobjdump/bin",
            "nvidia/cuda_nvdisasm/bin",
        ] {
            dirs.push(Found::new(
                site.path.join(sub),
                format!("python wheel ({})", site.via),
            ));
        }
    }
    if let Some(path) = env::var_os("PATH") {
        dirs.extend(env::split_paths(&path).map(|p| Found::new(p, "PATH")));
    }
    dirs.into_iter()
        .map(|d| Found::new(d.path.join(name), d.via))
        .find(|f| f.path.is_file())
}

/// Absolute library files to try, in order, when the system loader cannot find NVRTC by name.
pub fn nvrtc_library_candidates() -> Vec<Found> {
    let mut out = Vec::new();
    if let Some(p) = env_path("TILUS_NVRTC_LIB") {
        out.push(Found::new(p, "TILUS_NVRTC_LIB"));
    }
    let mut dirs: Vec<Found> = Vec::new();
    for root in toolkit_roots() {
        for lib in ["lib64", "lib"] {
            dirs.push(Found::new(root.path.join(lib), root.via.clone()));
        }
    }
    for site in python_site_dirs(true) {
        for sub in WHEEL_LIB_DIRS {
            dirs.push(Found::new(
                site.path.join(sub),
                format!("python wheel ({})", site.via),
            ));
        }
    }
    for dir in dirs {
        for file in nvrtc_files_in(&dir.path) {
            out.push(Found::new(file, dir.via.clone()));
        }
    }
    out
}

/// `libnvrtc-builtins.so.*` files in the directory of `nvrtc` (not the `.alt` variants).
pub fn nvrtc_builtins_beside(nvrtc: &Path) -> Vec<PathBuf> {
    let Some(dir) = nvrtc.parent() else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("libnvrtc-builtins.so"))
            .map(|n| dir.join(n))
            .collect(),
        Err(_) => Vec::new(),
    };
    found.sort();
    found
}

/// NVRTC library files in `dir`, best first: the CUDA 13 soname, then other versions.
fn nvrtc_files_in(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| is_nvrtc_library_name(n))
            .collect(),
        Err(_) => return Vec::new(),
    };
    names.sort_by_key(|n| (nvrtc_name_rank(n), n.clone()));
    names.into_iter().map(|n| dir.join(n)).collect()
}

/// `libnvrtc.so`, `libnvrtc.so.13`, `libnvrtc.so.13.0.88`, not `libnvrtc-builtins*` or
/// `libnvrtc.alt*` or static archives.
fn is_nvrtc_library_name(name: &str) -> bool {
    name == "libnvrtc.so" || name.starts_with("libnvrtc.so.")
}

fn nvrtc_name_rank(name: &str) -> u8 {
    if name == "libnvrtc.so.13" {
        0
    } else if name.starts_with("libnvrtc.so.13") {
        1
    } else if name == "libnvrtc.so" {
        2
    } else {
        3
    }
}

/// Open cuBLAS (and cuBLASLt, which it links against) by absolute path from the toolkit or the
/// `nvidia-cublas` wheel when the system loader cannot find them by name. Once loaded, cudarc's
/// by-name lookup (`libcublas.so.13`) matches the library's soname and finds it.
pub fn preload_cublas() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if unsafe { libloading::Library::new("libcublas.so.13") }.is_ok() {
            return;
        }
        let mut dirs: Vec<PathBuf> = Vec::new();
        for root in toolkit_roots() {
            dirs.push(root.path.join("lib64"));
            dirs.push(root.path.join("lib"));
        }
        for site in python_site_dirs(true) {
            dirs.push(site.path.join("nvidia/cu13/lib"));
            dirs.push(site.path.join("nvidia/cublas/lib"));
        }
        for name in ["libcublasLt.so.13", "libcublas.so.13"] {
            for dir in &dirs {
                let path = dir.join(name);
                if path.is_file() {
                    if let Ok(lib) = unsafe { libloading::Library::new(&path) } {
                        // Kept for the life of the process, like NVRTC.
                        std::mem::forget(lib);
                        break;
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_names() {
        assert!(is_nvrtc_library_name("libnvrtc.so.13"));
        assert!(is_nvrtc_library_name("libnvrtc.so"));
        assert!(!is_nvrtc_library_name("libnvrtc-builtins.so.13.0"));
        assert!(!is_nvrtc_library_name("libnvrtc.alt.so.13"));
        assert!(!is_nvrtc_library_name("libnvrtc_static.a"));
    }

    #[test]
    fn nvrtc_files_ranked() {
        let dir = std::env::temp_dir().join(format!("tilus-discover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for n in [
            "libnvrtc.so.12",
            "libnvrtc.so",
            "libnvrtc.so.13",
            "libnvrtc-builtins.so.13.0",
        ] {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        let files = nvrtc_files_in(&dir);
        let names: Vec<_> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["libnvrtc.so.13", "libnvrtc.so", "libnvrtc.so.12"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
