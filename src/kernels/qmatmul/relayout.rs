//! The offline weight re-layout (paper Figure 8, generalized to every weight type and tile).
//!
//! The matmul loads each `[bk, bn]` weight tile as `tile_bytes` plain bytes in the byte layout
//! `W = local(bpt / v).spatial(32 wn).local(v)` and reinterprets each thread's bytes as its
//! locals of the codes layout `Q` (the mma B-operand layout `B` with each thread's locals in
//! the packing order, `QMatmulLayouts::q`; `view`, no data movement). So, for every tile
//! `(kt, nb)` (stored tile-major at `(kt * n / bn + nb) * tile_bytes`) and every thread `t` of
//! one warp-column group:
//!
//! ```text
//! bits(t)                  = pack(wdtype, [W[kt bk + Q(t, i).0, nb bn + Q(t, i).1] for i in 0..L])
//! tile[W(t, j)]            = bits(t)[j]          for j in 0..bpt
//! ```
//!
//! [`relayout`] does this on the host, [`relayout_inverse`] undoes it, and
//! [`build_relayout_program`] is the same transformation as a VM program: load the row-major
//! codes with `Q` as the weight type, `view` them as bytes in `W`, store.

use super::config::{packed_bytes, QMatmulConfig, QMatmulError, QMatmulMethod};
use super::kernel;
use super::layouts::QMatmulLayouts;
use super::program::{check, config_name, instantiate, pack_order};
use crate::quant::QuantizedWeight;
use crate::DType;
use tilus_core::ir::Program;
use tilus_core::storage;

/// Where each local of one thread comes from, how its codes become bytes and where each of
/// its bytes goes, per tile.
struct ThreadMaps {
    /// `[threads][locals]`: (row, col) of each Q local inside the tile.
    elems: Vec<Vec<(usize, usize)>>,
    /// `[threads][bytes]`: byte offset inside the tile.
    bytes: Vec<Vec<usize>>,
    packing: Packing,
}

/// How a thread's codes (in `Q`'s order) become its bytes.
enum Packing {
    /// Packed as `wdtype` codes, in order.
    Codes(DType),
    /// The integer-mma gemv's two planes of 3- and 5-bit codes (`super::imma::PlaneMap`).
    Planes(super::imma::PlaneMap),
}

impl ThreadMaps {
    fn pack(&self, th: usize, codes: &[u32]) -> Vec<u8> {
        match &self.packing {
            Packing::Codes(dt) => storage::pack(*dt, codes),
            Packing::Planes(planes) => planes.pack(th, codes),
        }
    }

    fn unpack(&self, th: usize, bytes: &[u8], locals: usize) -> Vec<u32> {
        match &self.packing {
            Packing::Codes(dt) => storage::unpack(*dt, bytes, locals),
            Packing::Planes(planes) => planes.unpack(th, bytes, locals),
        }
    }
}

fn thread_maps(config: &QMatmulConfig, lay: &QMatmulLayouts) -> ThreadMaps {
    let t = lay.tiling;
    let threads = 32 * t.warps_n;
    let elems = (0..threads)
        .map(|th| {
            (0..t.locals_per_thread)
                .map(|i| {
                    let x = lay.q.eval(th, i);
                    (x[0], x[1])
                })
                .collect()
        })
        .collect();
    let packing =
        if config.method == QMatmulMethod::GemvImma && super::imma::two_planes(config.wdtype) {
            Packing::Planes(super::imma::PlaneMap::new(config, &t))
        } else {
            Packing::Codes(config.wdtype)
        };
    let bytes = (0..threads)
        .map(|th| match &packing {
            Packing::Codes(_) => (0..t.bytes_per_thread)
                .map(|j| lay.wbytes.eval(th, j)[0])
                .collect(),
            Packing::Planes(planes) => planes.offsets(&t, th),
        })
        .collect();
    ThreadMaps {
        elems,
        bytes,
        packing,
    }
}

fn check_weight(
    config: &QMatmulConfig,
    dtype: DType,
    k: usize,
    n: usize,
) -> Result<QMatmulLayouts, QMatmulError> {
    if dtype != config.wdtype {
        return Err(super::config::shape_err(
            "weight",
            format!(
                "the weight is {dtype} but the configuration is for {}",
                config.wdtype
            ),
        ));
    }
    config.check_shape(0, n, k)?;
    QMatmulLayouts::distinct(config)
}

/// Re-lay-out the row-major packed codes of `weight` for `config` (see the module docs).
/// The result has as many bytes as `weight.codes`.
pub fn relayout(weight: &QuantizedWeight, config: &QMatmulConfig) -> Result<Vec<u8>, QMatmulError> {
    if config.method == QMatmulMethod::Lut {
        return super::lut::relayout_lut(weight, config);
    }
    let (k, n, dt) = (weight.k, weight.n, weight.dtype);
    // The fields are public: a hand-built weight must agree with itself before it is indexed.
    weight
        .check()
        .map_err(|e| super::config::shape_err("weight", e.to_string()))?;
    let lay = check_weight(config, dt, k, n)?;
    let len = packed_bytes("weight", dt, k, n)?;
    if weight.codes.len() != len {
        return Err(QMatmulError::Buffer {
            arg: "weight",
            expected: len,
            got: weight.codes.len(),
            what: format!("{k} x {n} packed {dt} codes"),
        });
    }
    if !super::config::is_weight_type(dt) {
        return Err(super::config::shape_err(
            "weight",
            format!("{dt} is not a weight type of the quantized matmul (1 to 8 bits)"),
        ));
    }
    // Each code read in place from the packed bytes and mapped through a table of the type's
    // codes: no unpacked copy (4 bytes a weight, 1.9 GB at 57344 x 8192).
    let bits = dt.bits() as usize;
    let mut table: Vec<u32> = (0..1u32 << bits).collect();
    to_kernel_codes(config, &mut table);
    let bytes = &weight.codes[..];
    Ok(relayout_codes(config, &lay, k, n, |r, c| {
        table[packed_code(bytes, bits, r * n + c) as usize]
    }))
}

/// Code `index` of `bits` (1 to 8) bits a code, packed from the low bit of each byte up (as
/// `tilus_core::storage::pack` writes them): within one byte or across two.
fn packed_code(bytes: &[u8], bits: usize, index: usize) -> u32 {
    let at = index * bits;
    let (byte, shift) = (at / 8, at % 8);
    let mut word = bytes[byte] as u32;
    if shift + bits > 8 {
        word |= (bytes[byte + 1] as u32) << 8;
    }
    (word >> shift) & ((1 << bits) - 1)
}

/// The codes of a `[k, n]` weight of `config`'s weight type, as the kernel reads them
/// (`code(r, c)` for row `r` of k and column `c` of n, unpacked), in the kernel's tile layout,
/// for a caller that holds codes rather than a [`QuantizedWeight`] (APT's integer-mma decode
/// kernel, whose codes are `[n, k]` bytes: read in place, no transposed copy). `k` a multiple
/// of `bk`, `n` of `bn`.
pub(crate) fn relayout_kernel_codes(
    config: &QMatmulConfig,
    k: usize,
    n: usize,
    code: impl Fn(usize, usize) -> u32 + Sync,
) -> Result<Vec<u8>, QMatmulError> {
    let lay = QMatmulLayouts::distinct(config)?;
    if !k.is_multiple_of(config.bk) || !n.is_multiple_of(config.bn) {
        return Err(super::config::shape_err(
            "codes",
            format!(
                "{k} x {n} is not in whole tiles of {} x {}",
                config.bk, config.bn
            ),
        ));
    }
    Ok(relayout_codes(config, &lay, k, n, code))
}

/// The shared body of [`relayout`] and [`relayout_kernel_codes`]: shapes checked.
fn relayout_codes(
    config: &QMatmulConfig,
    lay: &QMatmulLayouts,
    k: usize,
    n: usize,
    code: impl Fn(usize, usize) -> u32 + Sync,
) -> Vec<u8> {
    let len = k * n * config.wdtype.bits() as usize / 8;
    let maps = thread_maps(config, lay);
    let t = lay.tiling;
    let mut out = vec![0u8; len];
    // One row of tiles (a `bk`-row slab of the weight) per chunk, slabs in parallel.
    let tiles_per_row = n / config.bn;
    crate::parallel::for_each_chunk_mut(&mut out, tiles_per_row * t.tile_bytes, |kt, slab| {
        let mut mine = vec![0u32; t.locals_per_thread];
        for nb in 0..tiles_per_row {
            let base = nb * t.tile_bytes;
            for (th, (elems, bytes)) in maps.elems.iter().zip(&maps.bytes).enumerate() {
                for (v, &(r, c)) in mine.iter_mut().zip(elems) {
                    *v = code(kt * config.bk + r, nb * config.bn + c);
                }
                let packed = maps.pack(th, &mine);
                for (&byte, &at) in packed.iter().zip(bytes) {
                    slab[base + at] = byte;
                }
            }
        }
    });
    out
}

/// Undo [`relayout`]: the row-major packed codes of a `[k, n]` weight of `config.wdtype`.
pub fn relayout_inverse(
    bytes: &[u8],
    config: &QMatmulConfig,
    k: usize,
    n: usize,
) -> Result<Vec<u8>, QMatmulError> {
    if config.method == QMatmulMethod::Lut {
        return super::lut::relayout_lut_inverse(bytes, config, k, n);
    }
    let dt = config.wdtype;
    let lay = check_weight(config, dt, k, n)?;
    let len = packed_bytes("k", dt, k, n)?;
    if bytes.len() != len {
        return Err(QMatmulError::Buffer {
            arg: "bytes",
            expected: len,
            got: bytes.len(),
            what: format!("{k} x {n} re-laid-out {dt} codes"),
        });
    }
    let maps = thread_maps(config, &lay);
    let t = lay.tiling;
    let mut codes = vec![0u32; k * n];
    let mut mine = vec![0u8; t.bytes_per_thread];
    for kt in 0..k / config.bk {
        for nb in 0..n / config.bn {
            let base = (kt * (n / config.bn) + nb) * t.tile_bytes;
            for (th, (elems, offs)) in maps.elems.iter().zip(&maps.bytes).enumerate() {
                for (byte, &at) in mine.iter_mut().zip(offs) {
                    *byte = bytes[base + at];
                }
                let unpacked = maps.unpack(th, &mine, t.locals_per_thread);
                for (&code, &(r, c)) in unpacked.iter().zip(elems) {
                    codes[(kt * config.bk + r) * n + nb * config.bn + c] = code;
                }
            }
        }
    }
    from_kernel_codes(config, &mut codes);
    Ok(storage::pack(dt, &codes))
}

/// The codes the kernels read: `f3e1m1`'s re-coded as `i3`'s of the same value
/// ([`super::config::kernel_codes`]), then, for the integer-mma gemvs, signed codes in offset
/// binary.
fn to_kernel_codes(config: &QMatmulConfig, codes: &mut [u32]) {
    recode(config.wdtype, codes, super::config::to_kernel_code);
    offset_binary(config, codes);
}

/// The inverse of [`to_kernel_codes`].
fn from_kernel_codes(config: &QMatmulConfig, codes: &mut [u32]) {
    offset_binary(config, codes);
    recode(config.wdtype, codes, super::config::from_kernel_code);
}

/// Map every code of a `wd` weight by `f` (through a table of its codes) where the kernels
/// read the weight type as another type.
fn recode(wd: DType, codes: &mut [u32], f: fn(DType, u32) -> u32) {
    if super::config::kernel_codes(wd) != wd {
        let table: Vec<u32> = (0..1u32 << wd.bits()).map(|c| f(wd, c)).collect();
        codes.iter_mut().for_each(|c| *c = table[*c as usize]);
    }
}

/// The integer-mma gemvs store signed codes in offset binary (`super::imma`): flip each code's sign bit
/// (its own inverse). Other methods keep two's complement.
fn offset_binary(config: &QMatmulConfig, codes: &mut [u32]) {
    if let (QMatmulMethod::GemvImma | QMatmulMethod::GemvIgmma, DType::Int(bits)) =
        (config.method, super::config::kernel_codes(config.wdtype))
    {
        let sign = 1u32 << (bits - 1);
        codes.iter_mut().for_each(|c| *c ^= sign);
    }
}

/// The device re-layout program of `config` ([`super::kernel::qmatmul_relayout`]): parameters
/// `k, n: i32`, `w` (the packed row-major codes), `out: *mut u8`; grid `[k / bk, n / bn]`.
pub fn build_relayout_program(config: &QMatmulConfig) -> Result<Program, QMatmulError> {
    if matches!(
        config.method,
        QMatmulMethod::Lut | QMatmulMethod::GemvImma | QMatmulMethod::GemvIgmma
    ) {
        return Err(super::config::config_err(
            "method",
            "the look-up method's bit planes and the integer-mma gemv's offset-binary fields are \
             re-laid on the host (relayout)",
        ));
    }
    let lay = QMatmulLayouts::distinct(config)?;
    let t = lay.tiling;
    let v = |x: usize| x as i32;
    let cfg = kernel::qmatmul_relayout::Config {
        BN: v(config.bn),
        BK: v(config.bk),
        WN: v(t.warps_n),
        H: v(pack_order(config, &lay)),
        VEC: v(t.vector_bytes),
        GEMV: match config.method {
            QMatmulMethod::Gemv => 1,
            QMatmulMethod::GemvWgmma => 2,
            _ => 0,
        },
        W: config.wdtype,
        C: super::config::kernel_codes(config.wdtype),
    };
    let p = instantiate(
        kernel::qmatmul_relayout::translate(&cfg),
        format!("qmatmul_relayout_{}", config_name(config)),
    )?;
    check(&p)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::packed_code;
    use rand::Rng;
    use tilus_core::storage;

    /// Every code of every width, read in place, is the one `storage::pack` wrote.
    #[test]
    fn packed_code_reads_what_pack_wrote() {
        let mut rng = rand::rng();
        for bits in 1..=8u8 {
            let dt = crate::DType::UInt(bits);
            let codes: Vec<u32> = (0..1001).map(|_| rng.random_range(0..1 << bits)).collect();
            let bytes = storage::pack(dt, &codes);
            for (i, &c) in codes.iter().enumerate() {
                assert_eq!(packed_code(&bytes, bits as usize, i), c, "u{bits} code {i}");
            }
        }
    }
}
