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

/// Statements that write `value` (a `uint32_t` expression whose bits above `n` may be set; they
/// are masked off) into bits `[pos, pos + n)` of `arr`, keeping the other bits.
pub(crate) fn set_bits(arr: &str, pos: usize, n: u32, value: &str) -> Vec<String> {
    let (w, s) = (pos / 32, (pos % 32) as u32);
    if s == 0 && n == 32 {
        return vec![format!("{arr}[{w}] = {value};")];
    }
    let lo = n.min(32 - s);
    let mut out = vec![format!(
        "{arr}[{w}] = ({arr}[{w}] & {}) | ((({value}) & {}) << {s});",
        hex(!(mask(lo) << s)),
        hex(mask(lo))
    )];
    if lo < n {
        let hi = n - lo;
        out.push(format!(
            "{arr}[{}] = ({arr}[{}] & {}) | ((({value}) >> {lo}) & {});",
            w + 1,
            w + 1,
            hex(!mask(hi)),
            hex(mask(hi))
        ));
    }
    out
}

/// Statements that fill every word of `arr` (of `words` words) from element codes: `codes[i]` is
/// a `uint32_t` expression with only its low `bits` bits set. Bits past the last element are 0.
pub(crate) fn assemble_words(arr: &str, words: usize, bits: u32, codes: &[String]) -> Vec<String> {
    let b = bits as usize;
    let mut parts: Vec<Vec<String>> = vec![Vec::new(); words];
    for (i, code) in codes.iter().enumerate() {
        let pos = i * b;
        let (w, s) = (pos / 32, pos % 32);
        let c = super::expr::paren(code);
        parts[w].push(if s == 0 {
            c.clone()
        } else {
            format!("({c} << {s})")
        });
        if s + b > 32 {
            parts[w + 1].push(format!("({c} >> {})", 32 - s));
        }
    }
    parts
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
        assert_eq!(set_bits("r", 32, 32, "x"), vec!["r[1] = x;"]);
        let s = set_bits("r", 30, 6, "x");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0], "r[0] = (r[0] & 0x3fffffffu) | (((x) & 3u) << 30);");
        assert_eq!(s[1], "r[1] = (r[1] & 0xfffffff0u) | (((x) >> 2) & 0xfu);");
        let arr = [0xdead_beefu32, 0x1234_5678];
        assert_eq!(
            get(&arr, 30, 6),
            ((0xdead_beefu32 >> 30) | (0x8 << 2)) & 0x3f
        );
    }

    #[test]
    fn assembles_packed_words() {
        let codes: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
        let s = assemble_words("r", 2, 6, &codes);
        assert_eq!(
            s,
            vec![
                "r[0] = c0 | (c1 << 6) | (c2 << 12) | (c3 << 18) | (c4 << 24) | (c5 << 30);",
                "r[1] = (c5 >> 2);",
            ]
        );
    }
}
