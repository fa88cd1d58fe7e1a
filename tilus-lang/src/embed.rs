//! Compact embedding of per-configuration data (serialized programs, CUDA sources).
//!
//! Entries are deduplicated by content, then laid end to end in chunks of about
//! [`CHUNK_BYTES`] and each chunk is DEFLATE-compressed (kept raw when that does not help).
//! Sources of neighbouring configurations differ only in a few constants and share their whole
//! prelude, so they compress very well together; chunking bounds what one lookup inflates.
//! The facade's `macro_support::Pack` reads this format back lazily, one chunk at a time.

use std::collections::HashMap;

use proc_macro2::{Literal, TokenStream};
use quote::quote;

/// Uncompressed bytes per chunk.
pub const CHUNK_BYTES: usize = 256 * 1024;

#[derive(Default)]
pub struct PackBuilder {
    /// (chunk, offset, length) of each entry.
    entries: Vec<(u32, u32, u32)>,
    seen: HashMap<Vec<u8>, u32>,
    current: Vec<u8>,
    chunks: Vec<Vec<u8>>,
    raw_bytes: usize,
}

impl PackBuilder {
    /// Add `bytes` (or find an identical entry); returns the entry index.
    pub fn add(&mut self, bytes: &[u8]) -> u32 {
        if let Some(&i) = self.seen.get(bytes) {
            return i;
        }
        if !self.current.is_empty() && self.current.len() + bytes.len() > CHUNK_BYTES {
            self.flush();
        }
        let i = self.entries.len() as u32;
        self.entries.push((
            self.chunks.len() as u32,
            self.current.len() as u32,
            bytes.len() as u32,
        ));
        self.current.extend_from_slice(bytes);
        self.raw_bytes += bytes.len();
        self.seen.insert(bytes.to_vec(), i);
        i
    }

    fn flush(&mut self) {
        let raw = std::mem::take(&mut self.current);
        self.chunks.push(raw);
    }

    /// Compress and turn into tokens: a `::tilus::macro_support::Pack` constant expression.
    pub fn finish(mut self) -> (TokenStream, PackStats) {
        if !self.current.is_empty() {
            self.flush();
        }
        let mut stats = PackStats {
            entries: self.entries.len(),
            raw_bytes: self.raw_bytes,
            stored_bytes: 0,
        };
        let chunks: Vec<TokenStream> = self
            .chunks
            .iter()
            .map(|raw| {
                let packed = miniz_oxide::deflate::compress_to_vec(raw, 9);
                let (compressed, data) = if packed.len() < raw.len() {
                    (true, packed)
                } else {
                    (false, raw.clone())
                };
                stats.stored_bytes += data.len();
                let lit = Literal::byte_string(&data);
                quote!(::tilus::macro_support::Chunk { compressed: #compressed, data: #lit })
            })
            .collect();
        let n = chunks.len();
        let entries = self.entries.iter().map(|(c, o, l)| quote!((#c, #o, #l)));
        let tokens = quote! {
            {
                static CHUNKS: [::tilus::macro_support::Chunk; #n] = [#(#chunks),*];
                static CACHE: [::std::sync::OnceLock<::std::boxed::Box<[u8]>>; #n] =
                    [const { ::std::sync::OnceLock::new() }; #n];
                ::tilus::macro_support::Pack {
                    chunks: &CHUNKS,
                    cache: &CACHE,
                    entries: &[#(#entries),*],
                }
            }
        };
        (tokens, stats)
    }
}

/// Sizes, for `docs/macro.md` measurements and tests.
#[derive(Clone, Copy, Debug)]
pub struct PackStats {
    pub entries: usize,
    pub raw_bytes: usize,
    pub stored_bytes: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedupes_and_chunks() {
        let mut p = PackBuilder::default();
        let a = p.add(b"hello");
        let b = p.add(b"world");
        let c = p.add(b"hello");
        assert_eq!((a, b, c), (0, 1, 0));
        let big = vec![7u8; CHUNK_BYTES];
        let d = p.add(&big);
        assert_eq!(p.entries[d as usize].0, 1, "a full chunk starts a new one");
        let (_, stats) = p.finish();
        assert_eq!(stats.entries, 3);
        assert!(stats.stored_bytes < stats.raw_bytes / 10);
    }
}
