//! The on-disk kernel cache: content-addressed byte blobs, nothing CUDA-specific, so every rule
//! here is tested without a GPU.
//!
//! * **Key.** [`CacheKey`] is a SHA-256 over length-prefixed parts; the runtime feeds it the
//!   source, the NVRTC options, the NVRTC version and the target architecture.
//! * **Entry.** `<dir>/<64 hex digits>.cubin`, laid out as
//!   `MAGIC (8) | key (32) | payload length (u64 LE) | SHA-256(payload) (32) | payload`.
//!   An entry whose magic, key, length or checksum does not match is reported as corrupt,
//!   deleted, and never handed out; the caller rebuilds it. The file's size (from its metadata)
//!   and header are checked before the payload is read, so a huge junk file costs one `stat`
//!   and 80 bytes, not a read of the whole thing; no payload is larger than
//!   [`MAX_PAYLOAD_LEN`].
//! * **Writes are atomic.** The entry is written to a unique temporary file in the same
//!   directory, flushed, then renamed over the final name, so readers see either no entry or a
//!   whole one, also with several processes writing the same key.
//! * **Degrading.** A directory that cannot be created or written turns the cache off for the
//!   rest of this [`DiskCache`]'s life with one warning on stderr; kernels then live in memory
//!   only. Something other than a file at one entry's path (a directory, say) affects only
//!   that entry: it is skipped on load, cleared on store where it is an empty directory, and
//!   otherwise that one kernel lives in memory only while the rest of the cache keeps working.
//!   The cache never makes a load fail.
//! * **Location.** `TILUS_CACHE=off` (or `0`, `false`, `no`) disables it; otherwise
//!   `TILUS_CACHE_DIR`, else the user cache directory (`dirs::cache_dir()/tilus`, e.g.
//!   `~/.cache/tilus`).

use sha2::{Digest, Sha256};
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Leading bytes of every entry; the final byte is the format version.
pub const MAGIC: [u8; 8] = *b"TILUSKC\x01";
const HEADER_LEN: usize = 8 + 32 + 8 + 32;
/// The largest payload stored or loaded. CUBINs are kilobytes to a few megabytes; a larger
/// "entry" is junk, rejected from its size alone.
pub const MAX_PAYLOAD_LEN: u64 = 512 << 20;

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

    /// Read and verify the entry for `key`. A corrupt entry is deleted and reported; something
    /// that is not a file at the entry's path is reported and left alone.
    pub fn load(&self, key: &CacheKey) -> Lookup {
        let Some(path) = self.entry_path(key) else {
            return Lookup::Miss;
        };
        match read_entry(key, &path) {
            Ok(payload) => Lookup::Hit(payload),
            Err(EntryFault::Missing) => Lookup::Miss,
            Err(EntryFault::NotAFile(reason)) => Lookup::Corrupt(reason),
            Err(EntryFault::Corrupt(reason)) => {
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
    ///
    /// Only a failure of the directory (creating it, writing the temporary file) turns the
    /// cache off; a final rename that fails because of what is at this entry's path skips
    /// this entry alone. A payload over [`MAX_PAYLOAD_LEN`] is not stored.
    pub fn store(&self, key: &CacheKey, payload: &[u8]) -> bool {
        let Some(dir) = self.dir().map(Path::to_path_buf) else {
            return false;
        };
        if payload.len() as u64 > MAX_PAYLOAD_LEN {
            return false;
        }
        let name = format!("{}.cubin", key.hex());
        match write_atomic_steps(&dir, &name, &encode_entry(key, payload)) {
            Ok(()) => true,
            Err(WriteFailure::Dir(e)) => {
                self.give_up(format!("cannot write to it: {e}"));
                false
            }
            Err(WriteFailure::Entry(e)) => {
                self.warn(&format!(
                    "kernel cache entry {} is in the way ({e}); that kernel is cached in memory \
                     only (remove the path to cache it on disk again)",
                    dir.join(&name).display()
                ));
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

/// Why an entry could not be loaded.
enum EntryFault {
    Missing,
    /// Something other than a regular file is at the path: reported, never deleted.
    NotAFile(String),
    /// A file that is not a whole entry for the key: deleted by the caller.
    Corrupt(String),
}

/// Read and verify the entry at `path`: the size from the open file's metadata and the
/// header come first, so junk is rejected without reading it.
fn read_entry(key: &CacheKey, path: &Path) -> Result<Vec<u8>, EntryFault> {
    let mut file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(EntryFault::Missing),
        Err(e) => return Err(EntryFault::Corrupt(format!("unreadable: {e}"))),
    };
    // From the open handle, so a concurrent rename cannot swap the file between the checks.
    let meta = file
        .metadata()
        .map_err(|e| EntryFault::Corrupt(format!("unreadable: {e}")))?;
    if !meta.is_file() {
        return Err(EntryFault::NotAFile(format!(
            "not a regular file ({}); skipped",
            if meta.is_dir() {
                "a directory"
            } else {
                "a special file"
            }
        )));
    }
    let size = meta.len();
    if size < HEADER_LEN as u64 {
        return Err(EntryFault::Corrupt(format!(
            "truncated header ({size} of {HEADER_LEN} bytes)"
        )));
    }
    if size - HEADER_LEN as u64 > MAX_PAYLOAD_LEN {
        return Err(EntryFault::Corrupt(format!(
            "{size} bytes, more than any entry (payloads are at most {MAX_PAYLOAD_LEN} bytes)"
        )));
    }
    let mut header = [0u8; HEADER_LEN];
    file.read_exact(&mut header)
        .map_err(|e| EntryFault::Corrupt(format!("unreadable header: {e}")))?;
    let (len, sum) = check_header(key, &header).map_err(EntryFault::Corrupt)?;
    if len != size - HEADER_LEN as u64 {
        return Err(EntryFault::Corrupt(format!(
            "payload is {} bytes, header says {len}",
            size - HEADER_LEN as u64
        )));
    }
    // One byte more than expected, to notice a file that grew since the metadata was read.
    let mut payload = Vec::with_capacity(len as usize);
    (&mut file)
        .take(len + 1)
        .read_to_end(&mut payload)
        .map_err(|e| EntryFault::Corrupt(format!("unreadable payload: {e}")))?;
    if payload.len() as u64 != len {
        return Err(EntryFault::Corrupt(format!(
            "payload is {} bytes, header says {len}",
            payload.len()
        )));
    }
    if Sha256::digest(&payload).as_slice() != sum {
        return Err(EntryFault::Corrupt("payload checksum mismatch".into()));
    }
    Ok(payload)
}

/// Check an entry's header against `key`; the payload length and checksum it declares.
fn check_header(key: &CacheKey, header: &[u8; HEADER_LEN]) -> Result<(u64, [u8; 32]), String> {
    let (magic, rest) = header.split_at(8);
    if magic != MAGIC {
        return Err("bad magic (not a tilus cache entry, or another format version)".into());
    }
    let (stored_key, rest) = rest.split_at(32);
    if stored_key != key.0 {
        return Err("entry belongs to another key".into());
    }
    let (len, sum) = rest.split_at(8);
    let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
    Ok((len, sum.try_into().expect("32 bytes")))
}

/// Verify an entry and return its payload, or say what is wrong with it.
pub fn decode_entry<'a>(key: &CacheKey, bytes: &'a [u8]) -> Result<&'a [u8], String> {
    let Some((header, payload)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(format!(
            "truncated header ({} of {HEADER_LEN} bytes)",
            bytes.len()
        ));
    };
    let (len, sum) = check_header(key, header)?;
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
    write_atomic_steps(dir, name, bytes).map_err(|f| match f {
        WriteFailure::Dir(e) | WriteFailure::Entry(e) => e,
    })
}

/// Which part of an atomic write failed: the directory (nothing can be cached there) or the
/// final rename onto one path (only that entry is affected).
pub(crate) enum WriteFailure {
    Dir(io::Error),
    Entry(io::Error),
}

/// [`write_atomic`], saying which part failed. An empty directory at `dir/name` (a rename
/// cannot replace it) is removed and the rename retried once.
pub(crate) fn write_atomic_steps(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), WriteFailure> {
    fs::create_dir_all(dir).map_err(WriteFailure::Dir)?;
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(WriteFailure::Dir(e));
    }
    let dest = dir.join(name);
    let renamed = fs::rename(&tmp, &dest).or_else(|e| {
        let is_dir = fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir());
        // remove_dir only removes an empty directory: nothing of anyone's is lost.
        if is_dir && fs::remove_dir(&dest).is_ok() {
            fs::rename(&tmp, &dest)
        } else {
            Err(e)
        }
    });
    if let Err(e) = renamed {
        let _ = fs::remove_file(&tmp);
        return Err(WriteFailure::Entry(e));
    }
    Ok(())
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

    /// A 3 GiB junk file at an entry's path was read whole (21 s) before its magic was checked;
    /// now its size and header are checked first. Sparse files keep the test fast.
    #[test]
    fn huge_junk_entry_is_rejected_without_reading_it() {
        let t = TempDir::new("huge");
        let c = DiskCache::at(&t.0);
        let k = key("huge");
        let path = c.entry_path(&k).unwrap();
        let mut rng = rand::rng();
        use rand::Rng;
        // Junk beyond the size bound; a valid header claiming a huge payload; and junk within
        // the bound (rejected by its header after reading 80 bytes).
        let mut claims_huge = encode_entry(&k, &[]);
        claims_huge[40..48].copy_from_slice(&(3u64 << 30).to_le_bytes());
        let junk: Vec<u8> = (0..HEADER_LEN).map(|_| rng.random()).collect();
        for (head, size) in [
            (junk.clone(), 3u64 << 30),
            (
                claims_huge[..HEADER_LEN].to_vec(),
                HEADER_LEN as u64 + (3 << 30),
            ),
            (junk, 256 << 20),
        ] {
            let f = fs::File::create(&path).unwrap();
            (&f).write_all(&head).unwrap();
            f.set_len(size).unwrap();
            drop(f);
            let start = std::time::Instant::now();
            match c.load(&k) {
                Lookup::Corrupt(_) => {}
                other => panic!("expected a corrupt entry, got {other:?}"),
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(1),
                "{size} bytes took {:?}",
                start.elapsed()
            );
            assert!(!path.exists(), "a corrupt entry must be deleted");
        }
        let p: Vec<u8> = (0..500).map(|_| rng.random()).collect();
        assert!(c.store(&k, &p));
        assert_eq!(c.load(&k), Lookup::Hit(p));
    }

    /// A directory at one entry's path made the store's rename fail, which turned the disk
    /// cache off for the whole process. Now only that entry is affected.
    #[test]
    fn directory_at_an_entry_path_affects_only_that_entry() {
        let t = TempDir::new("dir-entry");
        let c = DiskCache::at(&t.0);
        let mut rng = rand::rng();
        use rand::Rng;
        let p: Vec<u8> = (0..300).map(|_| rng.random()).collect();

        // An empty directory: skipped on load, cleared and replaced on store.
        let k = key("empty dir");
        let path = c.entry_path(&k).unwrap();
        fs::create_dir(&path).unwrap();
        assert!(matches!(c.load(&k), Lookup::Corrupt(r) if r.contains("directory")));
        assert!(path.is_dir(), "load leaves a directory alone");
        assert!(c.store(&k, &p));
        assert_eq!(c.load(&k), Lookup::Hit(p.clone()));

        // A directory with contents: never deleted; that entry is memory-only, the cache
        // stays on for every other key.
        let k = key("full dir");
        let path = c.entry_path(&k).unwrap();
        fs::create_dir(&path).unwrap();
        fs::write(path.join("keep"), b"someone's file").unwrap();
        assert!(matches!(c.load(&k), Lookup::Corrupt(_)));
        assert!(!c.store(&k, &p));
        assert_eq!(c.state(), CacheState::Enabled(t.0.clone()));
        assert_eq!(fs::read(path.join("keep")).unwrap(), b"someone's file");
        let other = key("another kernel");
        assert!(c.store(&other, &p));
        assert_eq!(c.load(&other), Lookup::Hit(p));
        // No temporary files are left behind by the failed store.
        let tmp = fs::read_dir(&t.0)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with('.')
            })
            .count();
        assert_eq!(tmp, 0);
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
