//! Helpers shared by the GPU test targets (`mod common;` in each): a context that skips the
//! test visibly (`skip`) on a machine without a usable GPU, and scratch directories.
#![allow(dead_code)] // each target uses its own subset

pub mod attention;
pub mod cq;
pub mod math;
pub mod skip;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tilus::runtime::{Context, ContextBuilder};

/// The context `builder` makes, or `None` (after reporting the skip, see [`skip`]) when this
/// machine cannot run CUDA. `TILUS_REQUIRE_GPU=1` turns the skip into a failure; any other
/// error fails the test.
pub fn gpu_context(test: &str, builder: ContextBuilder) -> Option<Arc<Context>> {
    match builder.build() {
        Ok(ctx) => Some(ctx),
        Err(e) if e.is_unavailable() => {
            skip::skip(test, skip::Need::Gpu, &e.to_string());
            None
        }
        Err(e) => panic!("{test}: cannot open device 0: {e}"),
    }
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "tilus-test-{tag}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The value of environment variable `name` as a number (`None` when unset); a value that is
/// not one fails the test, naming it (the fuzz suites' `TILUS_FUZZ_SEED`, `TILUS_FUZZ_CASES`).
pub fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: expected a non-negative integer")),
    )
}

/// The timings of a tuning that measured (not remembered) its points, checked to keep the
/// fastest: all `points` of them timed, or with `None` at least one (a tuner may skip points
/// that fail to build).
pub fn fresh_fastest(
    outcome: &tilus::runtime::TuneOutcome,
    points: Option<usize>,
    tag: &str,
) -> Vec<f64> {
    assert!(!outcome.reused(), "{tag}: tuned before?");
    let timed: Vec<f64> = outcome
        .record
        .candidates
        .iter()
        .filter_map(|c| c.median_us)
        .collect();
    match points {
        Some(n) => assert_eq!(timed.len(), n, "{tag}: a point failed"),
        None => assert!(!timed.is_empty(), "{tag}: nothing measured"),
    }
    assert!(
        timed.iter().all(|&t| t >= outcome.median_us),
        "{tag}: {} us is not the fastest of {timed:?}",
        outcome.median_us
    );
    timed
}
