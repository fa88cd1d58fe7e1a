//! Kernels with data-dependent addresses: VQ codebook lookups (`gather` of 2-f16 words,
//! `gather_rows` of 4-f16 rows, from copies staged with `scatter_rows`), a paged copy through
//! a block table (`item`, both spellings), a histogram in shared memory (`atomic_add`), and MoE
//! routing (slots from the old counts of `atomic_add`, then `scatter`). Shared by
//! `macro_addressing.rs` (interpreter).

/// `out[v] = codebook[codes[v]]` for 2-dim f16 vectors: each codebook entry (two f16) is read
/// as one u32, gathered by its code, and reinterpreted as two f16 lanes.
#[tilus::kernel(grid = [cdiv(n, 128)], warps = 4)]
pub fn vq_lookup(
    n: i32,
    entries: i32,
    codes: Global<u8>,
    codebook: Global<f16>,
    out: GlobalMut<f16>,
) {
    let [bi] = block_indices();
    let gc = view_global(codes, [n]);
    let book = view_global::<u32>(codebook, [entries]);
    let go = view_global(out, [n, 2]);
    let c = load_global(gc, layout!(spatial(128)), [bi * 128]);
    let index = cast::<i32>(c);
    let pairs = gather(book, index);
    let v = view::<f16>(pairs, layout!(spatial(128, 1).local(1, 2)));
    store_global(v, go, [bi * 128, 0]);
}

/// `out[v, :] = codebook[codes[v], :]` for 4-dim f16 vectors with `gather_rows`: one row (one
/// 8-byte shared load) per code from the codebook staged in shared memory (its rows past
/// `entries` load as zeros), into `staged`; and the same straight from global memory, where
/// codes past `entries` are outside the table and read zeros, into `direct`. `DIM` picks
/// the dimension the rows widen: `[n, 1]` codes become `[4n, 1]` (0) or `[n, 4]` (1) values,
/// the same bytes either way.
#[tilus::kernel(grid = [cdiv(n, 128)], warps = 4, space(DIM = [0, 1]))]
pub fn vq_rows<const DIM: i32>(
    n: i32,
    entries: i32,
    codes: Global<u8>,
    codebook: Global<f16>,
    staged: GlobalMut<f16>,
    direct: GlobalMut<f16>,
) {
    let [bi] = block_indices();
    let gb = view_global(codebook, [entries, 4]);
    let book = shared::<f16>([256, 4]);
    store_shared(
        load_global(gb, layout!(spatial(128, 1).local(2, 4)), [0, 0]),
        book,
        [0, 0],
    );
    sync();
    let c = load_global(
        view_global(codes, [n, 1]),
        layout!(spatial(128, 1)),
        [bi * 128, 0],
    );
    let index = cast::<i32>(c);
    let from_shared = gather_rows(book, index, DIM);
    let from_global = gather_rows(gb, index, DIM);
    if DIM == 0 {
        store_global(from_shared, view_global(staged, [n * 4, 1]), [bi * 512, 0]);
        store_global(from_global, view_global(direct, [n * 4, 1]), [bi * 512, 0]);
    } else {
        store_global(from_shared, view_global(staged, [n, 4]), [bi * 128, 0]);
        store_global(from_global, view_global(direct, [n, 4]), [bi * 128, 0]);
    }
}

/// The VQ kernels' codebook staging with `scatter_rows`: `REP` copies of each 4-f16 entry of
/// `codebook` (`[entries, 4]`; entries from `entries` to 255 load as zeros) in a shared table
/// `[256 * REP, 4]`, entry `e` at rows `e * REP ..`, pass `c` writing copy `(e + c) % REP` of
/// every entry (one 8-byte store per row). Then `out[v, :] = codebook[codes[v], :]` by
/// `gather_rows`, thread `t` reading copy `t % REP`. Block 0 also writes the rows in reverse
/// into the global table `reversed` (`[entries, 4]`: row `entries - 1 - e` is entry `e`;
/// entries past the codebook have negative rows, skipped).
#[tilus::kernel(grid = [cdiv(n, 128)], warps = 4, space(REP = [1, 16]))]
pub fn vq_staged<const REP: i32>(
    n: i32,
    entries: i32,
    codes: Global<u8>,
    codebook: Global<f16>,
    out: GlobalMut<f16>,
    reversed: GlobalMut<f16>,
) {
    let [bi] = block_indices();
    let li = layout!(local(2, 1).spatial(128, 1));
    let rows = load_global(
        view_global(codebook, [entries, 4]),
        layout!(local(2, 1).spatial(128, 1).local(1, 4)),
        [0, 0],
    );
    let book = shared::<f16>([256 * REP, 4]);
    let entry = arange(li, 0, 0);
    #[unroll]
    for c in 0..REP {
        scatter_rows(rows, book, entry * REP + (entry + c) % REP, 1);
    }
    if bi == 0 {
        scatter_rows(
            rows,
            view_global(reversed, [entries, 4]),
            entry * -1 + (entries - 1),
            1,
        );
    }
    sync();
    let code = load_global(
        view_global(codes, [n, 1]),
        layout!(spatial(128, 1)),
        [bi * 128, 0],
    );
    let copy = arange(layout!(spatial(128, 1)), 0, 0) % REP;
    let v = gather_rows(book, cast::<i32>(code) * REP + copy, 1);
    store_global(v, view_global(out, [n, 4]), [bi * 128, 0]);
}

/// Row `r` of `out` is page `table[r]` of `pages`, times `scales[r]` (an f32 scalar from
/// `.item()`); pages are `PAGE` f32 values.
#[tilus::kernel(grid = [rows], warps = 2, space(PAGE = [64, 256]))]
pub fn paged_copy<const PAGE: i32>(
    rows: i32,
    npages: i32,
    table: Global<i32>,
    scales: Global<f32>,
    pages: Global<f32>,
    out: GlobalMut<f32>,
) {
    let [r] = block_indices();
    let one = layout!(local(1));
    let page = item(load_global(view_global(table, [rows]), one, [r]));
    let s = load_global(view_global(scales, [rows]), one, [r]).item();
    let row = layout!(local(1, PAGE / 64).spatial(1, 64));
    let x = load_global(view_global(pages, [npages, PAGE]), row, [page, 0]);
    let y = x * s;
    store_global(y, view_global(out, [rows, PAGE]), [r, 0]);
}

/// `hist[b]` = how many of `x` fall in bin `b` (values outside `[0, 256)` are dropped; `n` a
/// multiple of 256): one block counts into shared memory, then writes the bins out.
#[tilus::kernel(grid = [1], warps = 4)]
pub fn histogram(n: i32, x: Global<i32>, hist: GlobalMut<i32>) {
    let bins = layout!(local(2).spatial(128));
    let counts = shared::<i32>([256]);
    let zero = register::<i32>(bins, 0);
    store_shared(zero, counts, [0]);
    sync();
    let gx = view_global(x, [n]);
    let ones = register::<i32>(bins, 1);
    for c in 0..n / 256 {
        let v = load_global(gx, bins, [c * 256]);
        atomic_add(counts, v, ones);
    }
    sync();
    let h = load_shared(counts, bins, [0]);
    store_global(h, view_global(hist, [256]), [0]);
}

/// MoE routing of `TOKENS` tokens to `experts`: each token takes the next free slot of its
/// expert (the old count returned by `atomic_add`), then its value is scattered to row
/// `expert`, column `slot` of `routed` (`experts x TOKENS`).
#[tilus::kernel(grid = [1], warps = 4)]
pub fn moe_route(
    experts: i32,
    expert: Global<i32>,
    x: Global<f32>,
    counts: GlobalMut<i32>,
    routed: GlobalMut<f32>,
) {
    let t = layout!(local(2).spatial(128));
    let e = load_global(view_global(expert, [256]), t, [0]);
    let v = load_global(view_global(x, [256]), t, [0]);
    let ones = register::<i32>(t, 1);
    let slot = atomic_add(view_global(counts, [experts]), e, ones);
    let row = e * 256;
    let at = row + slot;
    scatter(v, view_global(routed, [experts, 256]), at);
}

/// `out[v, 4 j + w] = table[codes[v, j], (5 j + 3) % C, w]` with `lookup` from a rank-3 table of
/// 4-half vectors staged in shared memory: `C = 32` of `ROWS = 256` rows is the one-`PRMT`
/// path with one 8-byte load per code (256-byte rows), `C = 16` the guarded one, where the
/// columns wrap and, with `ROWS = 128`, codes past the table read zero vectors.
#[tilus::kernel(grid = [cdiv(n, 128)], warps = 4, space(C = [32, 16], ROWS = [256, 128]))]
pub fn table_lookup_rows<const C: i32, const ROWS: i32>(
    n: i32,
    codes: Global<u8>,
    table: Global<f16>,
    out: GlobalMut<f16>,
) {
    let [bi] = block_indices();
    let st = shared::<f16>([ROWS, C, 4]);
    copy_async(view_global(table, [ROWS, C, 4]), st, [0, 0, 0]);
    commit_group();
    wait_group(0);
    sync();
    let lc = layout!(spatial(128, 1).local(1, 8));
    let c = load_global(view_global(codes, [n, 8]), lc, [bi * 128, 0]);
    let cols = arange(layout!(reduce(lc, [0])), 1, 0) * 5 + 3;
    store_global(
        lookup(st, c, cols),
        view_global(out, [n, 32]),
        [bi * 128, 0],
    );
}

/// Checks what [`table_lookup_rows`] wrote for `codes` and a `[rows, c, 4]` table: each code's
/// vector `(code, (5 j + 3) % c)`, zeros for a code past the table, bit for bit.
#[allow(dead_code)] // Not every test crate that includes this module checks it.
pub fn check_table_lookup_rows(
    tag: &str,
    out: &[tilus::prelude::f16],
    codes: &[u8],
    table: &[tilus::prelude::f16],
    rows: usize,
    c: usize,
) {
    use tilus::prelude::f16;
    assert_eq!(out.len(), 4 * codes.len(), "{tag}: output length");
    for (i, got) in out.iter().enumerate() {
        let (e, w) = (i / 4, i % 4);
        let code = codes[e];
        let (row, col) = (code as usize, (5 * (e % 8) + 3) % c);
        let want = if row < rows {
            table[(row * c + col) * 4 + w]
        } else {
            f16::ZERO
        };
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{tag} half {i} (code {code})"
        );
    }
}

/// `out[v, j] = table[codes[v, j], (5 j + 3) % C]` with `lookup` from an f32 table staged in
/// shared memory: `C = 64` columns of `ROWS = 256` rows is the one-`PRMT` path (256-byte rows,
/// u8 rows always in range), `C = 32` the guarded one, where the columns wrap and, with
/// `ROWS = 128`, codes past the table read zeros. The columns are one `[1, 8]` tensor
/// broadcast to every code row.
#[tilus::kernel(grid = [cdiv(n, 128)], warps = 4, space(C = [64, 32], ROWS = [256, 128]))]
pub fn table_lookup<const C: i32, const ROWS: i32>(
    n: i32,
    codes: Global<u8>,
    table: Global<f32>,
    out: GlobalMut<f32>,
) {
    let [bi] = block_indices();
    let st = shared::<f32>([ROWS, C]);
    store_shared(
        load_global(
            view_global(table, [ROWS, C]),
            layout!(local(ROWS / 128, 1).spatial(128, 1).local(1, C)),
            [0, 0],
        ),
        st,
        [0, 0],
    );
    sync();
    let lc = layout!(spatial(128, 1).local(1, 8));
    let c = load_global(view_global(codes, [n, 8]), lc, [bi * 128, 0]);
    let cols = arange(layout!(reduce(lc, [0])), 1, 0) * 5 + 3;
    store_global(lookup(st, c, cols), view_global(out, [n, 8]), [bi * 128, 0]);
}

/// `out[v, 2 j + ..] = table[codes[v, j], ..]` with the `[32 · SLOTS, W]` f16 table held in
/// registers (`gather_rows` from registers: warp shuffles). Each of the 4 warps holds the
/// whole table, row `r` on lane `r % 32` (`BLOCKED = 0`) or `r / SLOTS` (`BLOCKED = 1`); a code
/// outside `[0, 32 · SLOTS)` reads zeros. Two codes per thread, rows widened along dim 1.
#[tilus::kernel(
    grid = [cdiv(n, 128)],
    warps = 4,
    space(SLOTS = [1, 3, 4], BLOCKED = [0, 1], W = [2, 4]),
)]
pub fn warp_rows<const SLOTS: i32, const BLOCKED: i32, const W: i32>(
    n: i32,
    codes: Global<i32>,
    table: Global<f16>,
    out: GlobalMut<f16>,
) {
    let [bi] = block_indices();
    let gt = view_global(table, [32 * SLOTS, W]);
    let lt = if BLOCKED == 1 {
        layout!(spatial(32, 1).local(SLOTS, W))
    } else {
        layout!(local(SLOTS, 1).spatial(32, 1).local(1, W))
    };
    let t = load_global(gt, lt, [0, 0]);
    let c = load_global(
        view_global(codes, [n, 2]),
        layout!(spatial(128, 1).local(1, 2)),
        [bi * 128, 0],
    );
    let rows = gather_rows(t, c, 1);
    store_global(rows, view_global(out, [n, 2 * W]), [bi * 128, 0]);
}

/// Checks what [`warp_rows`] wrote for `codes` (`[n, 2]`) and a `[rows, w]` table, bit for bit.
#[allow(dead_code)] // Not every test crate that includes this module checks it.
pub fn check_warp_rows(
    tag: &str,
    out: &[tilus::prelude::f16],
    codes: &[i32],
    table: &[tilus::prelude::f16],
    rows: usize,
    w: usize,
) {
    use tilus::prelude::f16;
    assert_eq!(out.len(), w * codes.len(), "{tag}: output length");
    for (i, got) in out.iter().enumerate() {
        let (e, c) = (i / w, i % w);
        let code = codes[e];
        let want = match usize::try_from(code) {
            Ok(r) if r < rows => table[r * w + c],
            _ => f16::ZERO,
        };
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{tag} half {i} (code {code})"
        );
    }
}
