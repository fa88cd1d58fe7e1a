//! Host-side operands and the CPU runner (the interpreter), with every argument checked before
//! anything runs.

use super::config::{packed_bytes, shape_err, size_product, QMatmulConfig, QMatmulError};
use super::program::QMatmulKernel;
use super::relayout::relayout;
use crate::quant::QuantizedWeight;
use crate::DType;
use half::{bf16, f16};
use tilus_core::interp::{self, Arg, BlockOrder};

/// A weight in the form the kernel reads: re-laid-out codes, and scales / zero points as
/// `[k / group, n]` elements of the activation type (little-endian).
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedWeight {
    pub k: usize,
    pub n: usize,
    /// [`relayout`] of the codes.
    pub b: Vec<u8>,
    pub scales: Vec<u8>,
    pub zeros: Option<Vec<u8>>,
}

/// Encode values (exactly representable, e.g. already rounded) as little-endian f16 or bf16.
pub fn encode_half(values: &[f32], dtype: DType) -> Vec<u8> {
    let bits = |v: f32| match dtype {
        DType::BF16 => bf16::from_f32(v).to_bits(),
        _ => f16::from_f32(v).to_bits(),
    };
    values.iter().flat_map(|&v| bits(v).to_le_bytes()).collect()
}

/// Decode little-endian f16 or bf16 values.
pub fn decode_half(bytes: &[u8], dtype: DType) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| {
            let bits = u16::from_le_bytes([c[0], c[1]]);
            match dtype {
                DType::BF16 => bf16::from_bits(bits).to_f32(),
                _ => f16::from_bits(bits).to_f32(),
            }
        })
        .collect()
}

/// Sizes in bytes of the operands of one call, for [`QMatmulKernel::check_lengths`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperandBytes {
    pub a: usize,
    pub b: usize,
    pub scales: usize,
    pub zeros: Option<usize>,
    pub c: usize,
}

/// The split-k buffers of the CPU runner ([`QMatmulKernel::run_cpu_with`]), kept between calls
/// as a GPU layer keeps its own: the f32 `workspace` and the i32 `semaphores` of
/// [`QMatmulConfig::split_buffers`], little-endian bytes. Empty with `split_k = 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct HostSplitScratch {
    /// The most rows a call may have.
    pub max_m: usize,
    /// The output columns they are sized for.
    pub n: usize,
    /// Partial sums, poisoned with NaN when made (a partial never written cannot pass as a
    /// value); their content between calls is unspecified.
    pub workspace: Vec<u8>,
    /// One counter per output tile: zero when made, and zero again after every call.
    pub semaphores: Vec<u8>,
}

impl HostSplitScratch {
    /// Buffers for up to `max_m` rows of an `n`-column output (errors name `m` or `n`).
    pub fn new(config: &QMatmulConfig, max_m: usize, n: usize) -> Result<Self, QMatmulError> {
        let (ws, sems) = config.split_buffers(max_m, n)?;
        Ok(HostSplitScratch {
            max_m,
            n,
            workspace: f32::NAN.to_le_bytes().repeat(ws),
            semaphores: vec![0; 4 * sems],
        })
    }
}

/// Check that `weight` matches `config` and put it in kernel form.
pub fn prepare(
    weight: &QuantizedWeight,
    config: &QMatmulConfig,
) -> Result<PreparedWeight, QMatmulError> {
    let (k, n) = (weight.k, weight.n);
    if weight.scale_dtype != config.adtype {
        return Err(shape_err(
            "weight",
            format!(
                "scales are rounded to {} but the activations are {}",
                weight.scale_dtype, config.adtype
            ),
        ));
    }
    if weight.group_rows() != config.group_size(k) {
        return Err(shape_err(
            "weight",
            format!(
                "quantized with {} rows per group but the configuration has {}",
                weight.group_rows(),
                config.group_size(k)
            ),
        ));
    }
    if weight.zeros.is_some() != config.has_zeros {
        return Err(shape_err(
            "weight",
            format!(
                "the weight {} zero points but the configuration has has_zeros = {}",
                if weight.zeros.is_some() {
                    "has"
                } else {
                    "has no"
                },
                config.has_zeros
            ),
        ));
    }
    let b = relayout(weight, config)?;
    Ok(PreparedWeight {
        k,
        n,
        b,
        scales: encode_half(&weight.scales, config.adtype),
        zeros: weight.zeros.as_ref().map(|z| encode_half(z, config.adtype)),
    })
}

fn expect_len(
    arg: &'static str,
    got: usize,
    expected: usize,
    what: String,
) -> Result<(), QMatmulError> {
    if got == expected {
        Ok(())
    } else {
        Err(QMatmulError::Buffer {
            arg,
            expected,
            got,
            what,
        })
    }
}

impl QMatmulKernel {
    /// Check an `[m, k] x [k, n]` call: the shape (errors name `m`, `n`, `k`) and every buffer
    /// length (errors name `a`, `b`, `scales`, `zeros`, `c`).
    pub fn check_call(
        &self,
        m: usize,
        a: &[u8],
        w: &PreparedWeight,
        c: &[u8],
    ) -> Result<(), QMatmulError> {
        let bytes = OperandBytes {
            a: a.len(),
            b: w.b.len(),
            scales: w.scales.len(),
            zeros: w.zeros.as_ref().map(Vec::len),
            c: c.len(),
        };
        self.check_lengths(m, w.n, w.k, &bytes)
    }

    /// [`QMatmulKernel::check_call`] on lengths alone, for operands that live on the device.
    pub fn check_lengths(
        &self,
        m: usize,
        n: usize,
        k: usize,
        bytes: &OperandBytes,
    ) -> Result<(), QMatmulError> {
        let cfg = &self.config;
        cfg.check_shape(m, n, k)?;
        let ad = cfg.adtype;
        let a_bytes = size_product("m", &[("m", m), ("k", k), ("2 bytes", 2)])?;
        expect_len("a", bytes.a, a_bytes, format!("{m} x {k} {ad}"))?;
        expect_len(
            "b",
            bytes.b,
            packed_bytes("k", cfg.wdtype, k, n)?,
            format!("{k} x {n} {} codes", cfg.wdtype),
        )?;
        let groups = k / cfg.group_size(k);
        let group_bytes = size_product("n", &[("groups", groups), ("n", n), ("2 bytes", 2)])?;
        expect_len(
            "scales",
            bytes.scales,
            group_bytes,
            format!("{groups} x {n} {ad}"),
        )?;
        match (bytes.zeros, cfg.has_zeros) {
            (Some(z), true) => expect_len("zeros", z, group_bytes, format!("{groups} x {n} {ad}"))?,
            (None, false) => {}
            (Some(_), false) => {
                return Err(shape_err(
                    "zeros",
                    "given, but the configuration has has_zeros = false",
                ))
            }
            (None, true) => {
                return Err(shape_err(
                    "zeros",
                    "missing; the configuration has has_zeros = true",
                ))
            }
        }
        let c_bytes = size_product("m", &[("m", m), ("n", n), ("2 bytes", 2)])?;
        expect_len("c", bytes.c, c_bytes, format!("{m} x {n} {ad}"))
    }

    /// Run `c = a · dequant(w)` on the CPU interpreter. `a` is `[m, k]` and `c` `[m, n]`,
    /// row-major little-endian elements of the activation type; `c` is overwritten. With
    /// `split_k > 1` the split-k buffers are made for this call.
    pub fn run_cpu(
        &self,
        m: usize,
        a: &[u8],
        w: &PreparedWeight,
        c: &mut [u8],
    ) -> Result<(), QMatmulError> {
        self.check_call(m, a, w, c)?;
        if m == 0 {
            return Ok(());
        }
        let mut scratch = HostSplitScratch::new(&self.config, m, w.n)?;
        self.run_cpu_with(m, a, w, c, &mut scratch, &BlockOrder::Launch)
    }

    /// [`Self::run_cpu`] with the split-k buffers of `scratch` (made for at least `m` rows and
    /// `w`'s columns; errors name `m` or `n`), and the blocks run in `order`: whichever block
    /// of an output tile comes last sums the partial sums, so every order gives the same
    /// result, bit for bit. The semaphores are zero again afterwards.
    pub fn run_cpu_with(
        &self,
        m: usize,
        a: &[u8],
        w: &PreparedWeight,
        c: &mut [u8],
        scratch: &mut HostSplitScratch,
        order: &BlockOrder,
    ) -> Result<(), QMatmulError> {
        self.check_call(m, a, w, c)?;
        if m == 0 {
            return Ok(());
        }
        if self.config.needs_split_buffers() {
            check_split_scratch(m, w.n, scratch.max_m, scratch.n)?;
        }
        let cfg = &self.config;
        let i = |v: usize| Arg::I32(v as i32);
        if let Some(dequant) = &self.dequant {
            // The dense weight, poisoned (0xFFFF is NaN in f16 and bf16) so that an element the
            // program never writes cannot pass as a value.
            let mut args = vec![
                i(w.n),
                i(w.k),
                Arg::Buffer(w.b.clone()),
                Arg::Buffer(w.scales.clone()),
            ];
            // Without zero points the program views `zeros` with no rows.
            args.push(Arg::Buffer(w.zeros.clone().unwrap_or_default()));
            args.push(Arg::Buffer(vec![0xFF; w.k * w.n * 2]));
            interp::run(dequant, &mut args)?;
            let dense = match args.pop() {
                Some(Arg::Buffer(d)) => decode_half(&d, cfg.adtype),
                _ => unreachable!("pushed above"),
            };
            let x = decode_half(a, cfg.adtype);
            // The GEMM with f32 accumulation, as cuBLAS computes it on the GPU.
            let mut out = vec![0f32; m * w.n];
            for r in 0..m {
                let row = &mut out[r * w.n..(r + 1) * w.n];
                for (kk, &xv) in x[r * w.k..(r + 1) * w.k].iter().enumerate() {
                    for (o, &wv) in row.iter_mut().zip(&dense[kk * w.n..(kk + 1) * w.n]) {
                        *o += xv * wv;
                    }
                }
            }
            c.copy_from_slice(&encode_half(&out, cfg.adtype));
            return Ok(());
        }
        let mut args = vec![
            i(m),
            i(w.n),
            i(w.k),
            Arg::Buffer(a.to_vec()),
            Arg::Buffer(w.b.clone()),
            Arg::Buffer(w.scales.clone()),
        ];
        args.push(Arg::Buffer(w.zeros.clone().unwrap_or_default()));
        args.push(Arg::Buffer(c.to_vec()));
        // The pre-pass runs before the split-k buffers leave `scratch`, so that its errors
        // return them too.
        let mut pre = Vec::new();
        if let Some(digits) = &self.digits {
            // The pre-pass's buffers, poisoned (NaN, and digits of -1) so that an element it
            // never writes cannot pass as a value.
            let (nd, ns) = cfg.digit_buffers(m, w.k)?;
            pre = vec![
                i(m),
                i(w.k),
                Arg::Buffer(a.to_vec()),
                Arg::Buffer(vec![0xFF; nd]),
                Arg::Buffer(f32::NAN.to_le_bytes().repeat(ns)),
            ];
            interp::run(digits, &mut pre)?;
        }
        args.push(Arg::Buffer(std::mem::take(&mut scratch.workspace)));
        args.push(Arg::Buffer(std::mem::take(&mut scratch.semaphores)));
        args.extend(pre.drain(3.min(pre.len())..));
        // The interpreter runs one grid: never a dependent of another.
        let dependent = self.takes_dependent();
        if dependent {
            args.push(i(0));
        }
        let result = interp::run_ordered(&self.main, &mut args, order);
        if dependent {
            args.pop();
        }
        if self.digits.is_some() {
            args.truncate(args.len() - 2);
        }
        // The buffers come back also after an error.
        let mut take = || match args.pop() {
            Some(Arg::Buffer(b)) => b,
            _ => unreachable!("pushed above"),
        };
        scratch.semaphores = take();
        scratch.workspace = take();
        let out = take();
        result?;
        c.copy_from_slice(&out);
        Ok(())
    }
}

/// The split-k buffers made for `max_m` rows of `reserved_n` columns serve a call of `m` rows
/// of `n` columns (errors name `m` or `n`).
pub(crate) fn check_split_scratch(
    m: usize,
    n: usize,
    max_m: usize,
    reserved_n: usize,
) -> Result<(), QMatmulError> {
    if n != reserved_n {
        return Err(shape_err(
            "n",
            format!("{n} columns, but the split-k buffers were made for {reserved_n}"),
        ));
    }
    if m > max_m {
        return Err(shape_err(
            "m",
            format!(
                "{m} rows exceed the {max_m} rows the split-k workspace and semaphores were reserved for; reserve more rows first"
            ),
        ));
    }
    Ok(())
}
