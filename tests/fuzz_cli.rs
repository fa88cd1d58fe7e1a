//! Fuzzing the `tilus` binary with hostile arguments (issue 13, item 4).
//!
//! Every case runs the built binary under a 4 GB address-space limit (`ulimit -v`) and a 10 s
//! wall-clock limit, and must end with exit status 0 or 2 (`tilus doctor` may also say 1, its
//! documented "a check failed"): never a Rust panic (101, or "panicked at" on stderr), never a
//! signal (an abort on a failed allocation, a stack overflow), never a hang. An exit status 2
//! must come with an `error:` message on stderr.
//!
//! The cases are
//! * a fixed list: the hostile inputs that were once bugs (each kept verbatim) and more found by
//!   reading `src/cli` (every subcommand and option with bad, negative, overflowing, empty,
//!   unicode, non-UTF-8 and 100 KB values, unknown and repeated flags);
//! * generated argument vectors from a seeded RNG: a small grammar of the CLI (subcommands,
//!   option names, `--config` keys, type names, layout expressions) filled with values drawn
//!   from valid and hostile pools, then mutated (an argument dropped, repeated, swapped,
//!   replaced, or an unknown flag added).
//!
//! `TILUS_FUZZ_SEED=<u64>` picks the seed (default [`BASE_SEED`]; it is printed, so a failure
//! reproduces) and `TILUS_FUZZ_CASES=<n>` the number of generated cases (default
//! [`DEFAULT_GENERATED`]). Child processes see no GPU (`CUDA_VISIBLE_DEVICES=`), so `tilus
//! bench` fails fast with exit status 2 on every machine, and a private cache directory.

mod common;

use common::env_number;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Seed of the generated cases unless `TILUS_FUZZ_SEED` is set.
const BASE_SEED: u64 = 0x7115_f022_2024_0013;
/// Generated cases unless `TILUS_FUZZ_CASES` is set (about 15 s in a debug build on 2 cores).
const DEFAULT_GENERATED: usize = 3000;
/// Wall-clock limit of one case; the slowest legal case (a 1M-cell layout grid) takes ~0.5 s.
const CASE_TIMEOUT: Duration = Duration::from_secs(10);
/// Address-space limit of one case, in KiB (`ulimit -v`).
const MEMORY_LIMIT_KB: u64 = 4_000_000;
/// Longest argument generated: 100 KB (Linux allows 128 KiB per argument).
const LONG: usize = 100_000;

/// What one run of the binary did.
struct Outcome {
    status: Option<ExitStatus>,
    timed_out: bool,
    elapsed: Duration,
    stderr: String,
}

/// Run `tilus args..` under the memory and time limits.
fn run_tilus(args: &[OsString], cache: &Path) -> Outcome {
    let start = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {MEMORY_LIMIT_KB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_tilus"))
        .args(args)
        .env("TILUS_CACHE_DIR", cache)
        .env_remove("TILUS_CACHE")
        .env("CUDA_VISIBLE_DEVICES", "")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sh to run the tilus binary");
    // Drain both pipes concurrently so a large output cannot block the child.
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let stdout = std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let stderr = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut err).take(1 << 20).read_to_end(&mut kept);
        let _ = std::io::copy(&mut err, &mut std::io::sink());
        kept
    });
    let mut timed_out = false;
    let status = loop {
        match child.try_wait().expect("wait for the tilus binary") {
            Some(status) => break Some(status),
            None if start.elapsed() > CASE_TIMEOUT => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    };
    let _ = stdout.join();
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
    Outcome {
        status,
        timed_out,
        elapsed: start.elapsed(),
        stderr,
    }
}

/// Why `outcome` is not acceptable for `args`, if it is not.
fn verdict(args: &[OsString], o: &Outcome) -> Option<String> {
    if o.timed_out {
        return Some(format!("still running after {CASE_TIMEOUT:?}; killed"));
    }
    let status = o.status?;
    if let Some(sig) = status.signal() {
        return Some(format!(
            "killed by signal {sig}; stderr: {}",
            short(&o.stderr)
        ));
    }
    if o.stderr.contains("panicked at") {
        return Some(format!("panicked: {}", short(&o.stderr)));
    }
    let doctor = args.first().is_some_and(|a| a == "doctor");
    match status.code() {
        Some(0) => None,
        // clap answers a missing subcommand with the usage, not an `error:` line.
        Some(2) if o.stderr.trim_start().starts_with("error:") || o.stderr.contains("Usage:") => {
            None
        }
        Some(2) => Some(format!(
            "exit status 2 without an `error:` message or the usage; stderr: {}",
            short(&o.stderr)
        )),
        Some(1) if doctor => None,
        code => Some(format!(
            "exit status {code:?} (expected 0 or 2); stderr: {}",
            short(&o.stderr)
        )),
    }
}

fn short(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(400) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// An argument vector as a reader can paste it (long arguments abbreviated).
fn show(args: &[OsString]) -> String {
    let parts: Vec<String> = args
        .iter()
        .map(|a| {
            let s = a.to_string_lossy();
            let n = s.chars().count();
            if n > 80 {
                let head: String = s.chars().take(40).collect();
                format!("{head:?}..({n} chars)")
            } else {
                format!("{s:?}")
            }
        })
        .collect();
    format!("tilus {}", parts.join(" "))
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// The hostile cases that were bugs once (verbatim) and the ones read off `src/cli`.
fn fixed_cases() -> Vec<Vec<OsString>> {
    let mut cases: Vec<Vec<OsString>> = [
        // Once: huge tiles wrapped the VM's i32 or reserved gigabytes of registers.
        &["emit", "fig2", "--config", "BM=2147483648"][..],
        &["emit", "fig2", "--config", "BM=65536,BN=65536,BK=65536"],
        &["emit", "fig8", "--config", "BK=65536"],
        &["emit", "qmatmul", "--config", "BM=100000000"],
        // Once: a capacity-overflow panic. Without a GPU: exit 2 (clap: --wdtype, --m missing).
        &["bench", "tune", "--points", "18446744073709551615"],
        &[
            "bench",
            "tune",
            "--wdtype",
            "i4",
            "--m",
            "1",
            "--points",
            "18446744073709551615",
        ],
        // Once: 50-95 s (debug build) spent building a 4096-point tuning space before
        // finding that there is no GPU.
        &[
            "bench", "tune", "--wdtype", "u1", "--m", "4096", "--points", "4096",
        ],
        &[
            "bench", "tune", "--wdtype", "i4", "--m", "1", "--points", "4096",
        ],
        // dtype names.
        &["dtype", "i1"],
        &["dtype", "u0"],
        &["dtype", "i0"],
        &["dtype", "u9"],
        &["dtype", "i33"],
        &["dtype", "f0e3m2"],
        &["dtype", "f6e0m5"],
        &["dtype", "f2e1m0"],
        &["dtype", "f9e4m4"],
        &["dtype", "f8e22m99999999999999999999"],
        &["dtype", "f18446744073709551615e1m1"],
        &["dtype", "f4294967299e1m1"],
        &["dtype", "f8e4294967295m4294967295"],
        &["dtype", "u99999999999999999999999"],
        &["dtype", "i18446744073709551617"],
        &["dtype", "u04"],
        &["dtype", "u+4"],
        &["dtype", "u-4"],
        &["dtype", "U4"],
        &["dtype", "F6E3M2"],
        &["dtype", "ｕ4"],
        &["dtype", "u٤"],
        &["dtype", "f6e3m2\u{301}"],
        &["dtype", ""],
        &["dtype", " "],
        &["dtype", "e4m3"],
        &["dtype", "fp8"],
        &["dtype", "f"],
        &["dtype", "fe2m1"],
        &["dtype", "f4e2m"],
        &["dtype", "f4e2m1m1"],
        &["dtype", "f4ee2m1"],
        &["dtype", "f64"],
        &["dtype", "f32", "--json"],
        &["dtype", "u32", "--json"],
        &["dtype", "f8e5m2", "--json"],
        &["dtype", "f8e4m3"],
        &["dtype", "bf16"],
        &["dtype", "u1", "--json", "--json"],
        &["dtype", "--json"],
        &["dtype"],
        &["dtype", "u4", "i4"],
        // Layout expressions.
        &["layout", "spatial(65536,65536)"],
        &["layout", "local(2147483647)"],
        &["layout", "local(18446744073709551615)"],
        &["layout", "local(18446744073709551616)"],
        &["layout", "local(4294967296,4294967296)"],
        &["layout", "spatial(4294967296).local(4294967296)"],
        &["layout", "spatial(1024,1024)"],
        &["layout", "spatial(1025,1024)"],
        &["layout", "local(1024).spatial(1024)", "--json"],
        &["layout", "local(0)"],
        &["layout", "local(-1)"],
        &["layout", "local(1.5)"],
        &["layout", "local()"],
        &["layout", "local(,)"],
        &["layout", "local(2,)"],
        &["layout", "local"],
        &["layout", "local(2"],
        &["layout", "local(2))"],
        &["layout", "(local(2)"],
        &["layout", ")("],
        &["layout", "((((("],
        &["layout", "local(2).."],
        &["layout", ".local(2)"],
        &["layout", "local(2)//local(2)"],
        &["layout", "local(２)"],
        &["layout", "lοcal(2)"],
        &["layout", "spätial(2)"],
        &["layout", "local(2)∘spatial(4)"],
        &["layout", "local(2)∘∘spatial(4)"],
        &["layout", "🦀"],
        &["layout", ""],
        &["layout", " "],
        &["layout", "spatial(4)/local(3)"],
        &["layout", "local(2)/local(4)"],
        &["layout", "spatial(8,4)/spatial(8,4)/spatial(8,4)"],
        &["layout", "reduce(spatial(4,8),[0])"],
        &["layout", "reduce(spatial(4,8),[5])"],
        &["layout", "reduce(spatial(4,8),[18446744073709551615])"],
        &["layout", "reduce(spatial(4,8),[])"],
        &["layout", "reduce(spatial(4,8))"],
        &["layout", "reduce(spatial(4,8),[0,0,1,1])"],
        &["layout", "reduce"],
        &["layout", "local(2,1).spatial(8,4)", "--json"],
        &["layout", "--json"],
        &["layout"],
        &["layout", "local(2)", "local(4)"],
        // Emit: kernels, keys, values, outputs.
        &["emit", "fig2"],
        &["emit", "fig8", "--ir"],
        &["emit", "fig14", "--config", "STAGES=0"],
        &["emit", "fig14", "--config", "STAGES=1"],
        &["emit", "fig14", "--config", "STAGES=100000"],
        &["emit", "fig14", "--config", "BM=0"],
        &["emit", "fig14", "--config", "BM=-16"],
        &["emit", "fig14", "--config", "BM=16.0"],
        &["emit", "fig14", "--config", "BM=１６"],
        &["emit", "fig14", "--config", "BM="],
        &["emit", "fig14", "--config", "=16"],
        &["emit", "fig14", "--config", "="],
        &["emit", "fig14", "--config", ""],
        &["emit", "fig14", "--config", ",,,"],
        &["emit", "fig14", "--config", "BM=16=32"],
        &["emit", "fig14", "--config", "BM=16", "--config", "BM=32"],
        &["emit", "fig14", "--config", "bm=32,Bn=64"],
        &["emit", "fig14", "--config", "BM=4294967312"],
        &["emit", "fig2", "--config", "BN=18446744073709551615"],
        &["emit", "fig2", "--config", "BK=18446744073709551616"],
        &["emit", "fig2", "--config", "WEIGHT=u1,BN=2147483647"],
        &["emit", "fig2", "--config", "WEIGHT=i1"],
        &["emit", "fig2", "--config", "WEIGHT=f16"],
        &["emit", "fig2", "--config", "WEIGHT=f4e2m1"],
        &["emit", "fig8", "--config", "WEIGHT=u32"],
        &["emit", "fig8", "--config", "BN=1,BK=1"],
        &["emit", "matmul_f16_i6", "--config", "WEIGHT=u4"],
        &["emit", "relayout-i6"],
        &["emit", "qmatmul", "--config", "WDTYPE=u1,BN=2147483647"],
        &["emit", "qmatmul", "--config", "WDTYPE=f16"],
        &["emit", "qmatmul", "--config", "WDTYPE=i32"],
        &["emit", "qmatmul", "--config", "ADTYPE=f32"],
        &["emit", "qmatmul", "--config", "ADTYPE=i4"],
        &["emit", "qmatmul", "--config", "GROUP=0"],
        &["emit", "qmatmul", "--config", "GROUP=1"],
        &["emit", "qmatmul", "--config", "GROUP=18446744073709551615"],
        &["emit", "qmatmul", "--config", "SPLIT_K=0"],
        &["emit", "qmatmul", "--config", "SPLIT_K=4"],
        &["emit", "qmatmul", "--config", "SPLIT_K=2147483648"],
        &["emit", "qmatmul", "--config", "WARPS=0"],
        &["emit", "qmatmul", "--config", "WARPS=3"],
        &["emit", "qmatmul", "--config", "WARPS=1024"],
        &["emit", "qmatmul", "--config", "STAGES=1"],
        &["emit", "qmatmul", "--config", "STAGES=4294967296"],
        &["emit", "qmatmul", "--config", "BK=8"],
        &["emit", "qmatmul", "--config", "BN=1024,STAGES=2"],
        &[
            "emit",
            "qmatmul",
            "--config",
            "BM=18446744073709551615,BN=18446744073709551615",
        ],
        &[
            "emit",
            "qmatmul",
            "--ir",
            "--config",
            "WDTYPE=f6e3m2,SPLIT_K=2",
        ],
        &["emit", "qmatmul", "--ptx", "sm_90a"],
        &["emit", "fig2", "--ptx", "sm_99999"],
        &["emit", "fig2", "--ptx", ""],
        &["emit", "fig2", "--ptx", "compute_90 -DX=1"],
        &["emit", "fig2", "--ptx", "é"],
        &["emit", "fig2", "--ptx", "sm_90a", "--ir"],
        &["emit", "fig2", "--ptx"],
        &["emit", "fig3"],
        &["emit", ""],
        &["emit", "FIG2"],
        &["emit"],
        // Bench: bad values are named before a GPU is looked for; good ones find no GPU.
        &["bench"],
        &["bench", "copy"],
        &["bench", "copy", "--mib", "0"],
        &["bench", "copy", "--mib", "-1"],
        &["bench", "copy", "--mib", "18446744073709551615"],
        &["bench", "copy", "--mib", "18446744073709551616"],
        &["bench", "copy", "--mib", "1", "--mib", "2"],
        &["bench", "gemm", "--m", "0", "--n", "1", "--k", "1"],
        &[
            "bench",
            "gemm",
            "--m",
            "18446744073709551615",
            "--n",
            "18446744073709551615",
            "--k",
            "18446744073709551615",
        ],
        &["bench", "gemm", "--m", "1"],
        &["bench", "launch", "--calls", "0"],
        &["bench", "launch", "--shapes", "0x8192", "--wdtype", "u9"],
        &["bench", "qmatmul", "--wdtype", "i4", "--m", "1"],
        &[
            "bench", "qmatmul", "--wdtype", "i4", "--m", "1", "--tune", "0",
        ],
        &["bench", "qmatmul", "--wdtype", "f16", "--m", "1"],
        &["bench", "qmatmul", "--wdtype", "", "--m", "1"],
        &[
            "bench",
            "qmatmul",
            "--wdtype",
            "u3",
            "--m",
            "18446744073709551615",
            "--n",
            "18446744073709551615",
            "--k",
            "18446744073709551615",
            "--group",
            "18446744073709551615",
            "--tune",
            "18446744073709551615",
        ],
        &["bench", "sweep", "--wdtypes", "i4,,u3"],
        &["bench", "sweep", "--wdtypes", ""],
        &["bench", "sweep", "--wdtypes", "i4,f16"],
        &["bench", "sweep", "--shapes", "12x"],
        &["bench", "sweep", "--shapes", "0x8192"],
        &["bench", "sweep", "--shapes", "llama70"],
        &[
            "bench",
            "sweep",
            "--shapes",
            "18446744073709551615x18446744073709551615",
        ],
        &["bench", "sweep", "--m", "0"],
        &["bench", "sweep", "--m", ""],
        &["bench", "sweep", "--m", ",,,"],
        &["bench", "sweep", "--m", "1,-1"],
        &["bench", "sweep", "--m", "18446744073709551616"],
        &["bench", "sweep", "--csv", "/nonexistent/dir/out.csv"],
        &["bench", "sweep", "--csv", ""],
        &["bench", "tune", "--wdtype", "i4", "--m", "1"],
        &["bench", "tune", "--wdtype", "i4", "--m", "0"],
        &[
            "bench", "tune", "--wdtype", "i4", "--m", "1", "--adtype", "f32",
        ],
        &["bench", "tune", "--wdtype", "i4", "--m", "1", "--n", "4008"],
        &["bench", "tune", "--wdtype", "i4", "--m", "1", "--k", "100"],
        &[
            "bench", "tune", "--wdtype", "i4", "--m", "1", "--group", "7",
        ],
        &[
            "bench", "tune", "--wdtype", "i4", "--m", "1", "--points", "0",
        ],
        &[
            "bench",
            "tune",
            "--wdtype",
            "u1",
            "--m",
            "18446744073709551615",
            "--n",
            "18446744073709551615",
            "--k",
            "18446744073709551615",
            "--retune",
        ],
        &[
            "bench", "tune", "--wdtype", "i4", "--m", "1", "--retune", "--retune",
        ],
        &["bench", "bogus"],
        // Doctor (exit 1 is its "a check failed").
        &["doctor"],
        &["doctor", "--strict"],
        &["doctor", "--bogus"],
        &["doctor", "extra"],
        // Top level.
        &[],
        &["--help"],
        &["-h"],
        &["--version"],
        &["-V"],
        &["help"],
        &["help", "emit"],
        &["help", "bench", "tune"],
        &["emit", "--help"],
        &["bench", "tune", "--help"],
        &["bogus"],
        &[""],
        &["--"],
        &["-"],
        &["--json"],
        &["--wdtype=i4"],
        &["émit", "fig2"],
    ]
    .iter()
    .map(|a| os(a))
    .collect();

    // 100 KB arguments, deep nesting, unbalanced parentheses and the like.
    let long_layout = vec![
        "local(2).".repeat(LONG / 9) + "local(2)",
        "(".repeat(LONG / 2) + "local(2)" + &")".repeat(LONG / 2 - 8),
        "(".repeat(65) + "local(2)" + &")".repeat(65),
        "(".repeat(64) + "local(2)" + &")".repeat(64),
        "reduce(".repeat(70) + "local(2)" + &",[0])".repeat(70),
        format!("local({})", "9".repeat(LONG)),
        format!("local({})", "1,".repeat(LONG / 2 - 10) + "1"),
        "x".repeat(LONG),
        "∘".repeat(LONG / 3),
        format!("local(2){}", " ".repeat(LONG)),
        "local(2)/".repeat(LONG / 9) + "local(2)",
    ];
    for expr in long_layout {
        cases.push(os(&["layout", &expr]));
    }
    let long = "9".repeat(LONG);
    for args in [
        vec!["dtype".to_string(), "u".to_string() + &long],
        vec!["dtype".into(), format!("f{long}e1m1")],
        vec!["dtype".into(), "é".repeat(LONG / 2)],
        vec!["emit".into(), "x".repeat(LONG)],
        vec![
            "emit".into(),
            "fig14".into(),
            "--config".into(),
            format!("BM={long}"),
        ],
        vec![
            "emit".into(),
            "fig14".into(),
            "--config".into(),
            "BM=32,".repeat(LONG / 6),
        ],
        vec![
            "emit".into(),
            "fig2".into(),
            "--ptx".into(),
            "s".repeat(LONG),
        ],
        vec!["bench".into(), "copy".into(), "--mib".into(), long.clone()],
        vec![
            "bench".into(),
            "sweep".into(),
            "--m".into(),
            "1,".repeat(LONG / 2),
        ],
        vec![
            "bench".into(),
            "sweep".into(),
            "--wdtypes".into(),
            "i4,".repeat(LONG / 3),
        ],
        vec!["x".repeat(LONG)],
    ] {
        cases.push(args.into_iter().map(OsString::from).collect());
    }
    // 5000 repeated flags, and arguments that are not UTF-8.
    let mut many = os(&["emit", "fig14"]);
    for _ in 0..5000 {
        many.extend(os(&["--config", "BM=32"]));
    }
    cases.push(many);
    let bad = OsString::from_vec(vec![0xff, 0xfe, b'(', 0x80]);
    for args in [
        vec!["layout".into(), bad.clone()],
        vec!["dtype".into(), bad.clone()],
        vec!["emit".into(), bad.clone()],
        vec!["emit".into(), "fig2".into(), "--config".into(), bad.clone()],
        vec!["bench".into(), "copy".into(), "--mib".into(), bad.clone()],
        vec![bad],
    ] {
        cases.push(args);
    }
    cases
}

/// An option name and the generator of its value.
type Flag<'a> = (&'a str, fn(&mut Gen) -> String);

/// A generator of CLI argument vectors: the CLI's grammar with valid and hostile values.
struct Gen {
    rng: StdRng,
    types: Vec<String>,
    /// Files `quantize` and `inspect` read: real small checkpoints in the scratch directory,
    /// and paths that are not one.
    inputs: Vec<String>,
    /// Where `quantize` may write: only the scratch directory or directories that do not
    /// exist (never a hostile path: a write there would land in the repository or the system).
    outputs: Vec<String>,
}

const KERNELS: &[&str] = &[
    "fig2",
    "fig8",
    "fig14",
    "qmatmul",
    "matmul_f16_int",
    "matmul_f16_i6",
    "relayout",
    "relayout_int",
    "relayout_i6",
    "matmul_f16_pipelined",
    "pipelined",
    "Matmul-F16-Pipelined",
];
const KEYS: &[&str] = &[
    "BM", "BN", "BK", "STAGES", "WEIGHT", "WDTYPE", "ADTYPE", "GROUP", "WARPS", "SPLIT_K",
];
const UNICODE: &[&str] = &[
    "é", "２", "🦀", "\u{202e}", "\u{feff}", "e\u{301}", "Ω", "∘",
];

impl Gen {
    fn new(seed: u64) -> Gen {
        let mut types: Vec<String> = tilus::DType::all().map(|t| t.to_string()).collect();
        types.extend(
            [
                "i1", "u0", "u9", "i33", "f0e3m2", "f4e3m1", "f8e7m0", "f2e1m0", "e4m3",
            ]
            .map(String::from),
        );
        Gen {
            rng: StdRng::seed_from_u64(seed),
            types,
            inputs: vec!["/nonexistent/in.safetensors".into()],
            outputs: vec!["/nonexistent/dir/out.safetensors".into()],
        }
    }

    fn pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items.choose(&mut self.rng).copied().unwrap_or("")
    }

    /// A number as a user might type it, often out of range or malformed.
    fn number(&mut self) -> String {
        let r = &mut self.rng;
        match r.random_range(0..10) {
            0..=3 => [
                1, 2, 3, 4, 8, 16, 32, 48, 64, 96, 128, 256, 512, 1024, 4096, 8192,
            ]
            .choose(r)
            .map(|v| v.to_string())
            .unwrap_or_default(),
            4 => r.random_range(0..300u32).to_string(),
            5 => r.random::<u64>().to_string(),
            6 => (1u128 << r.random_range(0..128)).to_string(),
            7 => [
                "0",
                "-1",
                "-0",
                "+1",
                "01",
                "1.5",
                "1e9",
                "0x10",
                "inf",
                "NaN",
                " 16",
                "16 ",
                "1_000",
                "١٦",
                "",
                "2147483647",
                "2147483648",
                "4294967295",
                "4294967296",
                "18446744073709551615",
                "18446744073709551616",
                "100000000000000000000000000000000000000000",
            ]
            .choose(r)
            .map(|v| v.to_string())
            .unwrap_or_default(),
            8 => format!("-{}", r.random_range(1..100_000u32)),
            _ => self.hostile(),
        }
    }

    /// A data type name: valid, invalid, or a float with arbitrary widths.
    fn dtype(&mut self) -> String {
        match self.rng.random_range(0..6) {
            0..=2 => self
                .types
                .choose(&mut self.rng)
                .cloned()
                .unwrap_or_default(),
            3 => {
                let (n, e, m) = (self.number(), self.number(), self.number());
                format!("f{n}e{e}m{m}")
            }
            4 => {
                let p = self.pick(&["u", "i", "f", "bf", "U", "I"]);
                format!("{p}{}", self.number())
            }
            _ => self.hostile(),
        }
    }

    /// A comma-separated list of `item`s.
    fn list(&mut self, item: fn(&mut Gen) -> String) -> String {
        let n = self.rng.random_range(0..5);
        (0..n).map(|_| item(self)).collect::<Vec<_>>().join(",")
    }

    /// A layout expression from the grammar, with mostly small extents, sometimes mutated.
    fn layout(&mut self, depth: u32) -> String {
        let e = match self.rng.random_range(0..if depth == 0 { 1 } else { 8 }) {
            0..=2 => self.primitive(),
            3 => format!("{}.{}", self.layout(depth - 1), self.primitive()),
            4 => format!("{}∘{}", self.layout(depth - 1), self.primitive()),
            5 => format!("({})", self.layout(depth - 1)),
            6 => format!("{} / {}", self.layout(depth - 1), self.layout(depth - 1)),
            _ => {
                let dims = self.list(|g| g.rng.random_range(0..4).to_string());
                format!("reduce({}, [{dims}])", self.layout(depth - 1))
            }
        };
        if self.rng.random_bool(0.2) {
            self.mutate(&e)
        } else {
            e
        }
    }

    fn primitive(&mut self) -> String {
        let name = if self.rng.random_bool(0.95) {
            self.pick(&["local", "spatial", "column_local", "column_spatial"])
                .to_string()
        } else {
            self.pick(&["reduce", "Local", "spatia", "lοcal", "", "x"])
                .to_string()
        };
        let rank = self.rng.random_range(1..4);
        let extents: Vec<String> = (0..rank)
            .map(|_| {
                if self.rng.random_bool(0.9) {
                    [1, 2, 3, 4, 8, 16, 32]
                        .choose(&mut self.rng)
                        .unwrap()
                        .to_string()
                } else {
                    self.number()
                }
            })
            .collect();
        format!("{name}({})", extents.join(","))
    }

    /// `s` with a character deleted, inserted or replaced, or cut short.
    fn mutate(&mut self, s: &str) -> String {
        let mut chars: Vec<char> = s.chars().collect();
        let at = self.rng.random_range(0..=chars.len());
        let c = *"(),.[]∘/ 0123456789é-"
            .chars()
            .collect::<Vec<_>>()
            .choose(&mut self.rng)
            .unwrap();
        match self.rng.random_range(0..4) {
            0 if at < chars.len() => {
                chars.remove(at);
            }
            1 => chars.insert(at, c),
            2 if at < chars.len() => chars[at] = c,
            _ => chars.truncate(at),
        }
        chars.into_iter().collect()
    }

    /// A hostile string: empty, control or unicode characters, shell syntax, or very long.
    fn hostile(&mut self) -> String {
        let r = &mut self.rng;
        match r.random_range(0..6) {
            0 => [
                "", " ", "\t", "-", "--", "=", ",", ",,,", "=,=", "\n", "\r\n", "\x01", "\x7f",
            ]
            .choose(r)
            .unwrap()
            .to_string(),
            1 => UNICODE.choose(r).unwrap().to_string(),
            2 => [
                "$(echo hi)",
                "`id`",
                "%s%n%x",
                "../../etc/passwd",
                "\\",
                "\"",
                "'",
                "{}",
            ]
            .choose(r)
            .unwrap()
            .to_string(),
            3 => {
                let unit = *["9", "a", "é", "(", "local(2).", "1,", "🦀"]
                    .choose(r)
                    .unwrap();
                let n = r.random_range(1000..=LONG) / unit.len();
                unit.repeat(n)
            }
            4 => {
                let n = r.random_range(1..40);
                (0..n)
                    .map(|_| char::from_u32(r.random_range(1..0x3000)).unwrap_or('?'))
                    .collect()
            }
            _ => {
                "-".repeat(r.random_range(1..4)) + ["json", "ir", "config", "x"].choose(r).unwrap()
            }
        }
    }

    /// A `--config` value: one or more `KEY=VALUE` pairs.
    fn config(&mut self) -> String {
        let n = self.rng.random_range(1..4);
        let pairs: Vec<String> = (0..n)
            .map(|_| {
                let key = if self.rng.random_bool(0.9) {
                    self.pick(KEYS).to_string()
                } else {
                    self.hostile()
                };
                let value = match key.as_str() {
                    "WEIGHT" | "WDTYPE" | "ADTYPE" => self.dtype(),
                    _ => self.number(),
                };
                if self.rng.random_bool(0.05) {
                    key
                } else {
                    format!("{key}={value}")
                }
            })
            .collect();
        pairs.join(",")
    }

    /// Optional flags: each of `flags` with probability one half, with a value from `value`.
    fn options(&mut self, args: &mut Vec<String>, flags: &[Flag]) {
        self.flags(args, flags, 0.5);
    }

    /// Required flags: each of `flags` but now and then one missing.
    fn required(&mut self, args: &mut Vec<String>, flags: &[Flag]) {
        self.flags(args, flags, 0.95);
    }

    fn flags(&mut self, args: &mut Vec<String>, flags: &[Flag], p: f64) {
        for (flag, value) in flags {
            if self.rng.random_bool(p) {
                args.push(flag.to_string());
                args.push(value(self));
            }
        }
    }

    /// One generated argument vector.
    fn case(&mut self) -> Vec<OsString> {
        let mut args: Vec<String> = Vec::new();
        match self.rng.random_range(0..12) {
            0 | 1 => {
                args.push("layout".into());
                let depth = self.rng.random_range(0..5);
                args.push(self.layout(depth));
                if self.rng.random_bool(0.3) {
                    args.push("--json".into());
                }
            }
            2 => {
                args.push("dtype".into());
                args.push(self.dtype());
                if self.rng.random_bool(0.3) {
                    args.push("--json".into());
                }
            }
            3..=6 => {
                args.push("emit".into());
                args.push(if self.rng.random_bool(0.9) {
                    self.pick(KERNELS).to_string()
                } else {
                    self.hostile()
                });
                for _ in 0..self.rng.random_range(0..4) {
                    args.push("--config".into());
                    args.push(self.config());
                }
                match self.rng.random_range(0..6) {
                    0 => args.push("--ir".into()),
                    1 => {
                        args.push("--ptx".into());
                        args.push(if self.rng.random_bool(0.5) {
                            self.pick(&["sm_90a", "sm_80", "compute_90", "sm_99999", ""])
                                .to_string()
                        } else {
                            self.hostile()
                        });
                    }
                    _ => {}
                }
            }
            7 | 8 => self.bench(&mut args),
            9 | 10 => self.checkpoint(&mut args),
            _ => {
                // Anything at all.
                for _ in 0..self.rng.random_range(1..4) {
                    let a = match self.rng.random_range(0..3) {
                        0 => self
                            .pick(&["layout", "dtype", "emit", "bench", "doctor", "help"])
                            .to_string(),
                        1 => self.number(),
                        _ => self.hostile(),
                    };
                    args.push(a);
                }
                if args.first().is_some_and(|a| a == "doctor") {
                    args[0] = "dtype".into(); // doctor is in the fixed list; keep this fast
                }
            }
        }
        // `quantize` writes its output and `bench import` builds a layer as large as its
        // flags say: mutations (a value swapped into the output's place, a size flag dropped
        // for the 70B-shaped default) stay away from them.
        let writes = args.first().is_some_and(|a| a == "quantize")
            || (args.first().is_some_and(|a| a == "bench")
                && args.get(1).is_some_and(|a| a == "import"));
        if !writes && self.rng.random_bool(0.3) {
            self.shake(&mut args);
        }
        // Lists of long values can exceed the kernel's 128 KiB per argument: cut them to 100 KB.
        for a in &mut args {
            if a.len() > LONG {
                let mut end = LONG;
                while !a.is_char_boundary(end) {
                    end -= 1;
                }
                a.truncate(end);
            }
        }
        args.into_iter().map(OsString::from).collect()
    }

    fn bench(&mut self, args: &mut Vec<String>) {
        args.push("bench".into());
        let sub = self.pick(&[
            "copy", "gemm", "qmatmul", "sweep", "tune", "launch", "import",
        ]);
        args.push(sub.into());
        let num = |g: &mut Gen| g.number();
        let dtype = |g: &mut Gen| g.dtype();
        match sub {
            "copy" => self.options(args, &[("--mib", num)]),
            "gemm" => {
                self.required(args, &[("--m", num), ("--n", num), ("--k", num)]);
                self.options(args, &[("--l2", |g: &mut Gen| g.l2())]);
            }
            "launch" => self.options(
                args,
                &[
                    ("--wdtype", dtype),
                    ("--m", num),
                    ("--shapes", |g: &mut Gen| {
                        g.pick(&["llama70b", "8192x8192", "0x1", "x", "1x1,"])
                            .to_string()
                    }),
                    ("--group", num),
                    ("--calls", num),
                ],
            ),
            "import" => {
                // Sizes from a pool of small and invalid ones, always given: the default is
                // the 70B-shaped layer, seconds in a debug build.
                let size = |g: &mut Gen| {
                    g.pick(&[
                        "32",
                        "256",
                        "512",
                        "0",
                        "3",
                        "100",
                        "-1",
                        "4294967296",
                        "18446744073709551615",
                        "é",
                    ])
                    .to_string()
                };
                for flag in ["--k", "--n"] {
                    args.push(flag.into());
                    args.push(size(self));
                }
                self.options(
                    args,
                    &[
                        ("--bits", num),
                        ("--group", size),
                        ("--runs", |g: &mut Gen| {
                            g.pick(&["1", "2", "0", "1001", "18446744073709551615", "x"])
                                .to_string()
                        }),
                    ],
                );
                if self.rng.random_bool(0.3) {
                    args.push("--act-order".into());
                }
                return;
            }
            "qmatmul" | "tune" => {
                self.required(args, &[("--wdtype", dtype), ("--m", num)]);
                self.options(args, &[("--n", num), ("--k", num), ("--group", num)]);
                if sub == "tune" {
                    self.options(args, &[("--adtype", dtype), ("--points", num)]);
                    if self.rng.random_bool(0.3) {
                        args.push("--retune".into());
                    }
                } else {
                    self.options(
                        args,
                        &[
                            ("--tune", num),
                            ("--l2", |g: &mut Gen| g.l2()),
                            ("--adtype", dtype),
                        ],
                    );
                }
            }
            _ => {
                self.options(
                    args,
                    &[
                        ("--wdtypes", |g: &mut Gen| g.list(Gen::dtype)),
                        ("--m", |g: &mut Gen| g.list(Gen::number)),
                        ("--n", num),
                        ("--k", num),
                        ("--group", num),
                        ("--tune", num),
                        ("--l2", |g: &mut Gen| g.l2()),
                        ("--adtype", |g: &mut Gen| g.dtype()),
                        ("--csv", |g: &mut Gen| {
                            g.pick(&["/nonexistent/dir/out.csv", "", "-", "é.csv"])
                                .to_string()
                        }),
                    ],
                );
            }
        }
        if self.rng.random_bool(0.2) {
            args.push("--verbose".into());
        }
    }

    /// An L2 flush mode, valid or not.
    fn l2(&mut self) -> String {
        self.pick(&["clean", "dirty", "warm", "", "CLEAN"])
            .to_string()
    }

    /// `quantize IN OUT [flags]` or `inspect IN [--json] [--time]`.
    fn checkpoint(&mut self, args: &mut Vec<String>) {
        let input = |g: &mut Gen| {
            if g.rng.random_bool(0.8) {
                let i = g.rng.random_range(0..g.inputs.len());
                g.inputs[i].clone()
            } else {
                g.hostile()
            }
        };
        if self.rng.random_bool(0.5) {
            args.push("inspect".into());
            args.push(input(self));
            for flag in ["--json", "--time"] {
                if self.rng.random_bool(0.4) {
                    args.push(flag.into());
                }
            }
            return;
        }
        args.push("quantize".into());
        args.push(input(self));
        let o = self.rng.random_range(0..self.outputs.len());
        args.push(self.outputs[o].clone());
        let dtype = |g: &mut Gen| g.dtype();
        let num = |g: &mut Gen| g.number();
        self.options(
            args,
            &[
                ("--wdtype", dtype),
                ("--group", num),
                ("--scale-dtype", |g: &mut Gen| {
                    if g.rng.random_bool(0.7) {
                        g.pick(&["f16", "bf16", "f32", "u4", ""]).to_string()
                    } else {
                        g.hostile()
                    }
                }),
            ],
        );
        if self.rng.random_bool(0.3) {
            args.push("--from".into());
            args.push(if self.rng.random_bool(0.8) {
                self.pick(&["gptq", "awq", "exl2", "GPTQ", ""]).to_string()
            } else {
                self.hostile()
            });
        }
        if self.rng.random_bool(0.2) {
            args.push("--gptq-v2".into());
        }
    }

    /// Drop, repeat, swap or replace an argument, or add an unknown flag.
    fn shake(&mut self, args: &mut Vec<String>) {
        let n = args.len();
        let at = self.rng.random_range(0..=n);
        match self.rng.random_range(0..6) {
            0 if at < n => {
                args.remove(at);
            }
            1 if at < n => {
                let a = args[at].clone();
                args.insert(at, a);
            }
            2 if n >= 2 => {
                let b = self.rng.random_range(0..n);
                args.swap(at.min(n - 1), b);
            }
            3 if at < n => args[at] = self.hostile(),
            4 => {
                let flag = self.pick(&["--bogus", "-x", "--json=1", "--config", "--", "--help"]);
                args.insert(at, flag.to_string());
            }
            _ => args.push(self.hostile()),
        }
    }
}

/// Small checkpoints for `quantize` and `inspect` in `dir` (a GPTQ layer, float weights, a tilus
/// file, a file that is not safetensors, an empty one), and where `quantize` may write.
fn checkpoint_files(dir: &Path) -> (Vec<String>, Vec<String>) {
    use safetensors::tensor::TensorView;
    use tilus::checkpoint::{format, synth, Checkpoint, ImportOptions};
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    std::fs::write(
        path("gptq.safetensors"),
        synth::gptq_file("l", 64, 32, 4, 32, 1),
    )
    .unwrap();
    let w: Vec<u8> = (0..64 * 128)
        .flat_map(|i| ((i % 97) as f32 / 50.0 - 1.0).to_le_bytes())
        .collect();
    let floats = safetensors::serialize(
        [
            (
                "a.weight",
                TensorView::new(safetensors::Dtype::F32, vec![64, 128], &w).unwrap(),
            ),
            (
                "b.bias",
                TensorView::new(safetensors::Dtype::F32, vec![64], &w[..256]).unwrap(),
            ),
        ],
        None,
    )
    .unwrap();
    std::fs::write(path("floats.safetensors"), floats).unwrap();
    let layer = Checkpoint::open(path("gptq.safetensors"))
        .unwrap()
        .load("l", &ImportOptions::default())
        .unwrap();
    format::save(path("tilus.safetensors"), &[("l".into(), layer)]).unwrap();
    std::fs::write(
        path("junk.safetensors"),
        b"\xff\xff\xff\xff\xff\xff\xff\x7f{}",
    )
    .unwrap();
    std::fs::write(path("empty.safetensors"), b"").unwrap();
    let inputs = [
        "gptq.safetensors",
        "floats.safetensors",
        "tilus.safetensors",
        "junk.safetensors",
        "empty.safetensors",
    ]
    .map(path)
    .into_iter()
    .chain([
        dir.to_string_lossy().into_owned(),
        "".into(),
        "/dev/null".into(),
    ])
    .collect();
    let outputs = vec![
        path("out.safetensors"),
        path("out2.safetensors"),
        path("no/such/dir/out.safetensors"),
        dir.to_string_lossy().into_owned(),
        "".into(),
    ];
    (inputs, outputs)
}

/// Fixed `quantize` / `inspect` / `bench import` cases on those files.
fn checkpoint_cases(inputs: &[String], outputs: &[String]) -> Vec<Vec<OsString>> {
    let (gptq, floats, tilus, junk) = (&inputs[0], &inputs[1], &inputs[2], &inputs[3]);
    let out = &outputs[0];
    let cases: Vec<Vec<&str>> = vec![
        vec!["quantize"],
        vec!["quantize", floats],
        vec!["quantize", floats, out],
        vec!["quantize", floats, out, "--wdtype", "u4"],
        vec!["quantize", floats, out, "--wdtype", "u4", "--group", "0"],
        vec![
            "quantize",
            floats,
            out,
            "--wdtype",
            "u4",
            "--group",
            "18446744073709551615",
        ],
        vec![
            "quantize",
            floats,
            out,
            "--wdtype",
            "u4",
            "--group",
            "18446744073709551616",
        ],
        vec!["quantize", floats, out, "--wdtype", "i8", "--group", "1"],
        vec![
            "quantize",
            floats,
            out,
            "--wdtype",
            "f4e2m1",
            "--scale-dtype",
            "bf16",
        ],
        vec!["quantize", floats, out, "--wdtype", "f32"],
        vec![
            "quantize",
            floats,
            out,
            "--wdtype",
            "u4",
            "--scale-dtype",
            "",
        ],
        vec!["quantize", floats, floats, "--wdtype", "u4"],
        vec!["quantize", floats, &outputs[2], "--wdtype", "u4"],
        vec!["quantize", floats, &outputs[3], "--wdtype", "u4"],
        vec!["quantize", gptq, out, "--from", "gptq"],
        vec!["quantize", gptq, out, "--from", "gptq", "--gptq-v2"],
        vec!["quantize", gptq, out, "--from", "awq"],
        vec!["quantize", gptq, out, "--from", "gptq", "--wdtype", "u4"],
        vec!["quantize", floats, out, "--from", "gptq"],
        vec!["quantize", tilus, out, "--from", "gptq"],
        vec!["quantize", junk, out, "--wdtype", "u4"],
        vec!["quantize", "/dev/null", out, "--wdtype", "u4"],
        vec!["inspect"],
        vec!["inspect", gptq],
        vec!["inspect", gptq, "--json", "--time"],
        vec!["inspect", tilus, "--time"],
        vec!["inspect", floats, "--json"],
        vec!["inspect", junk],
        vec!["inspect", &inputs[4]],
        vec!["inspect", &inputs[5]],
        vec!["inspect", "/dev/null"],
        vec!["inspect", ""],
        vec!["inspect", "/nonexistent/x.safetensors", "--json"],
        vec!["inspect", gptq, "--json", "--json"],
        vec!["bench", "import", "--k", "64", "--n", "64", "--runs", "1"],
        vec!["bench", "import", "--k", "64", "--n", "64", "--bits", "3"],
        vec![
            "bench",
            "import",
            "--k",
            "64",
            "--n",
            "64",
            "--bits",
            "3",
            "--act-order",
        ],
        vec![
            "bench",
            "import",
            "--k",
            "64",
            "--n",
            "64",
            "--act-order",
            "--act-order",
        ],
        vec!["bench", "import", "--k", "64", "--n", "64", "--bits", "5"],
        vec![
            "bench",
            "import",
            "--k",
            "18446744073709551615",
            "--n",
            "64",
        ],
        vec!["bench", "import", "--k", "4294967296", "--n", "4294967296"],
        vec!["bench", "import", "--k", "65536", "--n", "65536"],
        vec!["bench", "import", "--k", "64", "--n", "64", "--group", "0"],
        vec!["bench", "import", "--k", "64", "--n", "64", "--group", "48"],
        vec!["bench", "import", "--k", "64", "--n", "64", "--runs", "0"],
        vec![
            "bench",
            "import",
            "--k",
            "64",
            "--n",
            "64",
            "--runs",
            "18446744073709551615",
        ],
    ];
    cases.iter().map(|c| os(c)).collect()
}

#[test]
fn the_cli_survives_hostile_arguments() {
    let seed = env_number("TILUS_FUZZ_SEED").unwrap_or(BASE_SEED);
    let generated = env_number("TILUS_FUZZ_CASES").map_or(DEFAULT_GENERATED, |n| n as usize);
    let fixed = fixed_cases();
    let cache = std::env::temp_dir().join(format!("tilus-fuzz-cli-{}", std::process::id()));
    std::fs::create_dir_all(&cache).expect("create a scratch cache directory");
    let mut gen = Gen::new(seed);
    let (inputs, outputs) = checkpoint_files(&cache);
    let mut fixed = fixed;
    fixed.extend(checkpoint_cases(&inputs, &outputs));
    let nfixed = fixed.len();
    gen.inputs.extend(inputs);
    gen.outputs.extend(outputs);
    let cases: Vec<Vec<OsString>> = fixed
        .into_iter()
        .chain((0..generated).map(|_| gen.case()))
        .collect();
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    // Exit 0; exit 2 (or doctor's 1) from tilus's own checks; exit 2 from clap's parser.
    let counts = [(); 3].map(|()| AtomicUsize::new(0));
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let slowest: Mutex<(Duration, usize)> = Mutex::new((Duration::ZERO, 0));
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(args) = cases.get(i) else { break };
                let outcome = run_tilus(args, &cache);
                let class = match outcome.status.and_then(|s| s.code()) {
                    Some(0) => 0,
                    Some(2) if outcome.stderr.contains("Usage:") => 2,
                    _ => 1,
                };
                counts[class].fetch_add(1, Ordering::Relaxed);
                {
                    let mut slow = slowest.lock().unwrap_or_else(|e| e.into_inner());
                    if outcome.elapsed > slow.0 {
                        *slow = (outcome.elapsed, i);
                    }
                }
                if let Some(why) = verdict(args, &outcome) {
                    let kind = if i < nfixed { "fixed" } else { "generated" };
                    failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("case {i} ({kind}): {}\n    {why}", show(args)));
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&cache);
    let elapsed = started.elapsed();
    let (slow, slow_case) = *slowest.lock().unwrap_or_else(|e| e.into_inner());
    // Straight to stderr, past libtest's capture, so the counts show in every run.
    let _ = writeln!(
        std::io::stderr(),
        "fuzz_cli: {} cases ({nfixed} fixed + {generated} generated) in {:.1} s on {workers} \
         workers (seed {seed}): {} ran, {} rejected by tilus, {} by the argument parser; \
         slowest {:.2} s: {}",
        cases.len(),
        elapsed.as_secs_f64(),
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
        counts[2].load(Ordering::Relaxed),
        slow.as_secs_f64(),
        show(&cases[slow_case])
    );
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(
        failures.is_empty(),
        "{} of {} cases failed (seed {seed}; rerun with TILUS_FUZZ_SEED={seed}):\n{}",
        failures.len(),
        cases.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The harness itself: a panic, a signal and a hang are all caught.
#[test]
fn the_harness_catches_what_it_looks_for() {
    let args = os(&["layout", "local(2)"]);
    let ok = |code: i32| Outcome {
        status: Some(ExitStatus::from_raw(code << 8)),
        timed_out: false,
        elapsed: Duration::ZERO,
        stderr: String::new(),
    };
    assert!(verdict(&args, &ok(0)).is_none());
    assert!(verdict(&args, &ok(1)).is_some(), "exit 1 is only doctor's");
    assert!(verdict(&os(&["doctor"]), &ok(1)).is_none());
    assert!(verdict(&args, &ok(2)).is_some(), "exit 2 needs a message");
    let usage = Outcome {
        stderr: "error: unexpected argument '--x' found".into(),
        ..ok(2)
    };
    assert!(verdict(&args, &usage).is_none());
    assert!(verdict(&args, &ok(101)).is_some());
    let panicked = Outcome {
        stderr: "thread 'main' panicked at src/x.rs:1:1".into(),
        ..ok(0)
    };
    assert!(verdict(&args, &panicked).is_some());
    let signalled = Outcome {
        status: Some(ExitStatus::from_raw(6)), // SIGABRT
        ..ok(0)
    };
    assert!(verdict(&args, &signalled).unwrap().contains("signal 6"));
    let hung = Outcome {
        timed_out: true,
        ..ok(0)
    };
    assert!(verdict(&args, &hung).is_some());
    // The memory limit leaves room for real work.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {MEMORY_LIMIT_KB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_tilus"))
        .args(["dtype", "u4"])
        .output()
        .expect("run tilus under ulimit");
    assert_eq!(out.status.code(), Some(0));
}
