//! Subcommands of the `tilus` binary. Each returns `Err(message)` for bad input; `main` prints
//! it on one line and exits with status 2.

pub mod bench;
pub mod bench_apt;
pub mod bench_vq;
pub mod checkpoint;
pub mod doctor;
pub mod dtype;
pub mod emit;
pub mod layout;
