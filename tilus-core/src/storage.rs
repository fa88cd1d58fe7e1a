//! Compact storage of sub-byte values.
