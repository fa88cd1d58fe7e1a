//! `tilus bench tune`: arguments are checked (one-line errors naming the flag, exit status 2)
//! before a GPU is looked for; with a GPU, a second run reuses the persisted winner.

#[path = "common/skip.rs"]
mod skip;

use skip::{skip, Need};
use std::process::{Command, Output};

/// The binary under test: cargo's build, or `TILUS_BIN` where the test binary was copied to
/// another machine (the GPU host) without its build tree.
fn tilus(args: &[&str], cache: &std::path::Path) -> Output {
    let bin = std::env::var_os("TILUS_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_tilus").into());
    Command::new(bin)
        .args(args)
        .env("TILUS_CACHE_DIR", cache)
        .env_remove("TILUS_CACHE")
        .output()
        .expect("run the tilus binary")
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "tilus-cli-tune-{tag}-{}-{nanos}",
        std::process::id()
    ))
}

#[test]
fn bad_arguments_are_named_before_the_gpu_is_opened() {
    let dir = temp_dir("args");
    for (args, flag) in [
        (&["--wdtype", "i33", "--m", "1"][..], "`--wdtype`"),
        (&["--wdtype", "f16", "--m", "1"], "`--wdtype`"),
        (&["--wdtype", "i4", "--m", "0"], "`--m`"),
        (&["--wdtype", "i4", "--m", "1", "--n", "4008"], "`--n`"),
        (&["--wdtype", "i4", "--m", "1", "--k", "100"], "`--k`"),
        (
            &["--wdtype", "i4", "--m", "1", "--points", "0"],
            "`--points`",
        ),
        // Was a capacity-overflow panic (exit 101).
        (
            &[
                "--wdtype",
                "i4",
                "--m",
                "1",
                "--points",
                "18446744073709551615",
            ],
            "`--points`",
        ),
        (
            &["--wdtype", "i4", "--m", "1", "--adtype", "f32"],
            "`--adtype`",
        ),
    ] {
        let mut all = vec!["bench", "tune"];
        all.extend_from_slice(args);
        let out = tilus(&all, &dir);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains(flag), "{all:?}: {err}");
        // Checked before any GPU: no driver or device message.
        assert!(!err.contains("libcuda") && !err.contains("device"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn second_run_reuses_the_persisted_winner() {
    let dir = temp_dir("reuse");
    let args = [
        "bench", "tune", "--wdtype", "i4", "--m", "1", "--n", "4096", "--k", "4096", "--points",
        "6",
    ];
    let first = tilus(&args, &dir);
    let text = String::from_utf8_lossy(&first.stdout).to_string();
    let err = String::from_utf8_lossy(&first.stderr).to_string();
    if !first.status.success() {
        // No GPU here: the error says so, on one line.
        assert_eq!(first.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        skip("second_run_reuses_the_persisted_winner", Need::Gpu, &err);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    println!("{text}");
    assert!(text.contains("points: 6"), "{text}");
    assert!(text.contains("(measured now)"), "{text}");
    assert!(text.contains("winner: bm"), "{text}");
    assert!(
        text.contains(&dir.join("tune").display().to_string()),
        "{text}"
    );
    let second = tilus(&args, &dir);
    let text2 = String::from_utf8_lossy(&second.stdout).to_string();
    println!("{text2}");
    assert!(second.status.success());
    assert!(text2.contains("(reused the persisted winner)"), "{text2}");
    let winner = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("winner:"))
            .map(String::from)
    };
    assert_eq!(winner(&text), winner(&text2));
    // --retune measures again.
    let mut again = args.to_vec();
    again.push("--retune");
    let third = String::from_utf8_lossy(&tilus(&again, &dir).stdout).to_string();
    assert!(third.contains("(measured now)"), "{third}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tilus bench sweep --shapes`: a malformed list is refused, naming the flag, before a GPU is
/// looked for; `llama70b` and `NxK` lists are accepted by the checks.
#[test]
fn sweep_shapes_are_checked_before_the_gpu_is_opened() {
    let dir = temp_dir("shapes");
    for bad in ["12x", "0x8192", "8192x", "llama70", "8192x8192,", "ax1"] {
        let out = tilus(&["bench", "sweep", "--shapes", bad, "--m", "1"], &dir);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("argument `--shapes`"), "{bad}: {err}");
        assert!(!err.contains("libcuda"), "{err}");
    }
    // The L2 flush mode of the matmul benchmarks.
    for cmd in [
        &["bench", "sweep", "--l2", "warm"][..],
        &[
            "bench", "qmatmul", "--wdtype", "i4", "--m", "1", "--l2", "cold",
        ][..],
        &[
            "bench", "gemm", "--m", "1", "--n", "64", "--k", "64", "--l2", "",
        ][..],
    ] {
        let out = tilus(cmd, &dir);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("argument `--l2`"), "{cmd:?}: {err}");
        assert!(!err.contains("libcuda"), "{err}");
    }
    for cmd in [
        &["bench", "sweep", "--adtype", "f32"][..],
        &[
            "bench", "qmatmul", "--wdtype", "i4", "--m", "1", "--adtype", "i4",
        ][..],
    ] {
        let out = tilus(cmd, &dir);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("argument `--adtype`"), "{cmd:?}: {err}");
    }
    for good in ["llama70b", "8192x8192,8192x28672"] {
        let out = tilus(&["bench", "sweep", "--shapes", good, "--m", "1"], &dir);
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!err.contains("`--shapes`"), "{good}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tilus bench <bench> <args>` exits with a usage error (code 2) naming `flag`, before a
/// GPU is looked for.
fn assert_refused(dir: &std::path::Path, bench: &str, args: &[&str], flag: &str) {
    let mut all = vec!["bench", bench];
    all.extend(args);
    let out = tilus(&all, dir);
    assert_eq!(out.status.code(), Some(2), "{bench} {args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("argument `{flag}`")),
        "{bench} {args:?}: {err}"
    );
    assert!(!err.contains("libcuda"), "{err}");
}

/// `tilus bench step`: malformed flags are refused, naming the flag, before a GPU is looked
/// for; the defaults and well-formed lists pass the checks.
#[test]
fn step_flags_are_checked_before_the_gpu_is_opened() {
    let dir = temp_dir("step");
    let bad: [(&[&str], &str); 6] = [
        (&["--wdtypes", "u2,q4"], "--wdtypes"),
        (&["--shapes", "llama70"], "--shapes"),
        (&["--m", "1,,16"], "--m"),
        (&["--adtype", "f32"], "--adtype"),
        (&["--l2", "warm"], "--l2"),
        (&["--runs", "0"], "--runs"),
    ];
    for (args, flag) in bad {
        assert_refused(&dir, "step", args, flag);
    }
    // Small enough to run in a moment where there is a GPU.
    let good = [
        "bench",
        "step",
        "--wdtypes",
        "i3,u4",
        "--shapes",
        "1024x1024,512x1024",
        "--m",
        "1,2",
        "--runs",
        "1",
    ];
    let err = String::from_utf8(tilus(&good, &dir).stderr).unwrap();
    assert!(!err.contains("argument `"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tilus bench attention`: malformed flags are refused, naming the flag, before a GPU is
/// looked for; well-formed ones pass the checks.
#[test]
fn attention_flags_are_checked_before_the_gpu_is_opened() {
    let dir = temp_dir("attention");
    let bad: [(&[&str], &str); 10] = [
        (&["--kv", "f16"], "--kv"),
        (&["--kv", "q9"], "--kv"),
        (&["--kv", "cq3"], "--kv"),
        (&["--kv", "cq2", "--heads", "32/8/64"], "--heads"),
        (&["--heads", "64/8"], "--heads"),
        (&["--batch", "0"], "--batch"),
        (&["--lens", "1k"], "--lens"),
        (&["--page", "8"], "--page"),
        (&["--l2", "warm"], "--l2"),
        (&["--prefill", "1x4096x32x8"], "--prefill"),
    ];
    for (args, flag) in bad {
        assert_refused(&dir, "attention", args, flag);
    }
    for good in [
        &["--kv", "u4", "--heads", "32/8/64"][..],
        &["--kv", "cq2"][..],
        &["--kv", "cq4g", "--sweep"][..],
        &["--prefill", "issue"][..],
        &["--prefill", "2x1000x16x4x64", "--l2", "dirty"][..],
    ] {
        let mut all = vec!["bench", "attention"];
        all.extend(good);
        let out = tilus(&all, &dir);
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!err.contains("argument `"), "{good:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tilus bench apt`: malformed widths, m values and shapes, `--popc-only` with the tokens or
/// flags of the kernels it does not time, and `--step` with flags that choose kernels or tiles,
/// are refused, naming the flag, before a GPU is looked for.
#[test]
fn apt_flags_are_checked_before_the_gpu_is_opened() {
    let dir = temp_dir("apt");
    let bad: [(&[&str], &str); 20] = [
        (&["--l2", "warm"], "--l2"),
        (&["--stages", "1"], "--stages"),
        (&["--stages", "9"], "--stages"),
        // `--step` times each layer on its own path.
        (&["--step", "--tune", "--m", "1"], "--step"),
        (&["--step", "--popc-only", "--m", "1"], "--step"),
        (&["--step", "--imma-tiles", "256x256x4x5x4"], "--step"),
        // `--popc-only` times the popc kernel alone: only at m <= 4 (the default m has 64), and
        // the other kernels' flags are refused.
        (&["--popc-only"], "--popc-only"),
        (&["--popc-only", "--m", "1,8"], "--popc-only"),
        (&["--popc-only", "--m", "1", "--stages", "4"], "--stages"),
        (
            &["--popc-only", "--m", "1", "--gemm-tiles", "2x2x2x2x1x3"],
            "--gemm-tiles",
        ),
        (&["--popc-tiles", "4x4"], "--popc-tiles"),
        (&["--popc-tiles", "4x4x8"], "--popc-tiles"),
        (&["--popc-tiles", "4x4x4,6x1x4"], "--popc-tiles"),
        // `--tune` chooses the popc tiles: a list of them beside it is refused.
        (&["--tune", "--m", "1", "--popc-tiles", "8x4x4"], "--tune"),
        (&["--widths", "W9A2"], "--widths"),
        (&["--widths", "W2"], "--widths"),
        (&["--m", "0"], "--m"),
        (&["--shapes", "100x256"], "--shapes"),
        (&["--shapes", "1024x1000"], "--shapes"),
        (&["--runs", "0"], "--runs"),
    ];
    for (args, flag) in bad {
        let mut all = vec!["bench", "apt"];
        all.extend(args);
        let out = tilus(&all, &dir);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains(&format!("argument `{flag}`")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("libcuda"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tilus bench vq`: malformed formats, m values, shapes, caches, reductions and table tilings are refused, naming the
/// flag, before a GPU is looked for; without a GPU it says it needs one.
#[test]
fn vq_flags_are_checked_before_the_gpu_is_opened() {
    let dir = temp_dir("vq");
    let bad: [(&[&str], &str); 17] = [
        (&["--l2", "warm"], "--l2"),
        (&["--dense", "--m", "16385"], "--m"),
        (&["--stages", "1"], "--stages"),
        (&["--reduce", "sum"], "--reduce"),
        (&["--split", "3"], "--split"),
        (&["--configs", "quip2"], "--configs"),
        (&["--configs", "cq2"], "--configs"),
        (&["--m", "0"], "--m"),
        (&["--m", "17"], "--m"),
        (&["--shapes", "100x256"], "--shapes"),
        (&["--cache", "12"], "--cache"),
        (&["--cache", "0/256"], "--cache"),
        (&["--warps", "3"], "--warps"),
        (&["--product", "4"], "--product"),
        (&["--runs", "0"], "--runs"),
        (&["--lut", "maybe"], "--lut"),
        (&["--lut", "16x28"], "--lut"),
    ];
    for (args, flag) in bad {
        let mut all = vec!["bench", "vq"];
        all.extend(args);
        let out = tilus(&all, &dir);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains(&format!("argument `{flag}`")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("libcuda"), "{err}");
    }
    // Above the GEMV's 16 tokens `--m` names `--dense`, and with it a prefill's are valid.
    let out = tilus(&["bench", "vq", "--m", "17"], &dir);
    assert!(String::from_utf8(out.stderr).unwrap().contains("--dense"));
    for args in [
        &["bench", "vq", "--shapes", "256x256", "--m", "1"][..],
        &[
            "bench", "vq", "--shapes", "256x256", "--m", "4096", "--dense",
        ],
    ] {
        let out = tilus(args, &dir);
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!err.contains("argument `--m`"), "{args:?}: {err}");
        if !out.status.success() && err.contains("libcuda") {
            assert!(err.contains("needs a GPU"), "{err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tilus bench qmatmul --config`: a configuration the library refuses, an unknown key, a key
/// that the benchmark's own flags set, a tile that does not divide the shape or a ring that does
/// not fit in shared memory is one line naming `--config`, before any GPU.
#[test]
fn qmatmul_configs_are_checked_before_the_gpu_is_opened() {
    let dir = temp_dir("configs");
    let imma = "METHOD=gemv_imma,BM=1,BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2";
    for (bad, says, wdtype, n) in [
        ("METHOD=gemv_wgmma,BK=128", "bk", "i4", "57344"),
        ("METHOD=gemv_wgmma,WARPS=6", "warps", "i4", "57344"),
        ("METHOD=gemv,BM=12", "bm", "i4", "57344"),
        ("METHOD=fastest", "METHOD", "i4", "57344"),
        ("TILE=3", "unknown configuration key", "i4", "57344"),
        ("WDTYPE=u2", "--wdtype", "i4", "57344"),
        ("BN=abc", "BN", "i4", "57344"),
        // The scan's tiling of u2, fine there, does not divide 8192 columns ...
        (
            imma,
            "not a multiple of the weight tile width",
            "u2",
            "8192",
        ),
        // ... and its 4-stage ring of 4-bit tiles needs more than a block's shared memory.
        (imma, "shared memory", "u4", "57344"),
    ] {
        let out = tilus(
            &[
                "bench", "qmatmul", "--wdtype", wdtype, "--m", "1", "--n", n, "--config", bad,
            ],
            &dir,
        );
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains("argument `--config`"), "{bad}: {err}");
        assert!(err.contains(says), "{bad}: {err}");
        assert!(!err.contains("libcuda"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
