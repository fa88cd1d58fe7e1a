//! What a program is verified and compiled for: the [`Target`].
//!
//! One value carries everything architecture-dependent that the verifier and the code generator
//! consult: the architecture, the shared memory a block may use, the matrix instructions and
//! their operand types, and the features instruction selection may rely on. `#[kernel]` takes it
//! from the attribute (`target = sm80 | sm90`, default sm90) at build time; the runtime picks it
//! from the device's compute capability ([`Target::for_compute_capability`]); and the launcher
//! refuses a kernel whose target the device does not satisfy ([`Target::runs_on`]).
//!
//! Today's targets are sm_80 (Ampere: `mma.sync`, `cp.async`, `ldmatrix`) and sm_90a (Hopper:
//! the same, plus TMA, `mbarrier` and `wgmma`, which instruction selection does not use yet). A
//! Blackwell target (sm_100, `tcgen05`) would be one more constant here and its emitters.

use crate::DType;

/// A GPU architecture the code generator knows.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Arch {
    /// Ampere and Ada (compute capability 8.x).
    Sm80,
    /// Hopper with its architecture-specific features (compute capability 9.0).
    Sm90a,
}

impl Arch {
    /// The NVRTC/ptxas name: `sm_80`, `sm_90a`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm_80",
            Arch::Sm90a => "sm_90a",
        }
    }

    /// Whether code for this architecture runs on a device of compute capability
    /// `major.minor` (sm_90a code runs only on 9.0: its architecture-specific features are not
    /// forward compatible).
    pub fn runs_on(self, major: u32, minor: u32) -> bool {
        match self {
            Arch::Sm80 => major >= 8,
            Arch::Sm90a => (major, minor) == (9, 0),
        }
    }
}

/// The operand types of a matrix instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MmaKind {
    /// f16 x f16 + f32.
    F16,
    /// bf16 x bf16 + f32.
    Bf16,
    /// i8 x i8 + i32.
    I8,
    /// u8 x u8 + i32.
    U8,
    /// OCP fp8 e4m3 x e4m3 + f32: the warpgroup MMA, and `mma.sync.m16n8k32` from sm_89
    /// (`mma_a_f8`, `mma_b_f8`). sm_90 has no fp8 `mma.sync` in hardware: ptxas unpacks each
    /// register to f16 (`F2FP.F16.E4M3.UNPACK_B`) and issues two `HMMA.16816` (perf note 59).
    E4M3,
    /// OCP fp8 e5m2 x e5m2 + f32, as [`MmaKind::E4M3`].
    E5M2,
    /// u1 x u1 + i32 with AND and popcount (`mma.m16n8k256 .b1 .and.popc`): `c += popc(a & b)`
    /// over k. The `.xor.popc` form is emulated on sm_90 (5.9x slower), so only AND is used.
    B1,
    /// The same instruction on the *paired* u1 fragments (`mma_b1_ap`, `mma_b1_bp`, `mma_b1_cp`):
    /// rows and k permuted within the tile so that each thread's two k-halves of a row are
    /// adjacent words (8-byte loads and stores); the code generator passes the A registers in
    /// the instruction's order. [`MmaKind::of`] gives [`MmaKind::B1`]; the verifier picks this
    /// kind when the layouts are tiles of the paired fragments.
    B1Paired,
    /// `mma.m16n8k16` f16 x f16 + f32 on the *run* fragments (`mma_a_k4`/`mma_b_k4` for 4,
    /// `mma_a_k8`/`mma_b_k8` for 8): k permuted so that each thread holds runs of that many
    /// consecutive k; a tile of `4 r` k is `r / 4` instructions, the code generator passing
    /// each its words (`layout::fragments`). [`MmaKind::of`] gives [`MmaKind::F16`]; the
    /// verifier picks this kind when the layouts are tiles of the run fragments.
    F16Runs(u8),
    /// The same for bf16.
    Bf16Runs(u8),
    /// 8-bit integers of either signedness, each operand its own (`.u8`/`.s8`), + i32 on
    /// `mma.sync.m16n8k32` (sm_80+), on the 8-bit k32 fragments it shares with fp8 (`mma_a_f8`,
    /// `mma_b_f8`): twice the k of [`MmaKind::I8`]'s m16n8k16 per instruction, and the one
    /// integer form where a u8 operand meets an s8 one (a weight code masked in place against
    /// signed activations). The verifier picks it for 8-bit integer operands whose layouts are
    /// tiles of these fragments, and for every mixed pair.
    Int8K32 { a_signed: bool, b_signed: bool },
}

impl MmaKind {
    /// The kind for operands of `operand` and an accumulator of `acc`, if one exists.
    pub fn of(operand: DType, acc: DType) -> Option<MmaKind> {
        Some(match (operand, acc) {
            (DType::F16, DType::F32) => MmaKind::F16,
            (DType::BF16, DType::F32) => MmaKind::Bf16,
            (DType::Int(8), DType::Int(32)) => MmaKind::I8,
            (DType::UInt(8), DType::Int(32)) => MmaKind::U8,
            (DType::F8E4M3, DType::F32) => MmaKind::E4M3,
            (DType::F8E5M2, DType::F32) => MmaKind::E5M2,
            (DType::UInt(1), DType::Int(32)) => MmaKind::B1,
            _ => return None,
        })
    }

    /// The `(m, n, k)` of the `mma.sync` instruction that serves this kind.
    pub fn shape(self) -> (u32, u32, u32) {
        match self {
            MmaKind::B1 | MmaKind::B1Paired => (16, 8, 256),
            MmaKind::F16Runs(r) | MmaKind::Bf16Runs(r) => (16, 8, 4 * r as u32),
            MmaKind::E4M3 | MmaKind::E5M2 | MmaKind::Int8K32 { .. } => (16, 8, 32),
            _ => (16, 8, 16),
        }
    }
}

/// One matrix instruction shape: `[m, k] x [k, n] + [m, n]` for the listed operand kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MmaShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub kinds: &'static [MmaKind],
}

/// Instruction families selection may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Features {
    /// `cp.async` global-to-shared copies (sm_80+).
    pub cp_async: bool,
    /// `ldmatrix` shared-to-register fragment loads (sm_75+).
    pub ldmatrix: bool,
    /// The tensor memory accelerator's bulk copies (sm_90).
    pub tma: bool,
    /// Transaction barriers in shared memory (sm_90).
    pub mbarrier: bool,
    /// `setmaxnreg`: warpgroups re-size their register files (sm_90a).
    pub setmaxnreg: bool,
}

/// What a program is verified and compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub arch: Arch,
    /// Shared memory one block may use, in bytes (227 KiB on sm_90, 163 KiB on sm_80).
    pub max_shared_bytes: usize,
    /// Warp-level `mma.sync` shapes.
    pub mma: &'static [MmaShape],
    /// Warpgroup-level `wgmma` shapes (`n` is the largest; any multiple of 8 up to it).
    pub wgmma: &'static [MmaShape],
    pub features: Features,
}

const ALL_KINDS: &[MmaKind] = &[
    MmaKind::F16,
    MmaKind::Bf16,
    MmaKind::I8,
    MmaKind::U8,
    MmaKind::F16Runs(4),
    MmaKind::Bf16Runs(4),
];
const MMA_SYNC: &[MmaShape] = &[
    MmaShape {
        m: 16,
        n: 8,
        k: 16,
        kinds: ALL_KINDS,
    },
    // Two m16n8k16 instructions on the runs-of-8 fragments.
    MmaShape {
        m: 16,
        n: 8,
        k: 32,
        kinds: &[MmaKind::F16Runs(8), MmaKind::Bf16Runs(8)],
    },
    MmaShape {
        m: 16,
        n: 8,
        k: 256,
        kinds: &[MmaKind::B1, MmaKind::B1Paired],
    },
    MmaShape {
        m: 16,
        n: 8,
        k: 32,
        kinds: &[
            MmaKind::Int8K32 {
                a_signed: true,
                b_signed: true,
            },
            MmaKind::Int8K32 {
                a_signed: true,
                b_signed: false,
            },
            MmaKind::Int8K32 {
                a_signed: false,
                b_signed: true,
            },
            MmaKind::Int8K32 {
                a_signed: false,
                b_signed: false,
            },
        ],
    },
];
/// sm_90 adds the fp8 `mma.sync` (sm_89+).
const MMA_SYNC_SM90: &[MmaShape] = &[
    MMA_SYNC[0],
    MMA_SYNC[1],
    MMA_SYNC[2],
    MMA_SYNC[3],
    MmaShape {
        m: 16,
        n: 8,
        k: 32,
        kinds: &[MmaKind::E4M3, MmaKind::E5M2],
    },
];

impl Target {
    pub const SM80: Target = Target {
        arch: Arch::Sm80,
        max_shared_bytes: 163 * 1024,
        mma: MMA_SYNC,
        wgmma: &[],
        features: Features {
            cp_async: true,
            ldmatrix: true,
            tma: false,
            mbarrier: false,
            setmaxnreg: false,
        },
    };
    pub const SM90: Target = Target {
        arch: Arch::Sm90a,
        max_shared_bytes: 227 * 1024,
        mma: MMA_SYNC_SM90,
        wgmma: &[
            MmaShape {
                m: 64,
                n: 256,
                k: 16,
                kinds: &[MmaKind::F16, MmaKind::Bf16],
            },
            MmaShape {
                m: 64,
                n: 256,
                k: 32,
                kinds: &[MmaKind::I8, MmaKind::U8, MmaKind::E4M3, MmaKind::E5M2],
            },
            // `.s32.b1.b1.and.popc`: 256 bits of each operand row per instruction.
            MmaShape {
                m: 64,
                n: 256,
                k: 256,
                kinds: &[MmaKind::B1],
            },
        ],
        features: Features {
            cp_async: true,
            ldmatrix: true,
            tma: true,
            mbarrier: true,
            setmaxnreg: true,
        },
    };

    /// The target by name: `sm80`/`sm_80` (also 86, 89: the sm_80 feature set) or
    /// `sm90`/`sm90a`/`sm_90a`.
    pub fn parse(name: &str) -> Result<Target, String> {
        match name.to_ascii_lowercase().replace('_', "").as_str() {
            "sm90" | "sm90a" => Ok(Target::SM90),
            "sm80" | "sm86" | "sm87" | "sm89" => Ok(Target::SM80),
            _ => Err(format!(
                "unknown target `{name}`; known: sm80 (also sm86, sm89) and sm90 (sm90a)"
            )),
        }
    }

    /// The best target for a device of compute capability `major.minor`, or an error for a
    /// device older than sm_80.
    pub fn for_compute_capability(major: u32, minor: u32) -> Result<Target, String> {
        match (major, minor) {
            (9, _) | (10.., _) => Ok(Target::SM90),
            (8, 0) => Ok(Target::SM80),
            // sm_86/sm_89 have the sm_80 instructions but 99 KiB of shared memory per block.
            (8, _) => Ok(Target {
                max_shared_bytes: 99 * 1024,
                ..Target::SM80
            }),
            _ => Err(format!(
                "compute capability {major}.{minor} is not supported: tilus needs sm_80 or newer"
            )),
        }
    }

    /// Whether code for this target runs on a device of compute capability `major.minor`.
    pub fn runs_on(&self, major: u32, minor: u32) -> bool {
        self.arch.runs_on(major, minor)
    }

    /// Whether `mma.sync` of `m x n x k` serves `kind` on this target.
    pub fn has_mma(&self, m: u32, n: u32, k: u32, kind: MmaKind) -> bool {
        self.mma
            .iter()
            .any(|s| (s.m, s.n, s.k) == (m, n, k) && s.kinds.contains(&kind))
    }
}

impl Default for Target {
    fn default() -> Self {
        Target::SM90
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_devices() {
        assert_eq!(Target::parse("sm_90a").unwrap(), Target::SM90);
        assert_eq!(Target::parse("SM86").unwrap(), Target::SM80);
        assert!(Target::parse("sm70")
            .unwrap_err()
            .contains("unknown target"));
        assert_eq!(Target::for_compute_capability(9, 0).unwrap(), Target::SM90);
        assert_eq!(
            Target::for_compute_capability(8, 6)
                .unwrap()
                .max_shared_bytes,
            99 * 1024
        );
        assert!(Target::for_compute_capability(7, 5).is_err());
        assert!(Target::SM80.runs_on(9, 0) && Target::SM80.runs_on(8, 6));
        assert!(Target::SM90.runs_on(9, 0) && !Target::SM90.runs_on(8, 0));
        assert!(Target::SM80.has_mma(16, 8, 16, MmaKind::U8));
        assert!(!Target::SM80.has_mma(16, 8, 8, MmaKind::F16));
        assert!(Target::SM90.has_mma(16, 8, 256, MmaKind::B1));
        assert!(!Target::SM90.has_mma(16, 8, 16, MmaKind::B1));
        assert!(Target::SM90.has_mma(16, 8, 32, MmaKind::E4M3));
        assert!(!Target::SM80.has_mma(16, 8, 32, MmaKind::E4M3));
        let mixed = MmaKind::Int8K32 {
            a_signed: false,
            b_signed: true,
        };
        assert!(Target::SM80.has_mma(16, 8, 32, mixed) && Target::SM90.has_mma(16, 8, 32, mixed));
        assert!(Target::SM80.wgmma.is_empty() && !Target::SM90.wgmma.is_empty());
    }
}
