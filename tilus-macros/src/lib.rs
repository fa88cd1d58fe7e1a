//! `#[kernel]`: lands with issue 4.
