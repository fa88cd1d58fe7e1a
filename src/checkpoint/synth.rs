//! Synthetic checkpoints for benchmarks and tests: a GPTQ layer of any shape with
//! pseudo-random words (every bit pattern is a valid code), built in memory.

use super::TensorDtype;
use safetensors::tensor::TensorView;

/// xorshift64*: fast and dependency-free; the values only need to look random.
fn fill_words(out: &mut [u8], mut seed: u64) {
    seed |= 1;
    for chunk in out.chunks_mut(8) {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        let v = seed.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// The bytes of a safetensors file holding one GPTQ v1 layer `prefix` (`qweight`, `qzeros`,
/// `scales` in f16 between 2^-10 and 2^-6, no `g_idx`) for a `[k, n]` weight of `bits` bits
/// and `group` rows per group. Panics on shapes the format cannot hold (`k * bits`, `n * bits`
/// not multiples of 32, `group` not dividing `k`): this is a test and benchmark helper.
pub fn gptq_file(
    prefix: &str,
    k: usize,
    n: usize,
    bits: usize,
    group: usize,
    seed: u64,
) -> Vec<u8> {
    gptq_file_with(prefix, k, n, bits, group, seed, false)
}

/// [`gptq_file`], with an act-order `g_idx` (the groups of a pseudo-random permutation) when
/// `act_order`.
pub fn gptq_file_with(
    prefix: &str,
    k: usize,
    n: usize,
    bits: usize,
    group: usize,
    seed: u64,
    act_order: bool,
) -> Vec<u8> {
    assert!(
        (k * bits).is_multiple_of(32) && (n * bits).is_multiple_of(32) && k.is_multiple_of(group)
    );
    let groups = k / group;
    let mut qweight = vec![0u8; k * bits / 32 * n * 4];
    crate::parallel::for_each_chunk_mut(&mut qweight, 1 << 20, |i, c| {
        fill_words(c, seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    });
    let mut qzeros = vec![0u8; groups * n * bits / 32 * 4];
    fill_words(&mut qzeros, seed.wrapping_add(1));
    let mut scales = vec![0u8; groups * n * 2];
    fill_words(&mut scales, seed.wrapping_add(2));
    for s in scales.chunks_exact_mut(2) {
        // A positive f16 with exponent 5..8 (2^-10 .. 2^-6) and a random mantissa.
        let mant = u16::from_le_bytes([s[0], s[1]]) & 0x3ff;
        let exp = 5 + (s[1] >> 2) as u16 % 4;
        s.copy_from_slice(&((exp << 10) | mant).to_le_bytes());
    }
    let g_idx: Vec<u8> = if act_order {
        // g_idx[perm[i]] = i / group for a shuffled perm: every group keeps `group` rows.
        let mut perm: Vec<usize> = (0..k).collect();
        let mut s = seed | 1;
        for i in (1..k).rev() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            perm.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let mut g = vec![0i32; k];
        for (i, &p) in perm.iter().enumerate() {
            g[p] = (i / group) as i32;
        }
        g.iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        Vec::new()
    };
    let mut views = vec![
        (
            format!("{prefix}.qweight"),
            TensorView::new(TensorDtype::I32, vec![k * bits / 32, n], &qweight),
        ),
        (
            format!("{prefix}.qzeros"),
            TensorView::new(TensorDtype::I32, vec![groups, n * bits / 32], &qzeros),
        ),
        (
            format!("{prefix}.scales"),
            TensorView::new(TensorDtype::F16, vec![groups, n], &scales),
        ),
    ];
    if act_order {
        views.push((
            format!("{prefix}.g_idx"),
            TensorView::new(TensorDtype::I32, vec![k], &g_idx),
        ));
    }
    let views: Vec<(String, TensorView<'_>)> = views
        .into_iter()
        .map(|(name, v)| (name, v.expect("sizes match the shapes")))
        .collect();
    safetensors::serialize(views, None).expect("a small header")
}
