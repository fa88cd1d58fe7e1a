//! Data-dependent addressing on the interpreter against Rust references on fresh random data
//! (outputs poisoned), the verifier's rejections, and the generated code's shape.

#[allow(dead_code)]
#[path = "programs/addressing.rs"]
mod programs;

use programs::*;
use rand::seq::SliceRandom;
use rand::Rng;
use tilus_core::codegen::{emit, Assumption};
use tilus_core::interp::{run, Arg};
use tilus_core::ir::{AtomicOp, Expr, Program, ProgramBuilder, SpanId};
use tilus_core::layout::{parse, Layout, SharedLayout};
use tilus_core::verify::{verify, Target};
use tilus_core::{storage, DType};

const POISON: u8 = 0xA5;

fn buf(arg: &Arg) -> &[u8] {
    match arg {
        Arg::Buffer(b) => b,
        _ => panic!("not a buffer"),
    }
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Random codes of `dtype` (any bit pattern that is not NaN), never all zero.
fn random_codes(dtype: DType, len: usize) -> Vec<u32> {
    let mut rng = rand::rng();
    loop {
        let codes: Vec<u32> = (0..len)
            .map(|_| loop {
                let c = rng.random::<u32>() & dtype.code_mask();
                if !dtype.decode(c).is_nan() {
                    break c;
                }
            })
            .collect();
        if codes.iter().any(|&c| c != 0) {
            return codes;
        }
    }
}

#[test]
fn gather_reads_random_indices_and_masks_out_of_range_ones() {
    let mut rng = rand::rng();
    for dtype in [DType::F16, DType::UInt(8), DType::Int(32), DType::BF16] {
        for shared in [false, true] {
            let n = if shared {
                (SH_ROWS * SH_COLS) as i32
            } else {
                rng.random_range(1..700)
            };
            let m = rng.random_range(1..3 * TILE);
            let table = random_codes(dtype, n as usize);
            let mut idx: Vec<i32> = (0..m)
                .map(|_| rng.random_range(-n / 4 - 2..n + n / 4 + 2))
                .collect();
            // At least one index on each side of the table (small `m` may draw none).
            idx[0] = -1;
            let last = idx.len() - 1;
            idx[last] = n;
            let mut args = vec![
                Arg::I32(n),
                Arg::I32(m),
                Arg::Buffer(storage::pack(dtype, &table)),
                Arg::Buffer(i32_bytes(&idx)),
                Arg::Buffer(vec![POISON; storage::packed_len(dtype, m as usize)]),
            ];
            run(&gather_program(dtype, shared), &mut args)
                .unwrap_or_else(|e| panic!("{dtype} shared={shared}: {e}"));
            let got = storage::unpack(dtype, buf(&args[4]), m as usize);
            for (k, &i) in idx.iter().enumerate() {
                let want = if (0..n).contains(&i) {
                    table[i as usize]
                } else {
                    0
                };
                assert_eq!(
                    got[k], want,
                    "{dtype} shared={shared} n={n} m={m} at {k} (index {i})"
                );
            }
        }
    }
}

#[test]
fn gather_rows_reads_whole_rows_in_every_layout() {
    let mut rng = rand::rng();
    let mut runs = 0;
    for dtype in [DType::F16, DType::UInt(8), DType::Int(32)] {
        for w in [1usize, 2, 4, 8] {
            for &(layout, dims) in ROW_INDEX_LAYOUTS {
                let tile = parse(layout).unwrap().shape().to_vec();
                let mut shape = tile.clone();
                shape[0] *= ROW_BLOCKS;
                let n: usize = shape.iter().product();
                for &dim in dims {
                    for src in RowSrc::ALL {
                        let rows = match src {
                            RowSrc::Global => rng.random_range(1..300usize),
                            _ => SH_TABLE_ROWS,
                        };
                        let table = random_codes(dtype, rows * w);
                        let mut idx: Vec<i32> = (0..n)
                            .map(|_| rng.random_range(-3..rows as i32 + 3))
                            .collect();
                        // Both sides of the table, wherever they fall.
                        let (a, b) = (rng.random_range(0..n / 2), rng.random_range(n / 2..n));
                        idx[a] = -1;
                        idx[b] = rows as i32;
                        let out_len = n * w;
                        let mut args = vec![
                            Arg::I32(rows as i32),
                            Arg::Buffer(storage::pack(dtype, &table)),
                            Arg::Buffer(i32_bytes(&idx)),
                            Arg::Buffer(vec![POISON; storage::packed_len(dtype, out_len)]),
                        ];
                        let case = format!("{dtype} w={w} {layout} dim={dim} {src:?} rows={rows}");
                        let p = gather_rows_program(dtype, w, layout, dim, src);
                        run(&p, &mut args).unwrap_or_else(|e| panic!("{case}: {e}"));
                        let got = storage::unpack(dtype, buf(&args[3]), out_len);
                        let want = gather_rows_reference(&table, w, &idx, &shape, dim);
                        if let Some(k) = (0..out_len).find(|&k| got[k] != want[k]) {
                            panic!(
                                "{case}: element {k}: got {:#x}, want {:#x}",
                                got[k], want[k]
                            );
                        }
                        // Something was read: the reference is not all zeros.
                        assert!(want.iter().any(|&c| c != 0), "{case}");
                        runs += 1;
                    }
                }
            }
        }
    }
    assert_eq!(runs, 3 * 4 * 12 * RowSrc::ALL.len());
}

/// The reference itself on a hand-computed case: `dim` 1 of a `[2, 2]` index, rows of 2.
#[test]
fn gather_rows_reference_lays_rows_along_dim() {
    let table = [10, 11, 20, 21, 30, 31];
    let got = gather_rows_reference(&table, 2, &[2, 0, -1, 1], &[2, 2], 1);
    assert_eq!(got, vec![30, 31, 10, 11, 0, 0, 20, 21]);
    let got = gather_rows_reference(&table, 2, &[2, 0, 3, 1], &[2, 2], 0);
    assert_eq!(got, vec![30, 10, 31, 11, 0, 20, 0, 21]);
}

/// Distinct indices for `n` index elements: a shuffled range `-8..rows + 8`, with `-1` and
/// `rows` (out of range) among them.
fn distinct_rows(n: usize, rows: usize) -> Vec<i32> {
    let mut rng = rand::rng();
    let rows = rows as i32;
    let mut idx: Vec<i32> = (-8..rows + 8).filter(|&r| r != -1 && r != rows).collect();
    assert!(idx.len() + 2 >= n, "{n} indices from {rows} rows");
    idx.shuffle(&mut rng);
    idx.truncate(n - 2);
    idx.extend([-1, rows]);
    idx.shuffle(&mut rng);
    idx
}

/// Run `p` (a [`scatter_rows_program`] of `dtype`, rows of `w`) with table `table` (its rows),
/// value `x` and index `idx`; returns the table after it.
fn run_scatter_rows(
    p: &Program,
    dtype: DType,
    w: usize,
    table: &[u32],
    x: &[u32],
    idx: &[i32],
) -> Result<Vec<u32>, String> {
    let rows = table.len() / w;
    let mut args = vec![
        Arg::I32(rows as i32),
        Arg::Buffer(storage::pack(dtype, x)),
        Arg::Buffer(i32_bytes(idx)),
        Arg::Buffer(storage::pack(dtype, table)),
    ];
    run(p, &mut args).map_err(|e| e.message)?;
    Ok(storage::unpack(dtype, buf(&args[3]), table.len()))
}

/// Random old rows and random new ones (so a row left alone or written twice, or a column out
/// of place, shows), distinct indices with some out of range, in every index layout (the
/// replicated ones write each row once) and table placement, against the Rust reference.
#[test]
fn scatter_rows_writes_whole_rows_once_in_every_layout() {
    let mut rng = rand::rng();
    let mut runs = 0;
    for dtype in [DType::F16, DType::UInt(8), DType::Int(32)] {
        for w in [1usize, 2, 4, 8] {
            for &(layout, dims) in ROW_INDEX_LAYOUTS {
                let tile = parse(layout).unwrap().shape().to_vec();
                let mut shape = tile.clone();
                shape[0] *= ROW_BLOCKS;
                let n: usize = shape.iter().product();
                for &dim in dims {
                    for dst in RowSrc::ALL {
                        let rows = match dst {
                            RowSrc::Global => rng.random_range(n - 8..2 * n),
                            _ => ROW_BLOCKS * SC_TABLE_ROWS,
                        };
                        let table = random_codes(dtype, rows * w);
                        let x = random_codes(dtype, n * w);
                        let idx = distinct_rows(n, rows);
                        let case = format!("{dtype} w={w} {layout} dim={dim} {dst:?} rows={rows}");
                        let p = scatter_rows_program(dtype, w, layout, dim, dst);
                        let got = run_scatter_rows(&p, dtype, w, &table, &x, &idx)
                            .unwrap_or_else(|e| panic!("{case}: {e}"));
                        let want = scatter_rows_reference(&table, w, &x, &idx, &shape, dim, dst);
                        if let Some(k) = (0..table.len()).find(|&k| got[k] != want[k]) {
                            panic!(
                                "{case}: element {k} (row {}): got {:#x}, want {:#x} (was {:#x})",
                                k / w,
                                got[k],
                                want[k],
                                table[k]
                            );
                        }
                        // Rows were written, and rows were left alone.
                        let changed = (0..rows)
                            .filter(|&r| want[r * w..(r + 1) * w] != table[r * w..(r + 1) * w])
                            .count();
                        assert!(changed > 0 && changed < rows, "{case}: {changed} rows");
                        runs += 1;
                    }
                }
            }
        }
    }
    assert_eq!(runs, 3 * 4 * 12 * RowSrc::ALL.len());
}

/// The reference itself on a hand-computed case: `dim` 1 of a `[2, 2]` index per block (two
/// blocks stacked: `[4, 2]`), rows of 2, into a global table of 6 rows.
#[test]
fn scatter_rows_reference_takes_rows_along_dim() {
    let table: Vec<u32> = (0..12).collect();
    // x is [4, 4]: index element (i, j) has row x[i, 2j..2j + 2].
    let x: Vec<u32> = (100..116).collect();
    let idx = [5, -1, 0, 6, 2, 1, 3, 7];
    let got = scatter_rows_reference(&table, 2, &x, &idx, &[4, 2], 1, RowSrc::Global);
    let want = vec![104, 105, 110, 111, 108, 109, 112, 113, 8, 9, 100, 101];
    assert_eq!(got, want);
    // dim 0: x is [8, 2], index element (i, j) has rows x[2i..2i + 2, j].
    let got = scatter_rows_reference(&table, 2, &x, &idx, &[4, 2], 0, RowSrc::Global);
    let want = vec![104, 106, 109, 111, 108, 110, 112, 114, 8, 9, 100, 102];
    assert_eq!(got, want);
}

#[test]
fn scatter_rows_collisions_are_reported() {
    let layout = "spatial(32, 4).local(2, 1)";
    for dst in [RowSrc::Global, RowSrc::Shared] {
        let n = 2 * 256;
        let rows = ROW_BLOCKS * SC_TABLE_ROWS;
        let table = random_codes(DType::F16, rows * 4);
        let x = random_codes(DType::F16, n * 4);
        // Block `b` names rows `512 * b ..` (its own rows of the shared table).
        let mut idx: Vec<i32> = (0..n as i32).map(|k| k + k / 256 * 256).collect();
        // Index elements [2, 1] and [5, 1] of block 1's `[64, 4]` tile both name row 600 (and
        // so does [22, 0], after them).
        idx[256 + 2 * 4 + 1] = 600;
        idx[256 + 5 * 4 + 1] = 600;
        let p = scatter_rows_program(DType::F16, 4, layout, 0, dst);
        let Err(e) = run_scatter_rows(&p, DType::F16, 4, &table, &x, &idx) else {
            panic!("{dst:?}: no collision reported");
        };
        // Shared: the block's own row 600 - 512.
        let (row, index, table) = match dst {
            RowSrc::Global => (600, "ix", "go"),
            _ => (88, "local", "st"),
        };
        let want = format!(
            "elements [2, 1] and [5, 1] of the index `{index}` both scatter row {row} of `{table}` (from `v`); the GPU would keep either row"
        );
        assert!(e.contains(&want), "{dst:?}: {e}");
    }
}

#[test]
fn scatter_rows_into_shared_without_a_barrier_is_a_race() {
    let mut p = scatter_rows_program(
        DType::F16,
        4,
        "spatial(32, 4).local(2, 1)",
        0,
        RowSrc::Shared,
    );
    // Drop the barrier between the scatter and the copy back.
    let syncs: Vec<usize> = p
        .body
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            matches!(
                s.kind,
                tilus_core::ir::StmtKind::Instr(tilus_core::ir::Instruction::Synchronize)
            )
        })
        .map(|(k, _)| k)
        .collect();
    assert_eq!(syncs.len(), 2);
    let rows = ROW_BLOCKS * SC_TABLE_ROWS;
    let idx: Vec<i32> = (0..512).map(|i| (i * 7 + 3) % rows as i32).collect();
    let table = random_codes(DType::F16, rows * 4);
    let x = random_codes(DType::F16, 512 * 4);
    // With the barrier it runs.
    run_scatter_rows(&p, DType::F16, 4, &table, &x, &idx).unwrap();
    p.body.remove(syncs[1]);
    let Err(e) = run_scatter_rows(&p, DType::F16, 4, &table, &x, &idx) else {
        panic!("no race reported");
    };
    assert!(e.contains("race on shared tensor `st`"), "{e}");
}

/// The VQ kernels' codebook staging (16 copies of each entry, pass `c` writing copy
/// `(e + c) % 16`): every row of the result is its entry's row.
#[test]
fn scatter_rows_stages_codebook_copies() {
    for (dtype, w, copies) in [
        (DType::F16, 4, 16),
        (DType::F16, 8, 16),
        (DType::UInt(8), 4, 3),
    ] {
        let book = random_codes(dtype, BOOK_ENTRIES * w);
        let len = BOOK_ENTRIES * copies * w;
        let mut args = vec![
            Arg::Buffer(storage::pack(dtype, &book)),
            Arg::Buffer(vec![POISON; storage::packed_len(dtype, len)]),
        ];
        run(&book_copies_program(dtype, w, copies), &mut args)
            .unwrap_or_else(|e| panic!("{dtype} w={w} copies={copies}: {e}"));
        let got = storage::unpack(dtype, buf(&args[1]), len);
        for (k, &g) in got.iter().enumerate() {
            let (row, c) = (k / w, k % w);
            let want = book[row / copies * w + c];
            assert_eq!(
                g, want,
                "{dtype} w={w} copies={copies}: row {row} column {c}"
            );
        }
    }
}

#[test]
fn scatter_of_a_permutation_writes_each_element_once() {
    let mut rng = rand::rng();
    for dtype in [DType::F16, DType::UInt(8), DType::F32] {
        for (shared, replicated) in [(false, false), (false, true), (true, false), (true, true)] {
            let m = if shared {
                TILE
            } else {
                TILE * rng.random_range(1..4)
            };
            let n = if shared {
                TILE
            } else {
                m + rng.random_range(0..50)
            };
            // Distinct targets; without shared memory some lie outside `out` and are skipped.
            let extra = if shared { 0 } else { 20 };
            let mut perm: Vec<i32> = (-extra..n + extra).collect();
            perm.shuffle(&mut rng);
            let idx: Vec<i32> = perm[..m as usize].to_vec();
            let x = random_codes(dtype, m as usize);
            let mut args = vec![
                Arg::I32(n),
                Arg::I32(m),
                Arg::Buffer(storage::pack(dtype, &x)),
                Arg::Buffer(i32_bytes(&idx)),
                Arg::Buffer(vec![POISON; storage::packed_len(dtype, n as usize)]),
            ];
            run(&scatter_program(dtype, shared, replicated), &mut args)
                .unwrap_or_else(|e| panic!("{dtype} shared={shared}: {e}"));
            let got = storage::unpack(dtype, buf(&args[4]), n as usize);
            let poison = storage::unpack(dtype, &[POISON; 4], 1)[0];
            let mut want = vec![poison; n as usize];
            for (k, &i) in idx.iter().enumerate() {
                if (0..n).contains(&i) {
                    want[i as usize] = x[k];
                }
            }
            assert_eq!(got, want, "{dtype} shared={shared} replicated={replicated}");
        }
    }
}

#[test]
fn scatter_collisions_are_reported() {
    let (n, m) = (TILE, TILE);
    let mut idx: Vec<i32> = (0..m).collect();
    idx[200] = 17;
    let mut args = vec![
        Arg::I32(n),
        Arg::I32(m),
        Arg::Buffer(f32_bytes(&vec![1.5; m as usize])),
        Arg::Buffer(i32_bytes(&idx)),
        Arg::Buffer(vec![POISON; 4 * n as usize]),
    ];
    let e = run(&scatter_program(DType::F32, false, false), &mut args).unwrap_err();
    assert!(
        e.message
            .contains("elements [17] and [200] of `v` both scatter to index 17 of `go`"),
        "{}",
        e.message
    );
}

/// Run `atomic_program` on `idx`, `val` (and `cmp`) from `dst`; returns (dst, old).
#[allow(clippy::too_many_arguments)]
fn run_atomic(
    op: AtomicOp,
    dtype: DType,
    shared: bool,
    with_old: bool,
    idx: &[i32],
    val: &[u8],
    cmp: Option<&[u8]>,
    dst: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    let m = idx.len();
    let mut args = vec![
        Arg::I32((dst.len() / 4) as i32),
        Arg::I32(m as i32),
        Arg::Buffer(i32_bytes(idx)),
        Arg::Buffer(val.to_vec()),
    ];
    if let Some(c) = cmp {
        args.push(Arg::Buffer(c.to_vec()));
    }
    args.push(Arg::Buffer(dst.to_vec()));
    if with_old {
        args.push(Arg::Buffer(vec![POISON; 4 * m]));
    }
    run(&atomic_program(op, dtype, shared, with_old), &mut args)
        .unwrap_or_else(|e| panic!("{op:?} {dtype} shared={shared}: {e}"));
    let d = if cmp.is_some() { 5 } else { 4 };
    let old = if with_old {
        buf(&args[d + 1]).to_vec()
    } else {
        Vec::new()
    };
    (buf(&args[d]).to_vec(), old)
}

#[test]
fn atomic_add_builds_histograms_with_many_collisions() {
    let mut rng = rand::rng();
    for shared in [false, true] {
        let bins = if shared {
            TILE
        } else {
            rng.random_range(5..40)
        };
        let m = TILE as usize * rng.random_range(1..4);
        let idx: Vec<i32> = (0..m).map(|_| rng.random_range(-3..bins + 3)).collect();
        // i32: exact.
        let val: Vec<i32> = (0..m).map(|_| rng.random_range(-1000..1000)).collect();
        let init: Vec<i32> = (0..bins).map(|_| rng.random_range(-1000..1000)).collect();
        let (dst, _) = run_atomic(
            AtomicOp::Add,
            DType::Int(32),
            shared,
            false,
            &idx,
            &i32_bytes(&val),
            None,
            &i32_bytes(&init),
        );
        let mut want = init.clone();
        for (k, &i) in idx.iter().enumerate() {
            if (0..bins).contains(&i) {
                want[i as usize] += val[k];
            }
        }
        assert_eq!(i32s(&dst), want, "i32 shared={shared}");
        // f32: the interpreter adds in element order, rounding each step; against an f64
        // reference within a tolerance (the GPU's order is unspecified).
        let val: Vec<f32> = (0..m).map(|_| rng.random_range(-1.0..1.0)).collect();
        let init: Vec<f32> = (0..bins).map(|_| rng.random_range(-1.0..1.0)).collect();
        let (dst, _) = run_atomic(
            AtomicOp::Add,
            DType::F32,
            shared,
            false,
            &idx,
            &f32_bytes(&val),
            None,
            &f32_bytes(&init),
        );
        let got = f32s(&dst);
        let mut seq = init.clone();
        let mut exact: Vec<f64> = init.iter().map(|&x| x as f64).collect();
        for (k, &i) in idx.iter().enumerate() {
            if (0..bins).contains(&i) {
                seq[i as usize] += val[k];
                exact[i as usize] += val[k] as f64;
            }
        }
        assert_eq!(
            got, seq,
            "f32 shared={shared}: element order, rounded per step"
        );
        for (b, (&g, &e)) in got.iter().zip(&exact).enumerate() {
            assert!((g as f64 - e).abs() < 1e-4, "bin {b}: {g} vs {e}");
        }
    }
}

#[test]
fn atomic_max_and_min_of_i32_and_f32() {
    let mut rng = rand::rng();
    for shared in [false, true] {
        for op in [AtomicOp::Max, AtomicOp::Min] {
            let bins = if shared {
                TILE
            } else {
                rng.random_range(5..40)
            };
            let m = TILE as usize * rng.random_range(1..3);
            let idx: Vec<i32> = (0..m).map(|_| rng.random_range(-3..bins + 3)).collect();
            let pick = |a: f64, b: f64| {
                if op == AtomicOp::Max {
                    a.max(b)
                } else {
                    a.min(b)
                }
            };
            // i32
            let val: Vec<i32> = (0..m).map(|_| rng.random()).collect();
            let init: Vec<i32> = (0..bins).map(|_| rng.random()).collect();
            let (dst, _) = run_atomic(
                op,
                DType::Int(32),
                shared,
                false,
                &idx,
                &i32_bytes(&val),
                None,
                &i32_bytes(&init),
            );
            let mut want = init.clone();
            for (k, &i) in idx.iter().enumerate() {
                if (0..bins).contains(&i) {
                    want[i as usize] = pick(want[i as usize] as f64, val[k] as f64) as i32;
                }
            }
            assert_eq!(i32s(&dst), want, "{op:?} i32 shared={shared}");
            // f32, both signs
            let val: Vec<f32> = (0..m).map(|_| rng.random_range(-100.0..100.0)).collect();
            let init: Vec<f32> = (0..bins).map(|_| rng.random_range(-100.0..100.0)).collect();
            let (dst, _) = run_atomic(
                op,
                DType::F32,
                shared,
                false,
                &idx,
                &f32_bytes(&val),
                None,
                &f32_bytes(&init),
            );
            let mut want = init.clone();
            for (k, &i) in idx.iter().enumerate() {
                if (0..bins).contains(&i) {
                    want[i as usize] = pick(want[i as usize] as f64, val[k] as f64) as f32;
                }
            }
            assert_eq!(f32s(&dst), want, "{op:?} f32 shared={shared}");
        }
    }
}

#[test]
fn atomic_exchange_and_compare_and_swap_return_old_values() {
    let mut rng = rand::rng();
    for shared in [false, true] {
        let bins = TILE * 2 - if shared { TILE } else { 0 };
        let m = TILE as usize;
        let mut perm: Vec<i32> = (-10..bins + 10).collect();
        perm.shuffle(&mut rng);
        let idx = perm[..m].to_vec();
        let init: Vec<i32> = (0..bins).map(|_| rng.random_range(0..4)).collect();
        let val: Vec<i32> = (0..m).map(|_| rng.random_range(-1000..1000)).collect();
        // Exchange.
        let (dst, old) = run_atomic(
            AtomicOp::Exchange,
            DType::Int(32),
            shared,
            true,
            &idx,
            &i32_bytes(&val),
            None,
            &i32_bytes(&init),
        );
        let (mut want, mut want_old) = (init.clone(), vec![0; m]);
        for (k, &i) in idx.iter().enumerate() {
            if (0..bins).contains(&i) {
                want_old[k] = want[i as usize];
                want[i as usize] = val[k];
            }
        }
        assert_eq!(i32s(&dst), want, "exch shared={shared}");
        assert_eq!(i32s(&old), want_old, "exch old shared={shared}");
        // Compare-and-swap (f32, bitwise): about half the compares match.
        let initf: Vec<f32> = init.iter().map(|&x| x as f32 * 0.5).collect();
        let valf: Vec<f32> = val.iter().map(|&x| x as f32 * 0.25).collect();
        let cmp: Vec<f32> = (0..m)
            .map(|_| rng.random_range(0..4) as f32 * 0.5)
            .collect();
        let (dst, old) = run_atomic(
            AtomicOp::Cas,
            DType::F32,
            shared,
            true,
            &idx,
            &f32_bytes(&valf),
            Some(&f32_bytes(&cmp)),
            &f32_bytes(&initf),
        );
        let (mut want, mut want_old) = (initf.clone(), vec![0f32; m]);
        let mut swapped = 0;
        for (k, &i) in idx.iter().enumerate() {
            if (0..bins).contains(&i) {
                let o = want[i as usize];
                want_old[k] = o;
                if o.to_bits() == cmp[k].to_bits() {
                    want[i as usize] = valf[k];
                    swapped += 1;
                }
            }
        }
        assert!(
            swapped > 0 && swapped < m,
            "the test should swap some and keep some"
        );
        assert_eq!(f32s(&dst), want, "cas shared={shared}");
        assert_eq!(f32s(&old), want_old, "cas old shared={shared}");
    }
}

#[test]
fn item_gives_uniform_scalars_for_addressing_and_arithmetic() {
    let mut rng = rand::rng();
    let (blocks, npages) = (rng.random_range(1..9), rng.random_range(1..9));
    let table: Vec<i32> = (0..blocks).map(|_| rng.random_range(0..npages)).collect();
    let scales: Vec<f32> = (0..blocks).map(|_| rng.random_range(-2.0..2.0)).collect();
    let scale_codes: Vec<u32> = scales
        .iter()
        .map(|&s| DType::F16.encode(s).unwrap())
        .collect();
    let pages: Vec<f32> = (0..npages * PAGE)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let mut args = vec![
        Arg::I32(blocks),
        Arg::I32(npages),
        Arg::Buffer(i32_bytes(&table)),
        Arg::Buffer(storage::pack(DType::F16, &scale_codes)),
        Arg::Buffer(f32_bytes(&pages)),
        Arg::Buffer(vec![POISON; 4 * (blocks * PAGE) as usize]),
    ];
    run(&paged_program(), &mut args).unwrap();
    let got = f32s(buf(&args[5]));
    for bi in 0..blocks as usize {
        let s = DType::F16.decode(scale_codes[bi]) as f32;
        for j in 0..PAGE as usize {
            let want = pages[table[bi] as usize * PAGE as usize + j] * s;
            assert_eq!(got[bi * PAGE as usize + j], want, "block {bi} at {j}");
        }
    }
}

#[test]
fn item_of_a_u32_above_i32_max_is_an_error() {
    let mut b = ProgramBuilder::new("k", 32);
    let x = b.param_ptr("x", DType::UInt(32), false);
    let y = b.param_ptr("y", DType::Int(32), true);
    b.grid(vec![Expr::Int(1)]);
    let gx = b.view_global("gx", x, DType::UInt(32), vec![1.into()]);
    let gy = b.view_global("gy", y, DType::Int(32), vec![1.into()]);
    let t = b.load_global("t", gx, parse("local(1)").unwrap(), vec![0.into()]);
    let v = b.item("v", t);
    let r = b.allocate_register("r", DType::Int(32), parse("local(1)").unwrap(), Some(0.0));
    let r2 = b.binary(
        "r2",
        tilus_core::ir::ElementOp::Add,
        r,
        tilus_core::ir::Operand::Scalar(Expr::Var(v)),
    );
    b.store_global(r2, gy, vec![0.into()]);
    let p = b.finish();
    let mut args = vec![
        Arg::Buffer(3_000_000_000u32.to_le_bytes().to_vec()),
        Arg::Buffer(vec![0; 4]),
    ];
    let e = run(&p, &mut args).unwrap_err();
    assert!(
        e.message.contains("3000000000, which does not fit an i32"),
        "{}",
        e.message
    );
    let mut args = vec![
        Arg::Buffer(7u32.to_le_bytes().to_vec()),
        Arg::Buffer(vec![0; 4]),
    ];
    run(&p, &mut args).unwrap();
    assert_eq!(i32s(buf(&args[1])), vec![7]);
}

#[test]
fn gather_rows_from_shared_without_a_barrier_is_a_race() {
    let mut p = gather_rows_program(
        DType::F16,
        4,
        "spatial(32, 4).local(2, 1)",
        0,
        RowSrc::Shared,
    );
    p.body.retain(|s| {
        !matches!(
            s.kind,
            tilus_core::ir::StmtKind::Instr(tilus_core::ir::Instruction::Synchronize)
        )
    });
    let rows = SH_TABLE_ROWS;
    // Row `i + 1` of thread-held index `i`: rows another thread stored.
    let idx: Vec<i32> = (0..512).map(|i| (i * 7 + 3) % rows as i32).collect();
    let mut args = vec![
        Arg::I32(rows as i32),
        Arg::Buffer(vec![1; 2 * 4 * rows]),
        Arg::Buffer(i32_bytes(&idx)),
        Arg::Buffer(vec![0; 2 * 4 * 512]),
    ];
    let e = run(&p, &mut args).unwrap_err();
    assert!(
        e.message.contains("race on shared tensor `st`"),
        "{}",
        e.message
    );
}

#[test]
fn gather_from_shared_without_a_barrier_is_a_race() {
    let mut p = gather_program(DType::F16, true);
    // Drop the `synchronize` between the store into shared memory and the gather.
    p.body.retain(|s| {
        !matches!(
            s.kind,
            tilus_core::ir::StmtKind::Instr(tilus_core::ir::Instruction::Synchronize)
        )
    });
    let n = (SH_ROWS * SH_COLS) as i32;
    let idx: Vec<i32> = (0..TILE).map(|i| (i * 7 + 3) % n).collect();
    let mut args = vec![
        Arg::I32(n),
        Arg::I32(TILE),
        Arg::Buffer(vec![1; 2 * n as usize]),
        Arg::Buffer(i32_bytes(&idx)),
        Arg::Buffer(vec![0; 2 * TILE as usize]),
    ];
    let e = run(&p, &mut args).unwrap_err();
    assert!(
        e.message.contains("race on shared tensor `st`"),
        "{}",
        e.message
    );
}

// ---- verifier ------------------------------------------------------------------------------

fn one_error(p: &Program, span: u32, needles: &[&str]) {
    let d = verify(p, &Target::default()).expect_err("should be rejected");
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].span, SpanId(span));
    for n in needles {
        assert!(d[0].message.contains(n), "`{n}` not in: {}", d[0].message);
    }
}

/// A kernel with an f16 table `t` (read-only), a mutable f32 `h`, an u8 index source `u`.
fn verifier_kernel(body: impl FnOnce(&mut ProgramBuilder, [tilus_core::ir::VarId; 4])) -> Program {
    let mut b = ProgramBuilder::new("k", 128);
    let t = b.param_ptr("t", DType::F16, false);
    let h = b.param_ptr("h", DType::F32, true);
    let u = b.param_ptr("u", DType::UInt(8), false);
    let i = b.param_ptr("i", DType::Int(32), false);
    b.grid(vec![Expr::Int(1)]);
    let gt = b.view_global("gt", t, DType::F16, vec![256.into()]);
    let gh = b.view_global("gh", h, DType::F32, vec![256.into()]);
    let gu = b.view_global("gu", u, DType::UInt(8), vec![256.into()]);
    let gi = b.view_global("gi", i, DType::Int(32), vec![256.into()]);
    body(&mut b, [gt, gh, gu, gi]);
    b.finish()
}

#[test]
fn verifier_rejects_bad_addressing_operands() {
    // A u8 index.
    let p = verifier_kernel(|b, [gt, _, gu, _]| {
        let ix = b.load_global("codes", gu, tile(), vec![0.into()]);
        b.set_span(SpanId(7));
        b.gather("g", gt, ix);
    });
    one_error(
        &p,
        7,
        &["gather", "the index `codes` must hold i32, but it holds u8"],
    );

    // item of two elements.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let two = b.load_global("two", gi, parse("local(2)").unwrap(), vec![0.into()]);
        b.set_span(SpanId(8));
        b.item("x", two);
    });
    one_error(
        &p,
        8,
        &[
            "item: `two` has shape [2] (2 elements)",
            "exactly one element",
        ],
    );

    // scatter into a read-only view.
    let p = verifier_kernel(|b, [gt, _, _, gi]| {
        let ix = b.load_global("ix", gi, tile(), vec![0.into()]);
        let v = b.load_global("v", gt, tile(), vec![0.into()]);
        b.set_span(SpanId(9));
        b.scatter(v, gt, ix);
    });
    one_error(
        &p,
        9,
        &[
            "scatter: the destination `gt` is a view of read-only pointer `t`",
            "GlobalMut",
        ],
    );

    // gather of sub-byte elements.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = b.load_global("ix", gi, tile(), vec![0.into()]);
        let w = b.param_ptr("w", DType::UInt(4), false);
        let gw = b.view_global("gw", w, DType::UInt(4), vec![256.into()]);
        b.set_span(SpanId(10));
        b.gather("g", gw, ix);
    });
    one_error(&p, 10, &["`gw` holds u4 elements", "8-, 16- and 32-bit"]);

    // an f16 atomic, and a gather from a register tensor.
    let p = verifier_kernel(|b, [gt, _, _, gi]| {
        let ix = b.load_global("ix", gi, tile(), vec![0.into()]);
        let w = b.param_ptr("w", DType::F16, true);
        let gw = b.view_global("gw", w, DType::F16, vec![256.into()]);
        let v = b.load_global("v", gt, tile(), vec![0.into()]);
        b.set_span(SpanId(11));
        b.atomic(AtomicOp::Add, gw, ix, v, None, None);
    });
    one_error(
        &p,
        11,
        &["atomic_add: `gw` holds f16; atomics work on i32, u32 and f32"],
    );
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = b.load_global("ix", gi, tile(), vec![0.into()]);
        b.set_span(SpanId(12));
        b.gather("g", ix, ix);
    });
    one_error(
        &p,
        12,
        &["gather: the source `ix` must be a global or shared tensor, but it is a register"],
    );

    // old values from a replicated layout; an index of another layout.
    let p = verifier_kernel(|b, [_, gh, _, gi]| {
        let rep = parse("local(4).spatial(64)").unwrap();
        let ix = b.load_global("ix", gi, rep.clone(), vec![0.into()]);
        let v = b.allocate_register("v", DType::F32, rep, Some(1.0));
        b.set_span(SpanId(13));
        b.atomic(AtomicOp::Exchange, gh, ix, v, None, Some("old".into()));
    });
    one_error(
        &p,
        13,
        &[
            "atomic_exch: returning the old values",
            "held by 2 of the block's 128 threads",
        ],
    );
    let p = verifier_kernel(|b, [_, gh, _, gi]| {
        let ix = b.load_global(
            "ix",
            gi,
            parse("spatial(128).local(2)").unwrap(),
            vec![0.into()],
        );
        let v = b.allocate_register("v", DType::F32, tile(), Some(1.0));
        b.set_span(SpanId(14));
        b.atomic(AtomicOp::Max, gh, ix, v, None, None);
    });
    one_error(
        &p,
        14,
        &["atomic_max: the index `ix`", "must have the layout of `v`"],
    );
}

#[test]
fn verifier_rejects_bad_gather_rows_operands() {
    let rows = |b: &mut ProgramBuilder, gi| b.load_global("ix", gi, tile(), vec![0.into()]);
    // A rank-1 global source, and a rank-3 shared one.
    let p = verifier_kernel(|b, [gt, _, _, gi]| {
        let ix = rows(b, gi);
        b.set_span(SpanId(20));
        b.gather_rows("g", gt, ix, 0);
    });
    one_error(
        &p,
        20,
        &[
            "gather_rows: the source `gt` has rank 1",
            "rank-2 table [rows, w]",
        ],
    );
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let s = b.allocate_shared("s3", DType::F16, SharedLayout::row_major(&[2, 16, 4]));
        b.set_span(SpanId(21));
        b.gather_rows("g", s, ix, 0);
    });
    one_error(
        &p,
        21,
        &["gather_rows: the source `s3` has shape [2, 16, 4] (rank 3)"],
    );
    // Register tables (read by warp shuffles): rank 1; rows not on whole warps; rows of
    // half a word; rows not a multiple of 32; each lane holding a row's columns apart.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        b.set_span(SpanId(22));
        b.gather_rows("g", ix, ix, 0);
    });
    one_error(
        &p,
        22,
        &[
            "gather_rows: the register table `ix`",
            "must be [rows, w]; this one has shape [256]",
        ],
    );
    let register_table = |shape: [usize; 2], layout: Layout, dtype: DType, span: u32| {
        verifier_kernel(|b, [_, _, _, gi]| {
            let ix = rows(b, gi);
            let t = b.param_ptr("t2", dtype, false);
            let gt = b.view_global(
                "gt2",
                t,
                dtype,
                vec![(shape[0] as i32).into(), (shape[1] as i32).into()],
            );
            let tab = b.load_global("tab", gt, layout, vec![0.into(), 0.into()]);
            b.set_span(SpanId(span));
            b.gather_rows("g", tab, ix, 0);
        })
    };
    let l = |parts: &[Layout]| {
        parts[1..]
            .iter()
            .fold(parts[0].clone(), |acc, p| acc.compose(p).unwrap())
    };
    let p = register_table(
        [128, 4],
        l(&[Layout::spatial(&[128, 1]), Layout::local(&[1, 4])]),
        DType::F16,
        27,
    );
    one_error(
        &p,
        27,
        &[
            "the register table `tab`",
            "each lane must hold rows / 32 = 4 whole rows",
        ],
    );
    let p = register_table([32, 1], Layout::spatial(&[32, 1]), DType::F16, 28);
    one_error(&p, 28, &["rows of 1 f16 elements", "whole 32-bit words"]);
    let p = register_table(
        [48, 2],
        l(&[Layout::spatial(&[16, 1]), Layout::local(&[3, 2])]),
        DType::F16,
        29,
    );
    one_error(&p, 29, &["must lie on whole warps"]);
    let p = register_table(
        [64, 2],
        l(&[Layout::spatial(&[32, 1]), Layout::column_local(&[2, 2])]),
        DType::F16,
        30,
    );
    one_error(&p, 30, &["every warp must hold the whole table"]);
    // Both placements verify.
    for layout in [
        l(&[
            Layout::local(&[2, 1]),
            Layout::spatial(&[32, 1]),
            Layout::local(&[1, 2]),
        ]),
        l(&[Layout::spatial(&[32, 1]), Layout::local(&[2, 2])]),
    ] {
        verify(
            &register_table([64, 2], layout, DType::F16, 31),
            &Target::default(),
        )
        .unwrap();
    }
    // Sub-byte elements.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let w = b.param_ptr("w", DType::UInt(4), false);
        let gw = b.view_global("gw", w, DType::UInt(4), vec![64.into(), 4.into()]);
        b.set_span(SpanId(23));
        b.gather_rows("g", gw, ix, 0);
    });
    one_error(
        &p,
        23,
        &["gather_rows: `gw` holds u4 elements", "8-, 16- and 32-bit"],
    );
    // A u8 index.
    let p = verifier_kernel(|b, [_, _, gu, _]| {
        let ix = b.load_global("codes", gu, tile(), vec![0.into()]);
        let s = b.allocate_shared("book", DType::F16, SharedLayout::row_major(&[256, 4]));
        b.set_span(SpanId(24));
        b.gather_rows("g", s, ix, 0);
    });
    one_error(
        &p,
        24,
        &["gather_rows: the index `codes` must hold i32, but it holds u8"],
    );
    // `dim` past the index's rank.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let s = b.allocate_shared("book", DType::F16, SharedLayout::row_major(&[256, 4]));
        b.set_span(SpanId(25));
        b.gather_rows("g", s, ix, 1);
    });
    one_error(
        &p,
        25,
        &["gather_rows: dim 1 is not a dimension of the index `ix` (rank 1, shape [256])"],
    );
    // A global row width known only at run time.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let n = b.param_i32("n");
        let t = b.param_ptr("t2", DType::F16, false);
        let gt = b.view_global("gt2", t, DType::F16, vec![64.into(), n.into()]);
        b.set_span(SpanId(26));
        b.gather_rows("g", gt, ix, 0);
    });
    one_error(
        &p,
        26,
        &["gather_rows: the row width of the source `gt2` (its last extent) must be a positive constant"],
    );
}

#[test]
fn verifier_rejects_bad_scatter_rows_operands() {
    let rows = |b: &mut ProgramBuilder, gi| b.load_global("ix", gi, tile(), vec![0.into()]);
    // The value for rows of `w` f16 along dim 0 of `tile()`: `tile().local(w)`.
    let value = |b: &mut ProgramBuilder, w: usize| {
        let l = parse(&format!("local(2).spatial(128).local({w})")).unwrap();
        b.allocate_register("v", DType::F16, l, Some(1.0))
    };
    let book = |b: &mut ProgramBuilder| {
        b.allocate_shared("book", DType::F16, SharedLayout::row_major(&[256, 4]))
    };
    // A well-formed one verifies and prints as written.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let v = value(b, 4);
        let s = book(b);
        b.scatter_rows(v, s, ix, 0);
    });
    verify(&p, &Target::default()).unwrap();
    assert!(
        p.to_string().contains("scatter_rows(v, book, ix, 0);"),
        "{p}"
    );
    // A read-only global destination.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let v = value(b, 4);
        let t = b.param_ptr("t2", DType::F16, false);
        let gt = b.view_global("gt2", t, DType::F16, vec![64.into(), 4.into()]);
        b.set_span(SpanId(30));
        b.scatter_rows(v, gt, ix, 0);
    });
    one_error(
        &p,
        30,
        &[
            "scatter_rows: the destination `gt2` is a view of read-only pointer `t2`",
            "GlobalMut",
        ],
    );
    // A rank-1 global destination, a rank-3 shared one, a register one.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let v = value(b, 4);
        let o = b.param_ptr("o", DType::F16, true);
        let go = b.view_global("go", o, DType::F16, vec![1024.into()]);
        b.set_span(SpanId(31));
        b.scatter_rows(v, go, ix, 0);
    });
    one_error(
        &p,
        31,
        &[
            "scatter_rows: the destination `go` has rank 1",
            "scatter_rows writes rows of a rank-2 table [rows, w]",
        ],
    );
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let v = value(b, 4);
        let s = b.allocate_shared("s3", DType::F16, SharedLayout::row_major(&[2, 16, 4]));
        b.set_span(SpanId(32));
        b.scatter_rows(v, s, ix, 0);
    });
    one_error(
        &p,
        32,
        &["scatter_rows: the destination `s3` has shape [2, 16, 4] (rank 3)"],
    );
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let v = value(b, 4);
        b.set_span(SpanId(33));
        b.scatter_rows(v, v, ix, 0);
    });
    one_error(
        &p,
        33,
        &["scatter_rows: the destination `v` must be a global or shared tensor, but it is a register"],
    );
    // Sub-byte elements (the value's too, so only this error).
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let l = parse("local(2).spatial(128).local(4)").unwrap();
        let v = b.allocate_register("v", DType::UInt(4), l, Some(1.0));
        let o = b.param_ptr("o", DType::UInt(4), true);
        let go = b.view_global("go", o, DType::UInt(4), vec![64.into(), 4.into()]);
        b.set_span(SpanId(34));
        b.scatter_rows(v, go, ix, 0);
    });
    one_error(
        &p,
        34,
        &["scatter_rows: `go` holds u4 elements", "8-, 16- and 32-bit"],
    );
    // A u8 index; `dim` past the index's rank.
    let p = verifier_kernel(|b, [_, _, gu, _]| {
        let ix = b.load_global("codes", gu, tile(), vec![0.into()]);
        let v = value(b, 4);
        let s = book(b);
        b.set_span(SpanId(35));
        b.scatter_rows(v, s, ix, 0);
    });
    one_error(
        &p,
        35,
        &["scatter_rows: the index `codes` must hold i32, but it holds u8"],
    );
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let v = value(b, 4);
        let s = book(b);
        b.set_span(SpanId(36));
        b.scatter_rows(v, s, ix, 1);
    });
    one_error(
        &p,
        36,
        &["scatter_rows: dim 1 is not a dimension of the index `ix` (rank 1, shape [256])"],
    );
    // A value of another dtype.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let l = parse("local(2).spatial(128).local(4)").unwrap();
        let v = b.allocate_register("v", DType::F32, l, Some(1.0));
        let s = book(b);
        b.set_span(SpanId(37));
        b.scatter_rows(v, s, ix, 0);
    });
    one_error(
        &p,
        37,
        &["scatter_rows: the scattered value `v` holds f32 but `book` holds f16; the dtypes must match"],
    );
    // Values in another layout, with the expected one in the message: rows of 2 for a table
    // of 4; the same shape with a row's columns across threads; the same elements per thread
    // in another local order.
    for (k, layout) in [
        "local(2).spatial(128).local(2)",
        "local(2).spatial(32).local(4).spatial(4)",
        "local(8).spatial(128)",
    ]
    .into_iter()
    .enumerate()
    {
        let span = 40 + k as u32;
        let p = verifier_kernel(|b, [_, _, _, gi]| {
            let ix = rows(b, gi);
            let v = b.allocate_register("v", DType::F16, parse(layout).unwrap(), Some(1.0));
            let s = book(b);
            b.set_span(SpanId(span));
            b.scatter_rows(v, s, ix, 0);
        });
        let got = parse(layout).unwrap().to_expr();
        one_error(
            &p,
            span,
            &[
                &format!("scatter_rows: the scattered value `v` has layout {got}"),
                "rows of 4 elements written through the index `ix` along dim 0 need local(2).spatial(128).local(4) (shape [1024])",
                "the index's layout local(2).spatial(128) composed with local(4), the layout gather_rows(`book`, `ix`, 0) returns",
            ],
        );
    }
    // A global row width known only at run time.
    let p = verifier_kernel(|b, [_, _, _, gi]| {
        let ix = rows(b, gi);
        let v = value(b, 4);
        let n = b.param_i32("n");
        let o = b.param_ptr("o", DType::F16, true);
        let go = b.view_global("go", o, DType::F16, vec![64.into(), n.into()]);
        b.set_span(SpanId(44));
        b.scatter_rows(v, go, ix, 0);
    });
    one_error(
        &p,
        44,
        &["scatter_rows: the row width of the destination `go` (its last extent) must be a positive constant"],
    );
}

/// The result type of the brief's example: a `[64, 256]` index in the VQ kernels' layout over
/// a `[256, 4]` f16 codebook, `dim` 0.
#[test]
fn gather_rows_widens_the_index_layout_by_a_local() {
    let mut b = ProgramBuilder::new("k", 128);
    let i = b.param_ptr("i", DType::Int(32), false);
    b.grid(vec![Expr::Int(1)]);
    let gi = b.view_global("gi", i, DType::Int(32), vec![64.into(), 256.into()]);
    let li = parse("spatial(1, 4).local(16, 8).column_spatial(4, 8)").unwrap();
    let ix = b.load_global("ix", gi, li, vec![0.into(), 0.into()]);
    let book = b.allocate_shared("book", DType::F16, SharedLayout::row_major(&[256, 4]));
    let g = b.gather_rows("g", book, ix, 0);
    let want = parse("spatial(1, 4).local(16, 8).column_spatial(4, 8).local(4, 1)").unwrap();
    assert_eq!(want.shape(), &[256, 256]);
    match b.ty(g) {
        tilus_core::ir::VarType::Register(r) => {
            assert_eq!(r.dtype, DType::F16);
            assert_eq!(r.layout, want);
        }
        other => panic!("{other:?}"),
    }
    // dim 1 puts the row along the columns: `.local(1, 4)`.
    let g1 = b.gather_rows("g1", book, ix, 1);
    let want1 = parse("spatial(1, 4).local(16, 8).column_spatial(4, 8).local(1, 4)").unwrap();
    assert_eq!(b.ty(g1).as_register().map(|r| &r.layout), Some(&want1));
    let p = b.finish();
    assert!(
        p.to_string().contains("g = gather_rows(book, ix, 0)"),
        "{p}"
    );
}

// ---- generated code ------------------------------------------------------------------------

/// `gather_rows` reads a compact shared row with one vector of its size (two f16: a word,
/// four: `uint2`, eight: `uint4`), a swizzled or strided one per element, a global one by
/// vectors under an alignment assumption on its pointer; every read is guarded by the row test.
#[test]
fn gather_rows_generates_vector_loads_where_aligned() {
    let layout = "spatial(32, 4).local(2, 1)";
    let src = |dtype, w, src| {
        let p = gather_rows_program(dtype, w, layout, 0, src);
        verify(&p, &Target::default()).unwrap();
        let k = emit(&p, &Target::default()).unwrap().source;
        // The instruction's code (the table's copy into shared memory has vectors too).
        let at = k.find("= gather_rows(").expect("the instruction's comment");
        k[at..].to_string()
    };
    let k = src(DType::F16, 4, RowSrc::Shared);
    assert_eq!(k.matches("*(const uint2*)(").count(), 2, "{k}");
    assert!(!k.contains("*(const uint16_t*)("), "{k}");
    assert!(k.contains(">= 0 && (long long)"), "{k}");
    let k = src(DType::F16, 8, RowSrc::Shared);
    assert_eq!(k.matches("*(const uint4*)(").count(), 2, "{k}");
    let k = src(DType::F16, 2, RowSrc::Shared);
    assert_eq!(k.matches("*(const uint32_t*)(").count(), 2, "{k}");
    // 32 bytes per row: two 16-byte loads per index local.
    let k = src(DType::Int(32), 8, RowSrc::Shared);
    assert_eq!(k.matches("*(const uint4*)(").count(), 4, "{k}");
    let k = src(DType::F16, 8, RowSrc::Slice);
    assert_eq!(k.matches("*(const uint4*)(").count(), 2, "{k}");
    for s in [RowSrc::Swizzled, RowSrc::Wide] {
        let k = src(DType::F16, 4, s);
        assert!(!k.contains("uint2*"), "{s:?}: {k}");
        assert_eq!(k.matches("*(const uint16_t*)(").count(), 8, "{s:?}: {k}");
    }
    // A global table's rows start at its pointer: vectors, the pointer's alignment to them a
    // launch assumption.
    for (w, ty, bytes) in [(4, "uint2", 8), (8, "uint4", 16), (2, "uint32_t", 4)] {
        let p = gather_rows_program(DType::F16, w, layout, 0, RowSrc::Global);
        let k = emit(&p, &Target::default()).unwrap();
        let at = k
            .source
            .find("= gather_rows(")
            .expect("the instruction's comment");
        let code = &k.source[at..];
        assert_eq!(
            code.matches(&format!("*(const {ty}*)(")).count(),
            2,
            "{code}"
        );
        assert!(!code.contains("*(const uint16_t*)("), "{code}");
        assert!(
            k.assumptions
                .iter()
                .any(|a| matches!(a, Assumption::Aligned { bytes: b, .. } if *b == bytes)),
            "w = {w}: {:?}",
            k.assumptions
        );
    }
}

/// `scatter_rows` writes a compact shared row with one vector store of its size, under the
/// same alignment proof as `gather_rows` reads it (a swizzled or strided table per element, a
/// global one by vectors); each row's stores sit under one row test, and a replicated index writes from one
/// replica.
#[test]
fn scatter_rows_generates_vector_stores_where_aligned() {
    let src = |dtype, w, layout, dst| {
        let p = scatter_rows_program(dtype, w, layout, 0, dst);
        verify(&p, &Target::default()).unwrap();
        let k = emit(&p, &Target::default()).unwrap().source;
        // The instruction's code, up to the next instruction's comment.
        let at = k
            .find("// scatter_rows(v, ")
            .expect("the instruction's comment");
        let end = k[at + 3..].find("// ").map_or(k.len(), |e| at + 3 + e);
        k[at..end].to_string()
    };
    let plain = "spatial(32, 4).local(2, 1)";
    let k = src(DType::F16, 4, plain, RowSrc::Shared);
    assert_eq!(k.matches("*(uint2*)(").count(), 2, "{k}");
    assert_eq!(k.matches("= make_uint2(v[").count(), 2, "{k}");
    assert!(k.contains("= make_uint2(v[2], v[3]);"), "{k}");
    assert!(!k.contains("*(uint16_t*)("), "{k}");
    assert_eq!(k.matches(">= 0 && (long long)").count(), 2, "{k}");
    let k = src(DType::F16, 8, plain, RowSrc::Shared);
    assert_eq!(k.matches("*(uint4*)(").count(), 2, "{k}");
    assert!(k.contains("make_uint4(v[4], v[5], v[6], v[7])"), "{k}");
    let k = src(DType::F16, 2, plain, RowSrc::Shared);
    assert_eq!(k.matches("*(uint32_t*)(").count(), 2, "{k}");
    // 32 bytes per row: two 16-byte stores per index local.
    let k = src(DType::Int(32), 8, plain, RowSrc::Shared);
    assert_eq!(k.matches("*(uint4*)(").count(), 4, "{k}");
    let k = src(DType::F16, 8, plain, RowSrc::Slice);
    assert_eq!(k.matches("*(uint4*)(").count(), 2, "{k}");
    for s in [RowSrc::Swizzled, RowSrc::Wide] {
        let k = src(DType::F16, 4, plain, s);
        assert!(!k.contains("uint2*"), "{s:?}: {k}");
        assert_eq!(k.matches("*(uint16_t*)(").count(), 8, "{s:?}: {k}");
        assert_eq!(k.matches(">= 0 && (long long)").count(), 2, "{k}");
    }
    // A global table: one vector a row, as `gather_rows` reads it.
    let k = src(DType::F16, 4, plain, RowSrc::Global);
    assert_eq!(k.matches("*(uint2*)(").count(), 2, "{k}");
    assert_eq!(k.matches(">= 0 && (long long)").count(), 2, "{k}");
    // Not replicated: no guard; replicated (each index element on 2 of the 128 threads): one.
    assert!(!k.contains("tid"), "{k}");
    let rep = "spatial(4, 1).replicated(2).spatial(4, 4).local(1, 2)";
    let k = src(DType::F16, 4, rep, RowSrc::Shared);
    assert!(k.contains("if ((tid / 16) % 2 == 0) {"), "{k}");
}

#[test]
fn generated_code_guards_every_access() {
    let k = emit(&gather_program(DType::F16, false), &Target::default()).unwrap();
    assert!(
        k.source.contains("? (uint32_t)*(const uint16_t*)("),
        "{}",
        k.source
    );
    assert!(k.source.contains(">= 0 && (long long)"), "{}", k.source);
    let k = emit(&gather_program(DType::UInt(8), true), &Target::default()).unwrap();
    assert!(k.source.contains("tilus_smem"), "{}", k.source);
    let k = emit(
        &scatter_program(DType::F32, false, true),
        &Target::default(),
    )
    .unwrap();
    assert!(
        k.source.contains("if (tid < 64)"),
        "one replica stores: {}",
        k.source
    );
    let k = emit(
        &atomic_program(AtomicOp::Max, DType::F32, false, false),
        &Target::default(),
    )
    .unwrap();
    assert!(k.source.contains("atomicMax((int*)"), "{}", k.source);
    assert!(
        k.source.contains("atomicMin((unsigned int*)"),
        "{}",
        k.source
    );
    let k = emit(
        &atomic_program(AtomicOp::Cas, DType::Int(32), true, true),
        &Target::default(),
    )
    .unwrap();
    assert!(k.source.contains("atomicCAS((int*)"), "{}", k.source);
    let k = emit(&paged_program(), &Target::default()).unwrap();
    assert!(
        k.source.contains("float s;"),
        "f32 scalars are floats: {}",
        k.source
    );
}

/// `gather_rows` from a shared `[256, 4]` f16 table, indexed by `arange(.., offset)` over 256
/// rows: indices `offset..offset + 256`.
fn arange_rows_program(offset: i32) -> Program {
    let mut b = ProgramBuilder::new("arange_rows", 128);
    let table = b.param_ptr("table", DType::F16, false);
    let out = b.param_ptr("out", DType::F16, true);
    b.grid(vec![Expr::Int(1)]);
    let gt = b.view_global("gt", table, DType::F16, vec![256.into(), 4.into()]);
    let go = b.view_global("go", out, DType::F16, vec![256.into(), 4.into()]);
    let rows = parse("spatial(128, 1).local(2, 4)").unwrap();
    let t = b.load_global("t", gt, rows, vec![0.into(), 0.into()]);
    let st = b.allocate_shared("st", DType::F16, SharedLayout::row_major(&[256, 4]));
    b.store_shared(t, st, vec![0.into(), 0.into()]);
    b.synchronize();
    let ix = b.arange(
        "ix",
        parse("spatial(128, 1).local(2, 1)").unwrap(),
        0,
        offset,
    );
    let g = b.gather_rows("g", st, ix, 1);
    b.store_global(g, go, vec![0.into(), 0.into()]);
    b.finish()
}

/// The value ranges (`tilus_core::ir::value_ranges`) drop the bounds checks of row accesses
/// whose every index is provably inside the table, and only those: the codebook copies'
/// rows (`entry · copies + (entry + c) % copies`, entries from an `arange`) are written
/// unguarded; indices loaded from memory, or one row past the table's end, keep the check.
#[test]
fn row_accesses_drop_only_the_bounds_checks_the_ranges_prove() {
    let guarded = |p: &Program| {
        let k = emit(p, &Target::default()).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        k.source.contains(">= 0 && (long long)")
    };
    assert!(!guarded(&book_copies_program(DType::F16, 4, 16)));
    assert!(guarded(&gather_rows_program(
        DType::F16,
        4,
        ROW_INDEX_LAYOUTS[0].0,
        0,
        RowSrc::Shared
    )));
    assert!(!guarded(&arange_rows_program(0)));
    assert!(guarded(&arange_rows_program(1)));
    assert!(guarded(&arange_rows_program(-1)));
}
