//! The algebraic layout system.
pub struct Layout;
