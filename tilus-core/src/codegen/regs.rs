//! Register tensors as arrays of 32-bit words.
//!
//! Thread-local storage of a tensor with `L` locals of a `b`-bit type is `ceil(L * b / 32)`
//! words (at least one); local `i` occupies bits `[i*b, (i+1)*b)` of the little-endian word
//! stream, exactly the compact-storage order, so `View` is a copy of words (free after register
//! allocation). All positions here are compile-time constants.

/// Words holding `locals` values of `bits` bits.
pub(crate) fn word_count(bits: u32, locals: usize) -> usize {
    (locals * bits as usize).div_ceil(32).max(1)
}

/// `0x..u` literal.
pub(crate) fn hex(v: u32) -> String {
    if v < 10 {
        format!("{v}u")
    } else {
        format!("0x{v:x}u")
    }
}

fn mask(n: u32) -> u32 {
    if n >= 32 {
        u32::MAX
    } else {
        (1u32 << n) - 1
    }
}

/// C expression (a `uint32_t`, zero-extended) for bits `[pos, pos + n)` of array `arr`, n <= 32.
pub(crate) fn get_bits(arr: &str, pos: usize, n: u32) -> String {
    debug_assert!((1..=32).contains(&n));
    let (w, s) = (pos / 32, (pos % 32) as u32);
    if s + n <= 32 {
        let shifted = if s == 0 {
            format!("{arr}[{w}]")
        } else {
            format!("({arr}[{w}] >> {s})")
        };
        if s + n == 32 {
            shifted
        } else {
            format!("({shifted} & {})", hex(mask(n)))
        }
    } else {
        format!(
            "((({arr}[{w}] >> {s}) | ({arr}[{}] << {})) & {})",
            w + 1,
            32 - s,
            hex(mask(n))
        )
    }
}

/// Collects the bit fields written into a register array and emits one assignment per word
/// (`r[0] = e0 | (e1 << 16);`), so partial writes never read stale words.
pub(crate) struct WordBuilder {
    parts: Vec<Vec<String>>,
}

impl WordBuilder {
    pub(crate) fn new(words: usize) -> WordBuilder {
        WordBuilder {
            parts: vec![Vec::new(); words],
        }
    }

    /// Bits `[pos, pos + n)` get `value`, a `uint32_t` identifier or literal with only its low
    /// `n` bits set (it is repeated when the field straddles two words).
    pub(crate) fn field(&mut self, pos: usize, n: u32, value: &str) {
        let (w, s) = (pos / 32, pos % 32);
        self.parts[w].push(if s == 0 {
            value.to_string()
        } else {
            format!("({value} << {s})")
        });
        if s + n as usize > 32 {
            self.parts[w + 1].push(format!("({value} >> {})", 32 - s));
        }
    }

    /// Word `w` is `value`.
    pub(crate) fn word(&mut self, w: usize, value: &str) {
        self.parts[w].push(value.to_string());
    }

    /// One assignment per word of `arr` (words nothing was written to become 0).
    pub(crate) fn finish(self, arr: &str) -> Vec<String> {
        self.parts
            .into_iter()
            .enumerate()
            .map(|(w, p)| {
                let rhs = if p.is_empty() {
                    "0u".to_string()
                } else {
                    p.join(" | ")
                };
                format!("{arr}[{w}] = {rhs};")
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evaluate the generated expressions in Rust to check the bit arithmetic.
    fn get(arr: &[u32], pos: usize, n: u32) -> u32 {
        let (w, s) = (pos / 32, (pos % 32) as u32);
        let lo = arr[w] >> s;
        let v = if s + n > 32 {
            lo | (arr[w + 1] << (32 - s))
        } else {
            lo
        };
        v & mask(n)
    }

    #[test]
    fn straddling_fields() {
        assert_eq!(get_bits("r", 0, 32), "r[0]");
        assert_eq!(get_bits("r", 16, 16), "(r[0] >> 16)");
        assert_eq!(get_bits("r", 4, 4), "((r[0] >> 4) & 0xfu)");
        assert_eq!(
            get_bits("r", 30, 6),
            "(((r[0] >> 30) | (r[1] << 2)) & 0x3fu)"
        );
        let arr = [0xdead_beefu32, 0x1234_5678];
        assert_eq!(
            get(&arr, 30, 6),
            ((0xdead_beefu32 >> 30) | (0x8 << 2)) & 0x3f
        );
    }

    #[test]
    fn assembles_packed_words() {
        let mut wb = WordBuilder::new(3);
        for i in 0..6 {
            wb.field(i * 6, 6, &format!("c{i}"));
        }
        wb.word(2, "v.x");
        assert_eq!(
            wb.finish("r"),
            vec![
                "r[0] = c0 | (c1 << 6) | (c2 << 12) | (c3 << 18) | (c4 << 24) | (c5 << 30);",
                "r[1] = (c5 >> 2);",
                "r[2] = v.x;",
            ]
        );
    }
}
