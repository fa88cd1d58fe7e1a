//! The paper programs (placeholder).
