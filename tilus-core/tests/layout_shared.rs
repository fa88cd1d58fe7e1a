//! Shared-memory layouts: strides, size, and the XOR swizzle.

use std::collections::HashSet;
use tilus_core::layout::{LayoutError, SharedLayout, Swizzle};

#[test]
fn row_and_column_major_strides() {
    let r = SharedLayout::row_major(&[4, 8]);
    assert_eq!(r.strides, vec![8, 1]);
    assert_eq!(r.offset(&[2, 3]), 19);
    assert_eq!(r.size(), 32);
    let c = SharedLayout::column_major(&[4, 8]);
    assert_eq!(c.strides, vec![1, 4]);
    assert_eq!(c.offset(&[2, 3]), 14);
    assert_eq!(c.size(), 32);
    let r3 = SharedLayout::row_major(&[2, 3, 4]);
    assert_eq!(r3.strides, vec![12, 4, 1]);
    assert_eq!(r3.size(), 24);
    // Padded rows: 8 columns in rows of 10 elements.
    let p = SharedLayout::strided(&[4, 8], &[10, 1]).unwrap();
    assert_eq!(p.offset(&[3, 7]), 37);
    assert_eq!(p.size(), 38);
    assert!(matches!(
        SharedLayout::strided(&[4, 8], &[1]),
        Err(LayoutError::RankMismatch { .. })
    ));
    assert_eq!(SharedLayout::row_major(&[0, 8]).size(), 0);
}

#[test]
fn swizzle_follows_the_cutlass_formula() {
    let s = Swizzle::new(3, 3, 3).unwrap();
    for x in 0..4096usize {
        let want = x ^ (((x >> 6) & 7) << 3);
        assert_eq!(s.apply(x), want);
    }
    assert_eq!(s.block(), 512);
    assert!(Swizzle::new(3, 3, 2).is_err());
    assert!(Swizzle::new(3, 30, 40).is_err());
    assert_eq!(Swizzle::new(0, 4, 0).unwrap().apply(12345), 12345);
}

#[test]
fn swizzle_is_a_bijection_on_each_aligned_block() {
    for bits in 0..=3 {
        for base in 0..=3 {
            for shift in bits..=4 {
                let s = Swizzle::new(bits, base, shift).unwrap();
                let block = s.block();
                for b in 0..3 {
                    let range = b * block..(b + 1) * block;
                    let image: HashSet<usize> = range.clone().map(|x| s.apply(x)).collect();
                    assert_eq!(image, range.clone().collect(), "{s:?} block {b}");
                    // Its own inverse.
                    assert!(range.clone().all(|x| s.apply(s.apply(x)) == x));
                }
            }
        }
    }
}

#[test]
fn swizzled_f16_tile_spreads_row_chunks_over_bank_groups() {
    // 8 rows x 64 f16 columns: each row is 128 bytes, so unswizzled the first 16-byte chunk of
    // every row lands in the same 16-byte bank group (banks 0-3).
    let plain = SharedLayout::row_major(&[8, 64]);
    let group = |offset: usize| offset * 2 / 16 % 8;
    let plain_groups: HashSet<usize> = (0..8).map(|r| group(plain.offset(&[r, 0]))).collect();
    assert_eq!(plain_groups.len(), 1);

    let tile = plain.with_swizzle(Swizzle::new(3, 3, 3).unwrap());
    let groups: HashSet<usize> = (0..8).map(|r| group(tile.offset(&[r, 0]))).collect();
    assert_eq!(groups.len(), 8);
    // Every column chunk of the 8 rows, likewise; and chunks stay contiguous.
    for chunk in 0..8 {
        let groups: HashSet<usize> = (0..8)
            .map(|r| group(tile.offset(&[r, chunk * 8])))
            .collect();
        assert_eq!(groups.len(), 8);
        for r in 0..8 {
            for e in 0..8 {
                assert_eq!(
                    tile.offset(&[r, chunk * 8 + e]),
                    tile.offset(&[r, chunk * 8]) + e
                );
            }
        }
    }
    // Still a permutation of the 512 elements.
    let all: HashSet<usize> = (0..8)
        .flat_map(|r| (0..64).map(move |c| (r, c)))
        .map(|(r, c)| tile.offset(&[r, c]))
        .collect();
    assert_eq!(all, (0..512).collect());
    assert_eq!(tile.size(), 512);
}

#[test]
fn swizzled_size_bounds_every_offset() {
    let s = Swizzle::new(2, 2, 3).unwrap();
    for rows in 1..6 {
        for cols in 1..20 {
            let t = SharedLayout::row_major(&[rows, cols]).with_swizzle(s);
            let max = (0..rows)
                .flat_map(|r| (0..cols).map(move |c| (r, c)))
                .map(|(r, c)| t.offset(&[r, c]))
                .max()
                .unwrap();
            assert!(max < t.size(), "{rows}x{cols}: {max} vs {}", t.size());
        }
    }
}
