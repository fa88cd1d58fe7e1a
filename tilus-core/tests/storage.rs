//! Compact storage: exhaustive round trips, neighbour safety, and agreement with a bit-by-bit
//! reference of the documented stream order.

use proptest::prelude::*;
use rand::Rng;
use tilus_core::storage::{get, pack, packed_len, set, unpack};
use tilus_core::DType;

/// Lengths that are deliberately not multiples of 8 (and a few that are).
const LENGTHS: [usize; 9] = [1, 2, 3, 7, 8, 13, 16, 61, 64];

/// Straight from the contract: value j occupies stream bits [j*b, (j+1)*b); stream bit k is
/// bit k % 8 of byte k / 8.
fn reference_pack(bits: usize, codes: &[u32]) -> Vec<u8> {
    let mut out = vec![0u8; (codes.len() * bits).div_ceil(8)];
    for (j, &code) in codes.iter().enumerate() {
        for i in 0..bits {
            if (code >> i) & 1 == 1 {
                let k = j * bits + i;
                out[k / 8] |= 1 << (k % 8);
            }
        }
    }
    out
}

fn reference_get(bits: usize, bytes: &[u8], j: usize) -> u32 {
    (0..bits)
        .map(|i| {
            let k = j * bits + i;
            (((bytes[k / 8] >> (k % 8)) & 1) as u32) << i
        })
        .sum()
}

/// One type per storage width we support.
fn widths() -> Vec<DType> {
    let mut v: Vec<DType> = (1..=8).map(DType::UInt).collect();
    v.extend([DType::F16, DType::UInt(32)]);
    v
}

fn random_codes(rng: &mut impl Rng, dtype: DType, len: usize) -> Vec<u32> {
    (0..len)
        .map(|_| rng.random::<u32>() & dtype.code_mask())
        .collect()
}

#[test]
fn every_code_round_trips_at_every_alignment_for_sub_byte_types() {
    for d in DType::all_sub_byte() {
        let n = 1u32 << d.bits();
        // Every code at every start position, over lengths that end mid-byte.
        let cycle: Vec<u32> = (0..n).cycle().take(2 * n as usize + 64).collect();
        for len in LENGTHS.iter().copied().chain([n as usize, n as usize + 5]) {
            for start in 0..n as usize {
                let codes = &cycle[start..start + len];
                let bytes = pack(d, codes);
                assert_eq!(bytes.len(), packed_len(d, len), "{d} len {len}");
                assert_eq!(unpack(d, &bytes, len), codes, "{d} len {len} start {start}");
                for (j, &c) in codes.iter().enumerate() {
                    assert_eq!(get(d, &bytes, j), c);
                }
            }
        }
    }
}

#[test]
fn pack_matches_the_bit_by_bit_reference() {
    let mut rng = rand::rng();
    for d in widths() {
        let b = d.bits() as usize;
        for len in LENGTHS.iter().copied().chain([0, 100, 257]) {
            for _ in 0..20 {
                let codes = random_codes(&mut rng, d, len);
                let bytes = pack(d, &codes);
                assert_eq!(bytes, reference_pack(b, &codes), "{d} len {len}");
                // Read back through the reference, and reference bytes through unpack/get.
                for (j, &c) in codes.iter().enumerate() {
                    assert_eq!(reference_get(b, &bytes, j), c);
                    assert_eq!(get(d, &bytes, j), c);
                }
                assert_eq!(unpack(d, &bytes, len), codes);
            }
        }
    }
}

#[test]
fn wide_types_are_little_endian() {
    let mut rng = rand::rng();
    let codes: Vec<u32> = (0..33).map(|_| rng.random()).collect();
    let want: Vec<u8> = codes.iter().flat_map(|c| c.to_le_bytes()).collect();
    assert_eq!(pack(DType::Int(32), &codes), want);
    let halves: Vec<u32> = codes.iter().map(|c| c & 0xffff).collect();
    let want: Vec<u8> = halves
        .iter()
        .flat_map(|&c| (c as u16).to_le_bytes())
        .collect();
    assert_eq!(pack(DType::BF16, &halves), want);
    let bytes: Vec<u32> = codes.iter().map(|c| c & 0xff).collect();
    let want: Vec<u8> = bytes.iter().map(|&c| c as u8).collect();
    assert_eq!(pack(DType::F8E4M3, &bytes), want);
}

#[test]
fn padding_bits_are_zero() {
    for d in DType::all_sub_byte() {
        for len in LENGTHS {
            let codes = vec![d.code_mask(); len];
            let bytes = pack(d, &codes);
            let used = len * d.bits() as usize;
            if !used.is_multiple_of(8) {
                assert_eq!(bytes.last().unwrap() >> (used % 8), 0, "{d} len {len}");
            }
        }
    }
}

#[test]
fn set_leaves_neighbours_untouched() {
    let mut rng = rand::rng();
    for d in widths() {
        for _ in 0..2_000 {
            let len = rng.random_range(1..80);
            // Random bytes, with a few spare bytes past the last value that must not change.
            let mut bytes: Vec<u8> = (0..packed_len(d, len) + 3).map(|_| rng.random()).collect();
            let before = bytes.clone();
            let j = rng.random_range(0..len);
            let code = rng.random::<u32>() & d.code_mask();
            set(d, &mut bytes, j, code);
            assert_eq!(get(d, &bytes, j), code);
            let b = d.bits() as usize;
            // Every bit outside value j's range is unchanged.
            for k in 0..bytes.len() * 8 {
                if k / b != j {
                    let old = (before[k / 8] >> (k % 8)) & 1;
                    let new = (bytes[k / 8] >> (k % 8)) & 1;
                    assert_eq!(old, new, "{d}: set({j}) changed stream bit {k}");
                }
            }
        }
    }
}

#[test]
fn set_builds_the_same_bytes_as_pack() {
    let mut rng = rand::rng();
    for d in widths() {
        for len in LENGTHS {
            let codes = random_codes(&mut rng, d, len);
            let mut bytes = vec![0xa5u8; packed_len(d, len)];
            // Scattered order, so straddling writes happen over both old and new neighbours.
            let mut order: Vec<usize> = (0..len).collect();
            for i in (1..len).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
            for j in order {
                set(d, &mut bytes, j, codes[j]);
            }
            assert_eq!(unpack(d, &bytes, len), codes);
        }
    }
}

#[test]
fn get_and_set_reach_exactly_the_last_whole_value() {
    // 3 bytes = 24 bits hold four u6 values, and three u7 values (21 bits), not four.
    let mut bytes = [0u8; 3];
    set(DType::UInt(6), &mut bytes, 3, 0x3f);
    assert_eq!(bytes, [0, 0, 0xfc]);
    set(DType::UInt(7), &mut bytes, 2, 0);
    assert_eq!(get(DType::UInt(7), &bytes, 2), 0);
    let caught = std::panic::catch_unwind(|| get(DType::UInt(7), &[0u8; 3], 3));
    assert!(caught.is_err());
}

#[test]
fn unpack_ignores_extra_bytes_and_rejects_short_input() {
    let d = DType::Int(3);
    let bytes = pack(d, &[1, 2, 3]);
    let mut longer = bytes.clone();
    longer.extend([0xff, 0xff]);
    assert_eq!(unpack(d, &longer, 3), [1, 2, 3]);
    assert_eq!(unpack(d, &bytes, 0), Vec::<u32>::new());
    let short = std::panic::catch_unwind(|| unpack(d, &bytes, 6));
    assert!(short.is_err(), "6 i3 values need 3 bytes");
}

proptest! {
    #[test]
    fn pack_unpack_round_trip(codes in proptest::collection::vec(any::<u32>(), 0..200),
                              i in 0usize..10) {
        let d = widths()[i];
        let masked: Vec<u32> = codes.iter().map(|c| c & d.code_mask()).collect();
        // Unmasked codes pack as their masked values: high bits never leak into neighbours.
        let bytes = pack(d, &codes);
        prop_assert_eq!(&bytes, &pack(d, &masked));
        prop_assert_eq!(unpack(d, &bytes, codes.len()), masked);
    }
}

/// The checked storage functions name the argument at fault; `packed_len` no longer wraps to a
/// short length in release builds on an overflowing count.
#[test]
fn checked_storage_errors_name_the_argument() {
    use tilus_core::storage::{try_pack, try_packed_len, try_unpack};
    let mut rng = rand::rng();
    let codes: Vec<u32> = (0..37).map(|_| rng.random()).collect();
    let d = DType::UInt(5);
    let bytes = try_pack(d, &codes).unwrap();
    assert_eq!(bytes, pack(d, &codes));
    assert_eq!(
        try_unpack(d, &bytes, codes.len()).unwrap(),
        unpack(d, &bytes, codes.len())
    );
    let e = try_packed_len(d, usize::MAX / 2).unwrap_err().to_string();
    assert!(e.starts_with("argument `len`") && e.contains("u5"), "{e}");
    let e = try_unpack(d, &bytes[..10], codes.len())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("argument `bytes`") && e.contains("need 24 bytes, got 10"),
        "{e}"
    );
    let e = try_pack(DType::Int(1), &codes).unwrap_err().to_string();
    assert!(
        e.starts_with("argument `dtype`") && e.contains("Int(1)"),
        "{e}"
    );
    let e = try_unpack(DType::UInt(0), &bytes, 3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("UInt(0)"), "{e}");
    let overflow = std::panic::catch_unwind(|| packed_len(d, usize::MAX / 2));
    assert!(
        overflow.is_err(),
        "an overflowing length panics, never wraps"
    );
}
