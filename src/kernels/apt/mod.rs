//! APT-LLM on the 1-bit tensor cores (issue 20, `docs/apt.md`): the bit-serial WxAy GEMM and the
//! activation quantizer ([`kernel`]), written with `#[kernel]` over the VM's u1 `dot`.

pub mod kernel;
