//! Attention written with `#[kernel]`: decode over a contiguous or paged KV cache (flash
//! decoding: the KV sequence split over blocks, then a combine step) and causal prefill (flash
//! attention on `mma.sync`).
//!
//! Shapes follow the serving engines: queries `[tokens, q_heads, head_dim]`, a KV cache of
//! `[pages, page_size, kv_heads, head_dim]` (a contiguous cache is `[batch, max_len, kv_heads,
//! head_dim]`), grouped-query attention with `q_heads` a multiple of `kv_heads` (query head `i`
//! reads KV head `i / (q_heads / kv_heads)`).

pub mod append;
pub mod bench;
pub mod cq;
pub mod cq_kernel;
pub mod decode;
pub mod kernel;
pub mod kv;
pub mod prefill;
