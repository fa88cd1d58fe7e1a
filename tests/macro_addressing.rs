//! Data-dependent addressing through `#[kernel]` on the CPU interpreter: fresh random inputs,
//! poisoned outputs, references computed here.

#[path = "kernels/addressing.rs"]
mod addressing;

use addressing::{
    histogram, moe_route, paged_copy, table_lookup, table_lookup_rows, vq_lookup, vq_rows,
    vq_staged,
};
use rand::Rng;
use tilus::prelude::f16;

#[test]
fn vq_codebook_lookup() {
    let mut rng = rand::rng();
    let n = rng.random_range(1..600usize);
    let entries = rng.random_range(1..300usize);
    let codes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
    let book: Vec<f16> = (0..2 * entries)
        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let mut out = vec![f16::NAN; 2 * n];
    vq_lookup::interpret(
        &vq_lookup::SPACE[0],
        n as i32,
        entries as i32,
        &codes,
        &book,
        &mut out,
    )
    .unwrap();
    for v in 0..n {
        let c = codes[v] as usize;
        for j in 0..2 {
            // Codes past the codebook read zeros (a masked gather).
            let want = if c < entries {
                book[2 * c + j]
            } else {
                f16::ZERO
            };
            assert_eq!(
                out[2 * v + j].to_bits(),
                want.to_bits(),
                "vector {v} (code {c}) lane {j}"
            );
        }
    }
}

#[test]
fn vq_codebook_rows_from_shared_and_global_memory() {
    let mut rng = rand::rng();
    for cfg in vq_rows::SPACE {
        let text = vq_rows::program(cfg).unwrap().to_string();
        assert!(
            text.contains(&format!("gather_rows(book, index, {})", cfg.DIM)),
            "{text}"
        );
        let source = vq_rows::source(cfg).unwrap();
        assert!(source.contains("*(const uint2*)("), "{source}");
        let n = rng.random_range(1..600usize);
        let entries = rng.random_range(1..=256usize);
        let codes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
        let book: Vec<f16> = (0..4 * entries)
            .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let mut staged = vec![f16::NAN; 4 * n];
        let mut direct = vec![f16::NAN; 4 * n];
        vq_rows::interpret(
            cfg,
            n as i32,
            entries as i32,
            &codes,
            &book,
            &mut staged,
            &mut direct,
        )
        .unwrap();
        for v in 0..n {
            let c = codes[v] as usize;
            for j in 0..4 {
                let want = if c < entries {
                    book[4 * c + j]
                } else {
                    f16::ZERO
                };
                for (what, out) in [("staged", &staged), ("direct", &direct)] {
                    assert_eq!(
                        out[4 * v + j].to_bits(),
                        want.to_bits(),
                        "{cfg} {what}: vector {v} (code {c}) lane {j}"
                    );
                }
            }
        }
    }
}

#[test]
fn vq_codebook_copies_staged_with_scatter_rows() {
    let mut rng = rand::rng();
    for cfg in vq_staged::SPACE {
        let text = vq_staged::program(cfg).unwrap().to_string();
        assert!(text.contains("scatter_rows(rows, book, "), "{text}");
        let source = vq_staged::source(cfg).unwrap();
        // One 8-byte store per row and copy (`STS.64`), two entries per thread.
        let stores = source.matches("*(uint2*)(tilus_smem").count();
        assert_eq!(stores, 2 * cfg.REP as usize, "{cfg}: {source}");
        let n = rng.random_range(1..600usize);
        let entries = rng.random_range(1..=256usize);
        let codes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
        let book: Vec<f16> = (0..4 * entries)
            .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let mut out = vec![f16::NAN; 4 * n];
        let mut reversed = vec![f16::NAN; 4 * entries];
        vq_staged::interpret(
            cfg,
            n as i32,
            entries as i32,
            &codes,
            &book,
            &mut out,
            &mut reversed,
        )
        .unwrap();
        for v in 0..n {
            let c = codes[v] as usize;
            for j in 0..4 {
                let want = if c < entries {
                    book[4 * c + j]
                } else {
                    f16::ZERO
                };
                assert_eq!(
                    out[4 * v + j].to_bits(),
                    want.to_bits(),
                    "{cfg}: vector {v} (code {c}) lane {j}"
                );
            }
        }
        for r in 0..entries {
            for j in 0..4 {
                assert_eq!(
                    reversed[4 * r + j].to_bits(),
                    book[4 * (entries - 1 - r) + j].to_bits(),
                    "{cfg}: reversed row {r} lane {j}"
                );
            }
        }
    }
}

#[test]
fn paged_copy_through_a_block_table() {
    let mut rng = rand::rng();
    for cfg in paged_copy::SPACE {
        let page = cfg.PAGE as usize;
        let (rows, npages) = (rng.random_range(1..7usize), rng.random_range(1..7usize));
        let table: Vec<i32> = (0..rows)
            .map(|_| rng.random_range(0..npages as i32))
            .collect();
        let scales: Vec<f32> = (0..rows).map(|_| rng.random_range(-2.0..2.0)).collect();
        let pages: Vec<f32> = (0..npages * page)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut out = vec![f32::NAN; rows * page];
        paged_copy::interpret(
            cfg,
            rows as i32,
            npages as i32,
            &table,
            &scales,
            &pages,
            &mut out,
        )
        .unwrap();
        for r in 0..rows {
            for j in 0..page {
                let want = pages[table[r] as usize * page + j] * scales[r];
                assert_eq!(out[r * page + j], want, "{cfg} row {r} at {j}");
            }
        }
    }
}

#[test]
fn shared_memory_histogram() {
    let mut rng = rand::rng();
    let n = 256 * rng.random_range(1..6usize);
    // Few distinct values: many collisions; some outside the bins.
    let x: Vec<i32> = (0..n).map(|_| rng.random_range(-5..40)).collect();
    let mut hist = vec![-7i32; 256];
    histogram::interpret(&histogram::SPACE[0], n as i32, &x, &mut hist).unwrap();
    let mut want = vec![0i32; 256];
    for &v in &x {
        if (0..256).contains(&v) {
            want[v as usize] += 1;
        }
    }
    assert_eq!(hist, want);
}

#[test]
fn moe_routing_gives_each_token_its_own_slot() {
    let mut rng = rand::rng();
    let experts = rng.random_range(1..9usize);
    // Some tokens go to no expert (index out of range): they are dropped.
    let expert: Vec<i32> = (0..256)
        .map(|_| rng.random_range(-1..experts as i32 + 1))
        .collect();
    let x: Vec<f32> = (0..256).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut counts = vec![0i32; experts];
    let mut routed = vec![f32::NAN; experts * 256];
    moe_route::interpret(
        &moe_route::SPACE[0],
        experts as i32,
        &expert,
        &x,
        &mut counts,
        &mut routed,
    )
    .unwrap();
    for e in 0..experts {
        let mine: Vec<f32> = (0..256)
            .filter(|&t| expert[t] == e as i32)
            .map(|t| x[t])
            .collect();
        assert_eq!(counts[e] as usize, mine.len(), "expert {e}");
        // The interpreter applies atomics in token order, so slots follow token order.
        assert_eq!(
            &routed[e * 256..e * 256 + mine.len()],
            &mine[..],
            "expert {e}"
        );
        assert!(routed[e * 256 + mine.len()..(e + 1) * 256]
            .iter()
            .all(|v| v.is_nan()));
    }
}

/// The `fence` idiom through `#[kernel]`: block `(t, s)` writes `2 x[s, t]` to `ws[s, t]`,
/// counts itself on `counters[t]` between two fences (one thread's atomic: every other thread's
/// index is out of range), and the last of tile `t`'s blocks writes the sum over `s`, in split
/// order, to `out[t]` and resets the counter.
#[tilus::kernel(grid = [tiles, SPLIT], warps = 4, space(SPLIT = [3, 8]))]
pub fn split_sum<const SPLIT: i32>(
    tiles: i32,
    x: Global<f32>,
    ws: GlobalMut<f32>,
    counters: GlobalMut<i32>,
    out: GlobalMut<f32>,
) {
    let [t, s] = block_indices();
    let one = layout!(local(1));
    let gw = view_global(ws, [SPLIT, tiles]);
    let part = load_global(view_global(x, [SPLIT, tiles]), one, [s, t]) * 2.0;
    store_global(part, gw, [s, t]);
    sync();
    fence();
    let lanes = layout!(spatial(128));
    let index = select(arange(lanes, 0, 0) == 0, arange(lanes, 0, t), -1);
    let gc = view_global(counters, [tiles]);
    let old = atomic_add(gc, index, register::<i32>(lanes, 1));
    fence();
    if item(sum(old, 0)) == SPLIT - 1 {
        let mut total = load_global(gw, one, [0, t]);
        for r in 1..SPLIT {
            total = total + load_global(gw, one, [r, t]);
        }
        store_global(total, view_global(out, [tiles]), [t]);
        store_global(register::<i32>(one, 0), gc, [t]);
    }
}

#[test]
fn fence_and_a_counter_let_the_last_block_reduce() {
    let mut rng = rand::rng();
    for cfg in split_sum::SPACE {
        let split = cfg.SPLIT as usize;
        let text = split_sum::program(cfg).unwrap().to_string();
        assert_eq!(text.matches("fence()").count(), 2, "{text}");
        let tiles = rng.random_range(1..40usize);
        let mut counters = vec![0i32; tiles];
        for call in 0..2 {
            let x: Vec<f32> = (0..split * tiles)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let mut ws = vec![f32::NAN; split * tiles];
            let mut out = vec![f32::NAN; tiles];
            split_sum::interpret(cfg, tiles as i32, &x, &mut ws, &mut counters, &mut out).unwrap();
            for t in 0..tiles {
                let mut want = 2.0 * x[t];
                for s in 1..split {
                    want += 2.0 * x[s * tiles + t];
                }
                assert_eq!(
                    out[t].to_bits(),
                    want.to_bits(),
                    "split {split} call {call} tile {t}"
                );
            }
            assert!(counters.iter().all(|&c| c == 0), "{counters:?}");
        }
    }
}

/// `lookup` on the interpreter, both code paths' configurations: every element is the table's
/// `(code, (5 j + 3) % C)`, and a code past a 128-row table reads 0.
#[test]
fn table_lookup_reads_rows_by_code_and_wraps_columns() {
    let mut rng = rand::rng();
    for cfg in table_lookup::SPACE {
        let (c, rows) = (cfg.C as usize, cfg.ROWS as usize);
        let n = rng.random_range(1..300usize);
        let codes: Vec<u8> = (0..8 * n).map(|_| rng.random()).collect();
        let table: Vec<f32> = (0..rows * c).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut out = vec![f32::NAN; 8 * n];
        table_lookup::interpret(cfg, n as i32, &codes, &table, &mut out).unwrap();
        for (e, (&code, &got)) in codes.iter().zip(&out).enumerate() {
            let (row, col) = (code as usize, (5 * (e % 8) + 3) % c);
            let want = if row < rows {
                table[row * c + col]
            } else {
                0.0
            };
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{cfg:?} element {e} (code {code})"
            );
        }
    }
}

/// The CUDA of `lookup`: one `__byte_perm` per element for 256-byte rows read by u8 rows, a
/// guarded read otherwise.
#[test]
fn table_lookup_takes_the_byte_permute_path_for_256_byte_rows() {
    for cfg in table_lookup::SPACE {
        let cuda = table_lookup::source(cfg).expect("every configuration is embedded");
        let perms = cuda.matches("__byte_perm(").count();
        if cfg.C == 64 && cfg.ROWS == 256 {
            assert_eq!(perms, 8, "{cfg:?}: one per code");
        } else {
            assert_eq!(perms, 0, "{cfg:?}");
        }
    }
}

/// `lookup` on a rank-3 table on the interpreter, both code paths' configurations: every code's
/// four halves are the table's vector `(code, (5 j + 3) % C)`, and a code past a 128-row table
/// reads zeros.
#[test]
fn table_lookup_rows_reads_vectors_by_code() {
    let mut rng = rand::rng();
    for cfg in table_lookup_rows::SPACE {
        let (c, rows) = (cfg.C as usize, cfg.ROWS as usize);
        let n = rng.random_range(1..300usize);
        let codes: Vec<u8> = (0..8 * n).map(|_| rng.random()).collect();
        let table: Vec<f16> = (0..rows * c * 4)
            .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let mut out = vec![f16::NAN; 32 * n];
        table_lookup_rows::interpret(cfg, n as i32, &codes, &table, &mut out).unwrap();
        addressing::check_table_lookup_rows(&format!("{cfg:?}"), &out, &codes, &table, rows, c);
    }
}

/// The CUDA of a rank-3 `lookup`: one `__byte_perm` and one 8-byte load per code for 256-byte
/// rows read by u8 rows; guarded 8-byte loads otherwise.
#[test]
fn table_lookup_rows_takes_the_byte_permute_path_for_256_byte_rows() {
    for cfg in table_lookup_rows::SPACE {
        let cuda = table_lookup_rows::source(cfg).expect("every configuration is embedded");
        let perms = cuda.matches("__byte_perm(").count();
        // The look-ups' reads (`lk` values), apart from the staging copy's.
        let loads = cuda
            .lines()
            .filter(|l| l.contains(" lk") && l.contains("*(const uint2*)"))
            .count();
        assert_eq!(loads, 8, "{cfg:?}: one 8-byte load per code\n{cuda}");
        if cfg.C == 32 && cfg.ROWS == 256 {
            assert_eq!(perms, 8, "{cfg:?}: one per code");
        } else {
            assert_eq!(perms, 0, "{cfg:?}");
        }
    }
}

/// `gather_rows` from a register table (warp shuffles): both placements, 1, 3 and 4 rows a
/// lane, rows of one and two words, codes inside and outside the table (negative too).
#[test]
fn rows_from_a_register_table() {
    let mut rng = rand::rng();
    for cfg in addressing::warp_rows::SPACE {
        let (rows, w) = (32 * cfg.SLOTS as usize, cfg.W as usize);
        let n = rng.random_range(1..300usize);
        let codes: Vec<i32> = (0..2 * n)
            .map(|_| rng.random_range(-40..rows as i32 + 40))
            .collect();
        let table: Vec<f16> = (0..rows * w)
            .map(|_| f16::from_f32(rng.random_range(-4.0..4.0)))
            .collect();
        let mut out = vec![f16::NAN; 2 * n * w];
        addressing::warp_rows::interpret(cfg, n as i32, &codes, &table, &mut out).unwrap();
        addressing::check_warp_rows(&format!("{cfg:?}"), &out, &codes, &table, rows, w);
    }
}
