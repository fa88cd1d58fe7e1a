//! The text form of layouts, shared by the CLI and the `#[kernel]` macro.

use super::Layout;

/// A parse error with the byte range of the offending text, so callers can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    pub message: String,
    pub span: std::ops::Range<usize>,
}

/// Parse e.g. `local(2,1).spatial(8,4)`, `reduce(spatial(4,8), [0])`, `(f) / g`.
pub fn parse(text: &str) -> Result<Layout, ParseError> {
    let _ = text;
    todo!()
}
