//! Autotuning: on first use per (kernel, shape bucket, GPU, driver), measure every candidate
//! configuration, keep the fastest, persist it, and reuse it from then on.
//!
//! The tuner knows nothing about any particular kernel. A caller hands it
//!
//! * a [`TuneKey`]: the kernel family, a *shape bucket* (a string naming the range of problem
//!   shapes one winner is good for, chosen by the kernel), the GPU name and the driver version;
//! * the candidates, anything that describes itself as JSON ([`TuneCandidate`]);
//! * a `measure` closure that times one candidate (normally [`crate::time_runs`]: CUDA events,
//!   warm-up, median, L2 flushed before every timed run) and, optionally, a `prepare` closure
//!   run for all candidates in parallel first (code generation and NVRTC compilation are CPU
//!   work that would otherwise dominate the tuning time).
//!
//! Rules, all tested without a GPU:
//!
//! * **Lookup order.** Memory (per [`Tuner`], so repeated calls in one process never touch the
//!   disk), then the record file, then measuring. Tuning runs are serialized per tuner: two
//!   threads asking for the same key measure once, and two different keys never share the GPU
//!   while being timed.
//! * **Record.** `<cache dir>/tune/<kernel>-<32 hex>.json`, the hex a SHA-256 over the key
//!   fields and the *space fingerprint* (a hash of every candidate's JSON, in order): a changed
//!   candidate list is a new record, never a stale winner. The file holds the key fields, the
//!   fingerprint, the winner (index, configuration, median microseconds) and every candidate's
//!   measurement or error ([`TuneRecord`]).
//! * **Trust.** A record that does not parse, has another format version, names another key or
//!   candidate list, or whose winner is not a measured candidate, is ignored, deleted and
//!   rebuilt; it never panics and is never used.
//! * **Failures.** A candidate whose preparation or measurement fails (compile error, launch
//!   error, even a panic) is skipped and its error recorded. If every candidate fails, tuning
//!   is an error naming the kernel and the first failure.
//! * **Degrading.** Writes are atomic (temporary file + rename, [`write_atomic`]). A directory
//!   that cannot be created or written turns persistence off for this tuner with one warning
//!   on stderr; winners then live in memory only. With the kernel cache off (`TILUS_CACHE=off`)
//!   tuning is memory-only as well.
//! * **Progress.** A progress bar on stderr while tuning, only when stderr is a terminal.

use crate::device::DeviceInfo;
use crate::disk_cache::{
    default_dir, env_disables_cache, write_atomic_steps, CacheKey, WriteFailure,
};
use crate::error::{Result, RuntimeError};
use crate::timing::Timing;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{self, IsTerminal};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Version of the record file layout; a record of another version is rebuilt.
pub const RECORD_FORMAT: u32 = 1;

/// Untimed runs before a candidate's timed runs (see [`crate::time_runs`]).
pub const WARMUP_RUNS: usize = 3;
/// Timed runs per candidate; the median is what candidates are compared by.
pub const TIMED_RUNS: usize = 15;
/// The largest record file read. A record is JSON with one short measurement per candidate:
/// kilobytes, about a megabyte for thousands of candidates; a larger file is junk.
const MAX_RECORD_LEN: u64 = 16 << 20;

/// What one tuning result is valid for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TuneKey {
    /// Kernel family, e.g. `qmatmul`.
    pub kernel: String,
    /// The range of shapes one winner serves, chosen by the kernel (e.g. `m<=16 n=4096 ...`).
    pub bucket: String,
    /// GPU name as the driver reports it.
    pub gpu: String,
    /// Driver CUDA version, e.g. `13000`.
    pub driver: i32,
}

impl TuneKey {
    pub fn new(
        kernel: impl Into<String>,
        bucket: impl Into<String>,
        gpu: impl Into<String>,
        driver: i32,
    ) -> TuneKey {
        TuneKey {
            kernel: kernel.into(),
            bucket: bucket.into(),
            gpu: gpu.into(),
            driver,
        }
    }

    /// A key for `device` (its name and the driver version), e.g. `ctx.device()`.
    pub fn for_device(
        device: &DeviceInfo,
        kernel: impl Into<String>,
        bucket: impl Into<String>,
    ) -> TuneKey {
        TuneKey::new(kernel, bucket, device.name.clone(), device.driver_version)
    }
}

impl fmt::Display for TuneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{}] on {} (driver {})",
            self.kernel, self.bucket, self.gpu, self.driver
        )
    }
}

/// A candidate configuration: it describes itself as JSON, which is what records store and
/// compare. Two candidates of one list must not have the same JSON.
pub trait TuneCandidate {
    fn to_json(&self) -> Value;
}

impl TuneCandidate for Value {
    fn to_json(&self) -> Value {
        self.clone()
    }
}

/// One candidate's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub config: Value,
    /// Median, fastest and slowest run in microseconds; `None` when the candidate failed.
    pub median_us: Option<f64>,
    pub min_us: Option<f64>,
    pub max_us: Option<f64>,
    pub samples: usize,
    /// Why the candidate could not be measured.
    pub error: Option<String>,
}

/// The persisted result of one tuning run (the JSON file, field for field).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneRecord {
    pub format: u32,
    pub kernel: String,
    pub bucket: String,
    pub gpu: String,
    pub driver: i32,
    /// SHA-256 (hex) of the candidates' JSON, in order.
    pub space: String,
    /// Index of the winner in `candidates`.
    pub winner: usize,
    pub winner_config: Value,
    pub winner_us: f64,
    pub candidates: Vec<Measurement>,
    /// Wall time of the tuning run (preparation and measurement).
    pub tune_seconds: f64,
    /// When it was tuned, seconds since the Unix epoch.
    pub created_unix: u64,
    /// The tilus version that tuned it (informational).
    pub tilus_version: String,
}

impl TuneRecord {
    /// Why this record cannot serve `key` with candidates `configs` (fingerprint `space`).
    fn check(&self, key: &TuneKey, configs: &[Value], space: &str) -> Result<(), String> {
        if self.format != RECORD_FORMAT {
            return Err(format!(
                "record format {} (expected {RECORD_FORMAT})",
                self.format
            ));
        }
        let fields = [
            ("kernel", &self.kernel, &key.kernel),
            ("bucket", &self.bucket, &key.bucket),
            ("gpu", &self.gpu, &key.gpu),
        ];
        for (name, stored, wanted) in fields {
            if stored != wanted {
                return Err(format!("{name} is `{stored}`, not `{wanted}`"));
            }
        }
        if self.driver != key.driver {
            return Err(format!("driver is {}, not {}", self.driver, key.driver));
        }
        if self.space != space || self.candidates.len() != configs.len() {
            return Err("another candidate list".into());
        }
        if self
            .candidates
            .iter()
            .zip(configs)
            .any(|(m, c)| &m.config != c)
        {
            return Err("another candidate list".into());
        }
        let Some(w) = self.candidates.get(self.winner) else {
            return Err(format!("winner index {} out of range", self.winner));
        };
        if self.winner_config != configs[self.winner] {
            return Err("winner configuration is not the candidate at its index".into());
        }
        match w.median_us {
            Some(us) if us.is_finite() && us >= 0.0 && us == self.winner_us => Ok(()),
            _ => Err("the winner has no valid measurement".into()),
        }
    }
}

/// Where a [`TuneOutcome`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TuneSource {
    /// Measured just now.
    Measured,
    /// This tuner had it in memory.
    Memory,
    /// Read from the record file.
    Disk,
}

/// The result of [`Tuner::tune`].
#[derive(Clone, Debug)]
pub struct TuneOutcome {
    /// Index of the winner in the candidates passed in.
    pub index: usize,
    /// Its median time in microseconds (as measured when it was tuned).
    pub median_us: f64,
    pub source: TuneSource,
    /// Time spent in this call (tuning, or finding the record).
    pub elapsed: Duration,
    pub record: Arc<TuneRecord>,
    /// The record file, when persistence is on.
    pub path: Option<PathBuf>,
}

impl TuneOutcome {
    /// Whether the winner was reused rather than measured in this call.
    pub fn reused(&self) -> bool {
        self.source != TuneSource::Measured
    }
}

/// Counters per [`Tuner`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TuneStats {
    /// Tuning runs (candidates measured).
    pub tuned: u64,
    pub memory_hits: u64,
    pub disk_hits: u64,
    /// Record files ignored as corrupt or mismatched (then rebuilt).
    pub rejected: u64,
}

#[derive(Default)]
struct Counters {
    tuned: AtomicU64,
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    rejected: AtomicU64,
}

/// Remembers winners in memory and, where it can, on disk. See the module documentation.
/// All methods take `&self`; share it freely ([`crate::Context::tuner`] holds one per context).
pub struct Tuner {
    dir: Option<PathBuf>,
    /// Set once the directory proved unusable; persistence is off from then on.
    broken: Mutex<Option<String>>,
    warned: AtomicBool,
    memory: Mutex<HashMap<String, Arc<TuneRecord>>>,
    /// Held while tuning, so that measurements never overlap.
    busy: Mutex<()>,
    progress: bool,
    counters: Counters,
}

impl fmt::Debug for Tuner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tuner")
            .field("dir", &self.dir())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Tuner {
    fn with_dir(dir: Option<PathBuf>) -> Tuner {
        let tuner = Tuner {
            dir,
            broken: Mutex::new(None),
            warned: AtomicBool::new(false),
            memory: Mutex::new(HashMap::new()),
            busy: Mutex::new(()),
            progress: io::stderr().is_terminal(),
            counters: Counters::default(),
        };
        if let Some(dir) = &tuner.dir {
            if let Err(e) = fs::create_dir_all(dir) {
                tuner.give_up(format!("cannot create it: {e}"));
            }
        }
        tuner
    }

    /// The tuner of a kernel cache: records under `<kernel cache dir>/tune`, memory-only when
    /// there is no disk cache (what [`crate::Context::tuner`] holds).
    pub fn for_cache_dir(cache_dir: Option<&Path>) -> Tuner {
        Tuner::with_dir(cache_dir.map(|d| d.join("tune")))
    }

    /// Records in `dir` (created if needed; an unusable one means memory-only, one warning).
    pub fn at(dir: impl Into<PathBuf>) -> Tuner {
        Tuner::with_dir(Some(dir.into()))
    }

    /// A tuner that never touches the disk.
    pub fn in_memory() -> Tuner {
        Tuner::with_dir(None)
    }

    /// Records where the environment puts the kernel cache (`TILUS_CACHE`, `TILUS_CACHE_DIR`,
    /// the user cache directory), under `tune/`.
    pub fn from_env() -> Tuner {
        if env_disables_cache() {
            return Tuner::in_memory();
        }
        Tuner::with_dir(default_dir().map(|d| d.join("tune")))
    }

    /// Show (or not) the progress bar; the default is to show it when stderr is a terminal.
    pub fn with_progress(mut self, on: bool) -> Tuner {
        self.progress = on;
        self
    }

    /// The directory records are written to, if persistence is on.
    pub fn dir(&self) -> Option<&Path> {
        if self
            .broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            return None;
        }
        self.dir.as_deref()
    }

    pub fn stats(&self) -> TuneStats {
        let c = &self.counters;
        TuneStats {
            tuned: c.tuned.load(Ordering::SeqCst),
            memory_hits: c.memory_hits.load(Ordering::SeqCst),
            disk_hits: c.disk_hits.load(Ordering::SeqCst),
            rejected: c.rejected.load(Ordering::SeqCst),
        }
    }

    /// Whether this tuner has printed its (single) warning about the directory.
    pub fn has_warned(&self) -> bool {
        self.warned.load(Ordering::SeqCst)
    }

    /// The record file for `key` and `candidates`, when persistence is on (whether or not the
    /// file exists).
    pub fn record_path<C: TuneCandidate>(
        &self,
        key: &TuneKey,
        candidates: &[C],
    ) -> Option<PathBuf> {
        let (_, space) = describe(candidates);
        self.dir().map(|d| d.join(file_name(key, &space)))
    }

    /// The remembered winner for `key` and `candidates`, without measuring anything.
    pub fn lookup<C: TuneCandidate>(&self, key: &TuneKey, candidates: &[C]) -> Option<TuneOutcome> {
        let started = Instant::now();
        let (configs, space) = describe(candidates);
        self.find(key, &configs, &space, started)
    }

    /// Forget the winner for `key` and `candidates` (memory and disk), so the next
    /// [`Tuner::tune`] measures again.
    pub fn forget<C: TuneCandidate>(&self, key: &TuneKey, candidates: &[C]) {
        let (_, space) = describe(candidates);
        let name = file_name(key, &space);
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
        if let Some(dir) = self.dir() {
            let _ = fs::remove_file(dir.join(name));
        }
    }

    /// The winner among `candidates` for `key`: remembered, or measured now with `measure`
    /// (called once per candidate, in order, never concurrently). See the module docs.
    pub fn tune<C, E>(
        &self,
        key: &TuneKey,
        candidates: &[C],
        mut measure: impl FnMut(usize, &C) -> Result<Timing, E>,
    ) -> Result<TuneOutcome>
    where
        C: TuneCandidate + Sync,
        E: fmt::Display,
    {
        self.tune_with(
            key,
            candidates,
            |_, _| Ok::<(), E>(()),
            |i, c, ()| measure(i, c),
        )
    }

    /// [`Tuner::tune`] with a `prepare` step run for every candidate first, in parallel on all
    /// CPU cores (e.g. code generation and compilation); `measure` then gets what it made.
    /// Neither closure runs when the winner is remembered.
    pub fn tune_with<C, P, E>(
        &self,
        key: &TuneKey,
        candidates: &[C],
        prepare: impl Fn(usize, &C) -> Result<P, E> + Sync,
        mut measure: impl FnMut(usize, &C, P) -> Result<Timing, E>,
    ) -> Result<TuneOutcome>
    where
        C: TuneCandidate + Sync,
        P: Send,
        E: fmt::Display,
    {
        let started = Instant::now();
        let fail = |message: String| RuntimeError::Tune {
            kernel: key.kernel.clone(),
            bucket: key.bucket.clone(),
            message,
        };
        if candidates.is_empty() {
            return Err(fail("no candidate configurations".into()));
        }
        let (configs, space) = describe(candidates);
        if let Some(dup) = (1..configs.len()).find(|&i| configs[..i].contains(&configs[i])) {
            return Err(fail(format!(
                "candidate {dup} repeats an earlier one: {}",
                configs[dup]
            )));
        }
        if let Some(hit) = self.find(key, &configs, &space, started) {
            return Ok(hit);
        }
        let _busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        // Someone may have tuned this key while we waited.
        if let Some(hit) = self.find(key, &configs, &space, started) {
            return Ok(hit);
        }
        self.counters.tuned.fetch_add(1, Ordering::SeqCst);
        let n = candidates.len();
        let bar = self.progress_bar(key, n);

        // Phase 1: prepare every candidate, in parallel.
        bar.set_message(format!("tuning {}: preparing", key.kernel));
        let prepared = prepare_all(candidates, &prepare, &bar);

        // Phase 2: measure, one at a time.
        bar.set_position(0);
        bar.set_message(format!("tuning {}: measuring", key.kernel));
        let mut results = Vec::with_capacity(n);
        for (i, (cand, prep)) in candidates.iter().zip(prepared).enumerate() {
            let m = match prep {
                Err(e) => failed(&configs[i], format!("preparing: {e}")),
                Ok(p) => match catch_unwind(AssertUnwindSafe(|| measure(i, cand, p))) {
                    Ok(Ok(t)) if t.median_us.is_finite() && t.median_us >= 0.0 => Measurement {
                        config: configs[i].clone(),
                        median_us: Some(t.median_us),
                        min_us: Some(t.min_us),
                        max_us: Some(t.max_us),
                        samples: t.samples,
                        error: None,
                    },
                    Ok(Ok(t)) => failed(
                        &configs[i],
                        format!("measuring: invalid median {} us", t.median_us),
                    ),
                    Ok(Err(e)) => failed(&configs[i], format!("measuring: {e}")),
                    Err(panic) => failed(
                        &configs[i],
                        format!("measuring panicked: {}", panic_message(&panic)),
                    ),
                },
            };
            results.push(m);
            bar.inc(1);
        }
        bar.finish_and_clear();

        let winner = results
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.median_us.map(|us| (i, us)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let Some((index, winner_us)) = winner else {
            let (i, first) = results
                .iter()
                .enumerate()
                .find_map(|(i, m)| m.error.as_ref().map(|e| (i, e)))
                .expect("every candidate failed, so each has an error");
            return Err(fail(format!(
                "all {n} candidate configurations failed; the first (candidate {i}, {}): {first}",
                configs[i]
            )));
        };
        let elapsed = started.elapsed();
        let record = Arc::new(TuneRecord {
            format: RECORD_FORMAT,
            kernel: key.kernel.clone(),
            bucket: key.bucket.clone(),
            gpu: key.gpu.clone(),
            driver: key.driver,
            space: space.clone(),
            winner: index,
            winner_config: configs[index].clone(),
            winner_us,
            candidates: results,
            tune_seconds: elapsed.as_secs_f64(),
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            tilus_version: env!("CARGO_PKG_VERSION").to_string(),
        });
        let name = file_name(key, &space);
        let path = self.store(&name, &record);
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, record.clone());
        if self.progress {
            let failed = record
                .candidates
                .iter()
                .filter(|m| m.error.is_some())
                .count();
            eprintln!(
                "tilus: tuned {key}: {n} configurations{} in {:.1} s, best {winner_us:.1} us",
                if failed > 0 {
                    format!(" ({failed} failed)")
                } else {
                    String::new()
                },
                elapsed.as_secs_f64()
            );
        }
        Ok(TuneOutcome {
            index,
            median_us: winner_us,
            source: TuneSource::Measured,
            elapsed,
            record,
            path,
        })
    }

    /// Memory, then disk.
    fn find(
        &self,
        key: &TuneKey,
        configs: &[Value],
        space: &str,
        started: Instant,
    ) -> Option<TuneOutcome> {
        let name = file_name(key, space);
        let outcome = |record: Arc<TuneRecord>, source| TuneOutcome {
            index: record.winner,
            median_us: record.winner_us,
            source,
            elapsed: started.elapsed(),
            path: self.dir().map(|d| d.join(&name)),
            record,
        };
        let remembered = self
            .memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&name)
            .cloned();
        if let Some(record) = remembered {
            // Only this tuner writes its memory, after checking; a mismatch would be a hash
            // collision. Check anyway, it is cheap.
            if record.check(key, configs, space).is_ok() {
                self.counters.memory_hits.fetch_add(1, Ordering::SeqCst);
                return Some(outcome(record, TuneSource::Memory));
            }
        }
        let path = self.dir()?.join(&name);
        // Anything far larger than a record (or not a file) is junk, rejected from its
        // metadata rather than read whole.
        match fs::metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Ok(m) if m.is_file() && m.len() <= MAX_RECORD_LEN => {}
            _ => {
                self.reject(&path);
                return None;
            }
        }
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(_) => {
                self.reject(&path);
                return None;
            }
        };
        let record = match serde_json::from_slice::<TuneRecord>(&bytes) {
            Ok(r) if r.check(key, configs, space).is_ok() => Arc::new(r),
            _ => {
                self.reject(&path);
                return None;
            }
        };
        self.counters.disk_hits.fetch_add(1, Ordering::SeqCst);
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.clone(), record.clone());
        Some(outcome(record, TuneSource::Disk))
    }

    /// A record that cannot be trusted: counted and deleted (a failed delete is harmless, the
    /// next store renames over it).
    fn reject(&self, path: &Path) {
        self.counters.rejected.fetch_add(1, Ordering::SeqCst);
        let _ = fs::remove_file(path);
    }

    fn store(&self, name: &str, record: &TuneRecord) -> Option<PathBuf> {
        let dir = self.dir()?.to_path_buf();
        let mut bytes = serde_json::to_vec_pretty(record).ok()?;
        bytes.push(b'\n');
        match write_atomic_steps(&dir, name, &bytes) {
            Ok(()) => Some(dir.join(name)),
            Err(WriteFailure::Dir(e)) => {
                self.give_up(format!("cannot write to it: {e}"));
                None
            }
            // Something in the way at this record's path (a non-empty directory): this record
            // stays in memory; the directory still serves every other one.
            Err(WriteFailure::Entry(_)) => None,
        }
    }

    fn give_up(&self, reason: String) {
        let dir = self
            .dir
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        if !self.warned.swap(true, Ordering::SeqCst) {
            eprintln!(
                "tilus: warning: autotune directory {dir} is not usable ({reason}); keeping \
                 tuning results in memory only (each process tunes again). Set TILUS_CACHE_DIR \
                 to a writable directory, or TILUS_CACHE=off to silence this."
            );
        }
        *self.broken.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
    }

    fn progress_bar(&self, key: &TuneKey, n: usize) -> indicatif::ProgressBar {
        if !self.progress {
            return indicatif::ProgressBar::hidden();
        }
        let bar = indicatif::ProgressBar::new(n as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {pos}/{len} ({elapsed}) {prefix}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(key.bucket.clone());
        bar
    }
}

/// The candidates' JSON and their fingerprint.
fn describe<C: TuneCandidate>(candidates: &[C]) -> (Vec<Value>, String) {
    let configs: Vec<Value> = candidates.iter().map(TuneCandidate::to_json).collect();
    let texts: Vec<String> = configs.iter().map(Value::to_string).collect();
    let parts: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
    (configs, CacheKey::of(&parts).hex())
}

/// `<kernel>-<32 hex>.json`; the kernel name is reduced to `[A-Za-z0-9_.-]` for readability,
/// the hash tells records apart.
fn file_name(key: &TuneKey, space: &str) -> String {
    let driver = key.driver.to_string();
    let hash = CacheKey::of(&[
        b"tilus autotune record",
        key.kernel.as_bytes(),
        key.bucket.as_bytes(),
        key.gpu.as_bytes(),
        driver.as_bytes(),
        space.as_bytes(),
    ])
    .hex();
    let mut stem: String = key
        .kernel
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    if stem.is_empty() || stem.starts_with('.') {
        stem.insert(0, 'k');
    }
    format!("{stem}-{}.json", &hash[..32])
}

fn failed(config: &Value, error: String) -> Measurement {
    Measurement {
        config: config.clone(),
        median_us: None,
        min_us: None,
        max_us: None,
        samples: 0,
        error: Some(error),
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

/// Run `prepare` for every candidate on up to one thread per core; results in candidate order,
/// errors (and panics) as strings.
fn prepare_all<C, P, E>(
    candidates: &[C],
    prepare: &(impl Fn(usize, &C) -> Result<P, E> + Sync),
    bar: &indicatif::ProgressBar,
) -> Vec<Result<P, String>>
where
    C: Sync,
    P: Send,
    E: fmt::Display,
{
    let one = |i: usize| -> Result<P, String> {
        let r = match catch_unwind(AssertUnwindSafe(|| prepare(i, &candidates[i]))) {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(e)) => Err(e.to_string()),
            Err(panic) => Err(format!("panicked: {}", panic_message(&panic))),
        };
        bar.inc(1);
        r
    };
    let n = candidates.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n);
    if threads <= 1 {
        return (0..n).map(one).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<P, String>>>> = (0..n).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                let r = one(i);
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    slots
        .into_iter()
        .map(|s| {
            s.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| Err("not prepared".into()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::Cell;

    use crate::test_util::TempDir;

    fn key() -> TuneKey {
        TuneKey::new("fake", "m<=16 n=64", "Test GPU", 13000)
    }

    fn space(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| json!({"tile": 16 * (i + 1), "stages": 3}))
            .collect()
    }

    fn timing(us: f64) -> Timing {
        Timing {
            median_us: us,
            min_us: us * 0.9,
            max_us: us * 1.2,
            samples: 15,
        }
    }

    /// Candidate `i` takes `times[i]` microseconds.
    fn fake(times: &[f64]) -> impl FnMut(usize, &Value) -> Result<Timing, String> + '_ {
        |i, _| Ok(timing(times[i]))
    }

    fn quiet(t: Tuner) -> Tuner {
        t.with_progress(false)
    }

    #[test]
    fn tunes_persists_and_reuses() {
        let dir = TempDir::new("rt");
        let cands = space(5);
        let times = [9.0, 4.0, 7.0, 3.5, 8.0];
        let t = quiet(Tuner::at(&dir.0));
        let out = t.tune(&key(), &cands, fake(&times)).unwrap();
        assert_eq!(
            (out.index, out.median_us, out.source),
            (3, 3.5, TuneSource::Measured)
        );
        assert!(!out.reused());
        let path = out.path.clone().unwrap();
        assert!(path.exists());
        assert_eq!(t.record_path(&key(), &cands), Some(path.clone()));
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("fake-") && name.ends_with(".json"),
            "{name}"
        );

        // The file holds the key, the winner and every measurement.
        let rec: TuneRecord = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(rec.kernel, "fake");
        assert_eq!(rec.gpu, "Test GPU");
        assert_eq!(rec.driver, 13000);
        assert_eq!(rec.winner, 3);
        assert_eq!(rec.winner_config, cands[3]);
        assert_eq!(rec.candidates.len(), 5);
        assert_eq!(rec.candidates[0].median_us, Some(9.0));

        // Same tuner: memory, the closure is not called.
        let again = t
            .tune(&key(), &cands, |_, _| -> Result<Timing, String> {
                panic!("must not measure")
            })
            .unwrap();
        assert_eq!((again.index, again.source), (3, TuneSource::Memory));

        // A new tuner (a new process): from disk, not measured.
        let t2 = quiet(Tuner::at(&dir.0));
        let calls = Cell::new(0);
        let again = t2
            .tune(&key(), &cands, |_, _| {
                calls.set(calls.get() + 1);
                Ok::<_, String>(timing(1.0))
            })
            .unwrap();
        assert_eq!(calls.get(), 0);
        assert_eq!((again.index, again.median_us), (3, 3.5));
        assert_eq!(again.source, TuneSource::Disk);
        assert!(again.reused());
        assert_eq!(*again.record, rec);
        // And from its memory after that.
        assert_eq!(
            t2.lookup(&key(), &cands).unwrap().source,
            TuneSource::Memory
        );
        assert_eq!(
            t2.stats(),
            TuneStats {
                tuned: 0,
                memory_hits: 1,
                disk_hits: 1,
                rejected: 0
            }
        );
    }

    #[test]
    fn ties_go_to_the_earlier_candidate() {
        let t = quiet(Tuner::in_memory());
        let out = t.tune(&key(), &space(3), fake(&[5.0, 2.0, 2.0])).unwrap();
        assert_eq!(out.index, 1);
        assert_eq!(out.path, None);
    }

    fn corrupt_then_rebuilt(mangle: impl Fn(&Path)) {
        let dir = TempDir::new("corrupt");
        let cands = space(4);
        let path = quiet(Tuner::at(&dir.0))
            .tune(&key(), &cands, fake(&[4.0, 3.0, 2.0, 1.0]))
            .unwrap()
            .path
            .unwrap();
        mangle(&path);
        let t = quiet(Tuner::at(&dir.0));
        assert!(t.lookup(&key(), &cands).is_none());
        assert_eq!(t.stats().rejected, 1);
        assert!(!path.exists(), "an untrusted record is deleted");
        let calls = Cell::new(0);
        let out = t
            .tune(&key(), &cands, |i, _| {
                calls.set(calls.get() + 1);
                Ok::<_, String>(timing([1.0, 2.0, 3.0, 4.0][i]))
            })
            .unwrap();
        assert_eq!(calls.get(), 4);
        assert_eq!((out.index, out.source), (0, TuneSource::Measured));
        // The rebuilt record is good.
        let t2 = quiet(Tuner::at(&dir.0));
        assert_eq!(t2.lookup(&key(), &cands).unwrap().index, 0);
    }

    fn edit(path: &Path, f: impl Fn(&mut Value)) {
        let mut v: Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
        f(&mut v);
        fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
    }

    #[test]
    fn garbage_and_truncated_records_are_rebuilt() {
        corrupt_then_rebuilt(|p| fs::write(p, b"not json {").unwrap());
        corrupt_then_rebuilt(|p| fs::write(p, b"").unwrap());
        corrupt_then_rebuilt(|p| {
            let b = fs::read(p).unwrap();
            fs::write(p, &b[..b.len() / 2]).unwrap();
        });
        corrupt_then_rebuilt(|p| fs::write(p, b"[1, 2, 3]").unwrap());
    }

    #[test]
    fn mismatched_records_are_rebuilt() {
        corrupt_then_rebuilt(|p| edit(p, |v| v["format"] = json!(99)));
        corrupt_then_rebuilt(|p| edit(p, |v| v["gpu"] = json!("Other GPU")));
        corrupt_then_rebuilt(|p| edit(p, |v| v["driver"] = json!(12000)));
        corrupt_then_rebuilt(|p| edit(p, |v| v["bucket"] = json!("m<=32 n=64")));
        corrupt_then_rebuilt(|p| edit(p, |v| v["winner"] = json!(17)));
        corrupt_then_rebuilt(|p| edit(p, |v| v["winner"] = json!(1)));
        corrupt_then_rebuilt(|p| edit(p, |v| v["space"] = json!("0000")));
        corrupt_then_rebuilt(|p| edit(p, |v| v["candidates"][0]["config"] = json!({"x": 1})));
        corrupt_then_rebuilt(|p| edit(p, |v| v["winner_us"] = json!(-1.0)));
        corrupt_then_rebuilt(|p| {
            edit(p, |v| {
                let w = v["winner"].as_u64().unwrap() as usize;
                v["candidates"][w]["median_us"] = Value::Null;
            })
        });
    }

    #[test]
    fn key_fields_and_space_distinguish_records() {
        let dir = TempDir::new("keys");
        let t = quiet(Tuner::at(&dir.0));
        let cands = space(3);
        let base = key();
        let variants = [
            TuneKey {
                kernel: "other".into(),
                ..base.clone()
            },
            TuneKey {
                bucket: "m<=32 n=64".into(),
                ..base.clone()
            },
            TuneKey {
                gpu: "Another GPU".into(),
                ..base.clone()
            },
            TuneKey {
                driver: 13010,
                ..base.clone()
            },
        ];
        // Each key gets its own winner.
        let out = t.tune(&base, &cands, fake(&[1.0, 2.0, 3.0])).unwrap();
        assert_eq!(out.index, 0);
        let mut paths = vec![out.path.unwrap()];
        for (j, k) in variants.iter().enumerate() {
            assert!(t.lookup(k, &cands).is_none(), "{k} must not reuse {base}");
            let times: Vec<f64> = (0..3)
                .map(|i| if i == (j % 2) + 1 { 0.5 } else { 9.0 })
                .collect();
            let out = t.tune(k, &cands, fake(&times)).unwrap();
            assert_eq!(out.source, TuneSource::Measured);
            paths.push(out.path.unwrap());
        }
        // Another candidate list is another record too.
        let more = space(4);
        assert!(t.lookup(&base, &more).is_none());
        paths.push(
            t.tune(&base, &more, fake(&[3.0, 2.0, 1.0, 4.0]))
                .unwrap()
                .path
                .unwrap(),
        );
        let mut unique = paths.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), paths.len(), "{paths:?}");
        // All of them are still there, each with its own winner.
        let t2 = quiet(Tuner::at(&dir.0));
        assert_eq!(t2.lookup(&base, &cands).unwrap().index, 0);
        assert_eq!(t2.lookup(&variants[0], &cands).unwrap().index, 1);
        assert_eq!(t2.lookup(&variants[1], &cands).unwrap().index, 2);
        assert_eq!(t2.lookup(&base, &more).unwrap().index, 2);
        assert_eq!(t2.stats().rejected, 0);
    }

    #[test]
    fn failing_candidates_are_skipped_and_recorded() {
        let dir = TempDir::new("fail");
        let t = quiet(Tuner::at(&dir.0));
        let cands = space(5);
        let out = t
            .tune_with(
                &key(),
                &cands,
                |i, _| {
                    if i == 1 {
                        Err(format!("compile error {i}"))
                    } else {
                        Ok(i)
                    }
                },
                |i, _, p| {
                    assert_eq!(i, p);
                    match i {
                        0 => Ok(timing(f64::NAN)),
                        2 => Err("launch failed".to_string()),
                        3 => panic!("a bug in candidate 3"),
                        _ => Ok(timing(7.0)),
                    }
                },
            )
            .unwrap();
        assert_eq!(out.index, 4);
        let c = &out.record.candidates;
        assert!(c[0].error.as_ref().unwrap().contains("invalid median"));
        assert!(c[1].error.as_ref().unwrap().contains("compile error 1"));
        assert!(c[2].error.as_ref().unwrap().contains("launch failed"));
        assert!(c[3]
            .error
            .as_ref()
            .unwrap()
            .contains("a bug in candidate 3"));
        assert!(c[..4].iter().all(|m| m.median_us.is_none()));
        assert_eq!(c[4].median_us, Some(7.0));
        // Persisted with the failures, and reused.
        assert_eq!(
            quiet(Tuner::at(&dir.0))
                .lookup(&key(), &cands)
                .unwrap()
                .index,
            4
        );
    }

    #[test]
    fn all_failing_is_an_error_naming_the_kernel() {
        let dir = TempDir::new("allfail");
        let t = quiet(Tuner::at(&dir.0));
        let cands = space(3);
        let err = t
            .tune(&key(), &cands, |i, _| {
                Err::<Timing, _>(format!("no luck {i}"))
            })
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("`fake`"), "{msg}");
        assert!(msg.contains("all 3"), "{msg}");
        assert!(msg.contains("no luck 0"), "{msg}");
        assert!(t.record_path(&key(), &cands).is_some_and(|p| !p.exists()));
        // Nothing was remembered: a later call measures again.
        let out = t.tune(&key(), &cands, fake(&[2.0, 1.0, 3.0])).unwrap();
        assert_eq!((out.index, out.source), (1, TuneSource::Measured));

        let empty: Vec<Value> = vec![];
        let err = t.tune(&key(), &empty, fake(&[])).unwrap_err().to_string();
        assert!(
            err.contains("`fake`") && err.contains("no candidate"),
            "{err}"
        );
        let dup = vec![json!(1), json!(2), json!(1)];
        let err = t
            .tune(&key(), &dup, fake(&[1.0; 3]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("candidate 2 repeats"), "{err}");
    }

    /// A directory at one record's path failed the store's rename and turned persistence off
    /// for every record; a huge junk file there was read whole. Now both affect that record
    /// only.
    #[test]
    fn bad_record_path_affects_only_that_record() {
        let dir = TempDir::new("bad-record");
        let cands = space(2);
        let first = quiet(Tuner::at(&dir.0));
        let path = first
            .tune(&key(), &cands, fake(&[2.0, 1.0]))
            .unwrap()
            .path
            .unwrap();
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        fs::write(path.join("keep"), b"x").unwrap();
        let t = quiet(Tuner::at(&dir.0));
        let out = t.tune(&key(), &cands, fake(&[2.0, 1.0])).unwrap();
        assert_eq!((out.index, out.path), (1, None));
        assert_eq!(t.dir(), Some(dir.0.as_path()), "persistence stays on");
        assert!(!t.has_warned());
        assert!(path.join("keep").exists());
        // A huge sparse junk file at the record path: rejected from its size, then replaced.
        fs::remove_dir_all(&path).unwrap();
        fs::File::create(&path).unwrap().set_len(3 << 30).unwrap();
        let t = quiet(Tuner::at(&dir.0));
        let start = std::time::Instant::now();
        assert!(t.lookup(&key(), &cands).is_none());
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        assert!(!path.exists());
        let out = t.tune(&key(), &cands, fake(&[1.0, 2.0])).unwrap();
        assert_eq!(out.path.as_deref(), Some(path.as_path()));
    }

    #[test]
    fn unwritable_dir_degrades_to_memory() {
        let dir = TempDir::new("unwritable");
        // A regular file where the directory should be: fails even for root.
        let file = dir.0.join("not-a-dir");
        fs::write(&file, b"").unwrap();
        let t = quiet(Tuner::at(file.join("tune")));
        assert!(t.has_warned());
        assert_eq!(t.dir(), None);
        let cands = space(2);
        let out = t.tune(&key(), &cands, fake(&[2.0, 1.0])).unwrap();
        assert_eq!((out.index, out.path), (1, None));
        assert_eq!(t.lookup(&key(), &cands).unwrap().source, TuneSource::Memory);
    }

    #[test]
    fn dir_that_breaks_later_degrades_on_first_store() {
        let dir = TempDir::new("later");
        let tune_dir = dir.0.join("tune");
        let t = quiet(Tuner::at(&tune_dir));
        assert!(!t.has_warned());
        fs::remove_dir_all(&tune_dir).unwrap();
        fs::write(&tune_dir, b"").unwrap();
        let cands = space(2);
        let out = t.tune(&key(), &cands, fake(&[1.0, 2.0])).unwrap();
        assert_eq!((out.index, out.path), (0, None));
        assert!(t.has_warned());
        assert_eq!(t.dir(), None);
        assert_eq!(t.lookup(&key(), &cands).unwrap().source, TuneSource::Memory);
    }

    #[test]
    fn forget_measures_again() {
        let dir = TempDir::new("forget");
        let t = quiet(Tuner::at(&dir.0));
        let cands = space(2);
        let path = t
            .tune(&key(), &cands, fake(&[1.0, 2.0]))
            .unwrap()
            .path
            .unwrap();
        t.forget(&key(), &cands);
        assert!(!path.exists());
        assert!(t.lookup(&key(), &cands).is_none());
        let out = t.tune(&key(), &cands, fake(&[2.0, 1.0])).unwrap();
        assert_eq!((out.index, out.source), (1, TuneSource::Measured));
    }

    #[test]
    fn concurrent_tunes_of_one_key_measure_once() {
        let dir = TempDir::new("race");
        let t = quiet(Tuner::at(&dir.0));
        let cands = space(3);
        let calls = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..6 {
                s.spawn(|| {
                    let out = t
                        .tune(&key(), &cands, |i, _| {
                            calls.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(5));
                            Ok::<_, String>(timing([3.0, 1.0, 2.0][i]))
                        })
                        .unwrap();
                    assert_eq!(out.index, 1);
                });
            }
        });
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(t.stats().tuned, 1);
    }

    #[test]
    fn prepare_runs_for_every_candidate_in_parallel_and_in_order() {
        let t = quiet(Tuner::in_memory());
        let cands = space(40);
        let order = Mutex::new(Vec::new());
        let out = t
            .tune_with(
                &key(),
                &cands,
                |i, c| Ok::<_, String>((i, c["tile"].as_u64().unwrap())),
                |i, c, (pi, tile)| {
                    assert_eq!(i, pi);
                    assert_eq!(c["tile"].as_u64().unwrap(), tile);
                    order.lock().unwrap().push(i);
                    Ok(timing(100.0 - i as f64))
                },
            )
            .unwrap();
        assert_eq!(out.index, 39);
        assert_eq!(*order.lock().unwrap(), (0..40).collect::<Vec<_>>());
    }

    #[test]
    fn file_names_are_safe() {
        let k = TuneKey::new("../weird name/", "b", "g", 1);
        let name = file_name(&k, "s");
        assert!(!name.contains('/') && !name.starts_with('.'), "{name}");
        assert!(name.ends_with(".json"));
        let k = TuneKey::new("", "b", "g", 1);
        assert!(file_name(&k, "s").starts_with("k-"));
    }
}
