//! The on-disk kernel cache: content-addressed byte blobs, nothing CUDA-specific, so every rule
//! here is tested without a GPU.
//!
//! * **Key.** [`CacheKey`] is a SHA-256 over length-prefixed parts; the runtime feeds it the
//!   source, the NVRTC options, the NVRTC version and the target architecture.
//! * **Entry.** `<dir>/<64 hex digits>.cubin`, laid out as
//!   `MAGIC (8) | key (32) | payload length (u64 LE) | SHA-256(payload) (32) | payload`.
//!   An entry whose magic, key, length or checksum does not match is reported as corrupt,
//!   deleted, and never handed out; the caller rebuilds it.
//! * **Writes are atomic.** The entry is written to a unique temporary file in the same
//!   directory, flushed, then renamed over the final name, so readers see either no entry or a
//!   whole one, also with several processes writing the same key.
//! * **Degrading.** A directory that cannot be created or written turns the cache off for the
//!   rest of this [`DiskCache`]'s life with one warning on stderr; kernels then live in memory
//!   only. The cache never makes a load fail.
//! * **Location.** `TILUS_CACHE=off` (or `0`, `false`, `no`) disables it; otherwise
//!   `TILUS_CACHE_DIR`, else the user cache directory (`dirs::cache_dir()/tilus`, e.g.
//!   `~/.cache/tilus`).

use sha2::{Digest, Sha256};
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Leading bytes of every entry; the final byte is the format version.
pub const MAGIC: [u8; 8] = *b"TILUSKC\x01";
const HEADER_LEN: usize = 8 + 32 + 8 + 32;

/// A SHA-256 content key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// Hash of `parts`, each length-prefixed so that `["ab","c"]` and `["a","bc"]` differ.
    pub fn of(parts: &[&[u8]]) -> CacheKey {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        CacheKey(h.finalize().into())
    }

    /// Lower-case hex, 64 digits.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({})", &self.hex()[..16])
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A whole, verified entry.
    Hit(Vec<u8>),
    /// No entry (or the cache is off).
    Miss,
    /// There was an entry but it failed verification; it has been deleted. The reason is for
    /// diagnostics.
    Corrupt(String),
}

/// Why the cache is or is not writing to disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheState {
    /// Entries live under this directory.
    Enabled(PathBuf),
    /// Turned off on purpose (`TILUS_CACHE=off` or a builder option).
    Disabled,
    /// The directory was not usable; memory-only from then on. Carries the directory and the
    /// reason.
    Unwritable { dir: PathBuf, reason: String },
}

/// The disk cache. Cheap to share behind an `Arc`; all methods take `&self`.
#[derive(Debug)]
pub struct DiskCache {
    dir: Option<PathBuf>,
    /// Set once the directory has proved unusable; from then on every call is a no-op.
    broken: Mutex<Option<String>>,
    warned: AtomicBool,
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl DiskCache {
    /// A cache that never touches the disk.
    pub fn disabled() -> DiskCache {
        DiskCache {
            dir: None,
            broken: Mutex::new(None),
            warned: AtomicBool::new(false),
        }
    }

    /// A cache in `dir` (created if needed). An unusable directory gives a memory-only cache
    /// and one warning on stderr; it never fails.
    pub fn at(dir: impl Into<PathBuf>) -> DiskCache {
        let cache = DiskCache {
            dir: Some(dir.into()),
            broken: Mutex::new(None),
            warned: AtomicBool::new(false),
        };
        if let Some(dir) = &cache.dir {
            if let Err(e) = fs::create_dir_all(dir) {
                cache.give_up(format!("cannot create it: {e}"));
            }
        }
        cache
    }

    /// The cache the environment asks for: off when `TILUS_CACHE` is `off`/`0`/`false`/`no`,
    /// else at [`default_dir`].
    pub fn from_env() -> DiskCache {
        if env_disables_cache() {
            return DiskCache::disabled();
        }
        match default_dir() {
            Some(dir) => DiskCache::at(dir),
            None => {
                let cache = DiskCache::disabled();
                cache.warn("no cache directory: set TILUS_CACHE_DIR (kernels are compiled once per process only)");
                cache
            }
        }
    }

    /// Where entries are written now, or why not.
    pub fn state(&self) -> CacheState {
        match (&self.dir, self.broken.lock().unwrap().clone()) {
            (None, _) => CacheState::Disabled,
            (Some(dir), Some(reason)) => CacheState::Unwritable {
                dir: dir.clone(),
                reason,
            },
            (Some(dir), None) => CacheState::Enabled(dir.clone()),
        }
    }

    /// The directory in use, if the cache is writing to disk.
    pub fn dir(&self) -> Option<&Path> {
        if self.broken.lock().unwrap().is_some() {
            return None;
        }
        self.dir.as_deref()
    }

    /// Path of the entry for `key` (whether or not it exists).
    pub fn entry_path(&self, key: &CacheKey) -> Option<PathBuf> {
        self.dir().map(|d| d.join(format!("{}.cubin", key.hex())))
    }

    /// Read and verify the entry for `key`. A corrupt entry is deleted and reported.
    pub fn load(&self, key: &CacheKey) -> Lookup {
        let Some(path) = self.entry_path(key) else {
            return Lookup::Miss;
        };
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Lookup::Miss,
            // Unreadable (permissions, a directory in the way...): treat as corrupt, try to clear.
            Err(e) => {
                let _ = fs::remove_file(&path);
                return Lookup::Corrupt(format!("unreadable: {e}"));
            }
        };
        match decode_entry(key, &bytes) {
            Ok(payload) => Lookup::Hit(payload.to_vec()),
            Err(reason) => {
                // Never trust it again; a failed delete is harmless because the next store
                // renames over it.
                let _ = fs::remove_file(&path);
                Lookup::Corrupt(reason)
            }
        }
    }

    /// Forget the entry for `key` (used when the driver rejects a verified entry).
    pub fn remove(&self, key: &CacheKey) {
        if let Some(path) = self.entry_path(key) {
            let _ = fs::remove_file(path);
        }
    }

    /// Store `payload` under `key`, atomically. Returns whether it was written; the first
    /// failure turns the disk cache off with one warning.
    pub fn store(&self, key: &CacheKey, payload: &[u8]) -> bool {
        let Some(dir) = self.dir().map(Path::to_path_buf) else {
            return false;
        };
        match write_atomic(
            &dir,
            &format!("{}.cubin", key.hex()),
            &encode_entry(key, payload),
        ) {
            Ok(()) => true,
            Err(e) => {
                self.give_up(format!("cannot write to it: {e}"));
                false
            }
        }
    }

    fn give_up(&self, reason: String) {
        let dir = self
            .dir
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        self.warn(&format!(
            "kernel cache directory {dir} is not usable ({reason}); caching compiled kernels in \
             memory only. Set TILUS_CACHE_DIR to a writable directory, or TILUS_CACHE=off to \
             silence this."
        ));
        *self.broken.lock().unwrap() = Some(reason);
    }

    fn warn(&self, msg: &str) {
        if !self.warned.swap(true, Ordering::SeqCst) {
            eprintln!("tilus: warning: {msg}");
        }
    }

    /// Whether this cache has printed its (single) warning.
    pub fn has_warned(&self) -> bool {
        self.warned.load(Ordering::SeqCst)
    }
}

/// True when `TILUS_CACHE` asks for no disk cache.
pub fn env_disables_cache() -> bool {
    matches!(
        std::env::var("TILUS_CACHE").map(|v| v.trim().to_ascii_lowercase()),
        Ok(v) if matches!(v.as_str(), "off" | "0" | "false" | "no")
    )
}

/// `TILUS_CACHE_DIR`, else `dirs::cache_dir()/tilus`.
pub fn default_dir() -> Option<PathBuf> {
    match std::env::var_os("TILUS_CACHE_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => dirs::cache_dir().map(|d| d.join("tilus")),
    }
}

/// Serialize an entry: header then payload.
pub fn encode_entry(key: &CacheKey, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(payload));
    out.extend_from_slice(payload);
    out
}

/// Verify an entry and return its payload, or say what is wrong with it.
pub fn decode_entry<'a>(key: &CacheKey, bytes: &'a [u8]) -> Result<&'a [u8], String> {
    if bytes.len() < HEADER_LEN {
        return Err(format!(
            "truncated header ({} of {HEADER_LEN} bytes)",
            bytes.len()
        ));
    }
    let (magic, rest) = bytes.split_at(8);
    if magic != MAGIC {
        return Err("bad magic (not a tilus cache entry, or another format version)".into());
    }
    let (stored_key, rest) = rest.split_at(32);
    if stored_key != key.0 {
        return Err("entry belongs to another key".into());
    }
    let (len, rest) = rest.split_at(8);
    let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
    let (sum, payload) = rest.split_at(32);
    if payload.len() as u64 != len {
        return Err(format!(
            "payload is {} bytes, header says {len}",
            payload.len()
        ));
    }
    if Sha256::digest(payload).as_slice() != sum {
        return Err("payload checksum mismatch".into());
    }
    Ok(payload)
}

/// Write `bytes` to `dir/name` through a unique temporary file and a rename.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()?;
        drop(f);
        fs::rename(&tmp, dir.join(name))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::test_util::TempDir;

    fn key(s: &str) -> CacheKey {
        CacheKey::of(&[s.as_bytes()])
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn key_parts_are_length_prefixed() {
        assert_ne!(CacheKey::of(&[b"ab", b"c"]), CacheKey::of(&[b"a", b"bc"]));
        assert_eq!(CacheKey::of(&[b"ab", b"c"]), CacheKey::of(&[b"ab", b"c"]));
        assert_eq!(key("x").hex().len(), 64);
    }

    #[test]
    fn round_trip() {
        let t = TempDir::new("rt");
        let c = DiskCache::at(&t.0);
        let k = key("round trip");
        assert_eq!(c.load(&k), Lookup::Miss);
        assert!(c.store(&k, &payload(1000)));
        assert_eq!(c.load(&k), Lookup::Hit(payload(1000)));
        // Empty payloads are legal entries too.
        let k2 = key("empty");
        assert!(c.store(&k2, &[]));
        assert_eq!(c.load(&k2), Lookup::Hit(vec![]));
        assert_eq!(c.state(), CacheState::Enabled(t.0.clone()));
    }

    fn assert_corrupt_then_rebuilt(mangle: impl Fn(&mut Vec<u8>)) {
        let t = TempDir::new("corrupt");
        let c = DiskCache::at(&t.0);
        let k = key("corrupt");
        assert!(c.store(&k, &payload(300)));
        let path = c.entry_path(&k).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        mangle(&mut bytes);
        fs::write(&path, &bytes).unwrap();
        match c.load(&k) {
            Lookup::Corrupt(_) => {}
            other => panic!("expected a corrupt entry, got {other:?}"),
        }
        assert!(!path.exists(), "a corrupt entry must be deleted");
        assert_eq!(c.load(&k), Lookup::Miss);
        assert!(c.store(&k, &payload(300)));
        assert_eq!(c.load(&k), Lookup::Hit(payload(300)));
    }

    #[test]
    fn truncated_payload_is_rebuilt() {
        assert_corrupt_then_rebuilt(|b| b.truncate(b.len() - 10));
    }

    #[test]
    fn truncated_header_is_rebuilt() {
        assert_corrupt_then_rebuilt(|b| b.truncate(20));
        assert_corrupt_then_rebuilt(|b| b.clear());
    }

    #[test]
    fn flipped_payload_bit_is_rebuilt() {
        assert_corrupt_then_rebuilt(|b| {
            let last = b.len() - 1;
            b[last] ^= 0x40;
        });
    }

    #[test]
    fn bad_magic_and_wrong_key_are_rebuilt() {
        assert_corrupt_then_rebuilt(|b| b[0] = b'X');
        assert_corrupt_then_rebuilt(|b| b[7] = 2); // a future format version
        assert_corrupt_then_rebuilt(|b| b[8] ^= 1); // key field
    }

    #[test]
    fn appended_garbage_is_rebuilt() {
        assert_corrupt_then_rebuilt(|b| b.extend_from_slice(b"junk"));
    }

    #[test]
    fn writes_leave_no_temporary_files() {
        let t = TempDir::new("tmp");
        let c = DiskCache::at(&t.0);
        for i in 0..5 {
            assert!(c.store(&key(&i.to_string()), &payload(100 + i)));
        }
        let names: Vec<String> = fs::read_dir(&t.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 5, "{names:?}");
        assert!(names
            .iter()
            .all(|n| n.ends_with(".cubin") && !n.starts_with('.')));
    }

    #[test]
    fn stale_temp_file_does_not_interfere() {
        let t = TempDir::new("stale");
        let c = DiskCache::at(&t.0);
        let k = key("stale");
        // A writer that died between create and rename leaves a half temp file behind.
        fs::write(t.0.join(format!(".{}.cubin.tmp-1-1", k.hex())), b"TILUSKC").unwrap();
        assert_eq!(c.load(&k), Lookup::Miss);
        assert!(c.store(&k, &payload(64)));
        assert_eq!(c.load(&k), Lookup::Hit(payload(64)));
    }

    #[test]
    fn concurrent_writers_of_one_key_leave_a_whole_entry() {
        let t = TempDir::new("race");
        let c = Arc::new(DiskCache::at(&t.0));
        let k = key("race");
        let big = payload(256 * 1024);
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (c, big) = (c.clone(), &big);
                s.spawn(move || {
                    for _ in 0..4 {
                        assert!(c.store(&k, big));
                        match c.load(&k) {
                            Lookup::Hit(p) => assert_eq!(&p, big),
                            // Another writer's rename can land between our store and load only
                            // with the same bytes, so anything else is a bug.
                            other => panic!("reader saw {other:?}"),
                        }
                    }
                });
            }
        });
        assert_eq!(c.load(&k), Lookup::Hit(big));
    }

    #[test]
    fn uncreatable_dir_degrades_to_memory_only() {
        let t = TempDir::new("unwritable");
        // A regular file where a directory should be: fails even for root, unlike chmod.
        let file = t.0.join("not-a-dir");
        fs::write(&file, b"").unwrap();
        let c = DiskCache::at(file.join("cache"));
        assert!(matches!(c.state(), CacheState::Unwritable { .. }));
        assert!(c.has_warned());
        assert_eq!(c.dir(), None);
        let k = key("x");
        assert!(!c.store(&k, b"data"));
        assert_eq!(c.load(&k), Lookup::Miss);
    }

    #[test]
    fn dir_that_breaks_later_degrades_on_first_store() {
        let t = TempDir::new("later");
        let dir = t.0.join("cache");
        let c = DiskCache::at(&dir);
        assert!(matches!(c.state(), CacheState::Enabled(_)));
        assert!(!c.has_warned());
        // Replace the directory with a file after the cache was opened.
        fs::remove_dir_all(&dir).unwrap();
        fs::write(&dir, b"").unwrap();
        let k = key("y");
        assert!(!c.store(&k, b"data"));
        assert!(c.has_warned());
        assert!(matches!(c.state(), CacheState::Unwritable { .. }));
        // Further calls are quiet no-ops.
        assert!(!c.store(&k, b"data"));
        assert_eq!(c.load(&k), Lookup::Miss);
    }

    #[test]
    fn disabled_cache_is_inert() {
        let c = DiskCache::disabled();
        let k = key("z");
        assert!(!c.store(&k, b"data"));
        assert_eq!(c.load(&k), Lookup::Miss);
        assert_eq!(c.state(), CacheState::Disabled);
        assert!(!c.has_warned());
    }

    #[test]
    fn decode_rejects_length_mismatch_precisely() {
        let k = key("len");
        let mut e = encode_entry(&k, b"hello");
        assert_eq!(decode_entry(&k, &e), Ok(&b"hello"[..]));
        e.pop();
        let err = decode_entry(&k, &e).unwrap_err();
        assert!(err.contains("header says 5"), "{err}");
    }
}
