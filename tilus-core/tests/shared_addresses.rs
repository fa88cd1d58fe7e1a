//! Shared-memory addresses of the generated CUDA, checked on the CPU with a small evaluator of
//! the integer C expressions the generator writes, for every thread, with a run-time pipeline
//! stage in the base offset (the address classes: one address per class of groups, immediate
//! offsets):
//!
//! - `ldmatrix`: the hardware's distribution of the 8x8 matrices to the lanes is simulated
//!   (plain and `.trans`), and every local of every thread must come from the shared element
//!   that the register layout and the (swizzled) shared layout say it holds;
//! - `cp.async`: every 16-byte chunk of the tile is copied exactly once, from the right global
//!   element to the right (swizzled) shared element, with the source size 0 (zero fill)
//!   exactly for the rows past the view.

use tilus_core::codegen::emit;
use tilus_core::ir::{Expr, Program, ProgramBuilder};
use tilus_core::layout::{parse, SharedLayout, Swizzle};
use tilus_core::target::Target;
use tilus_core::verify::verify;
use tilus_core::DType;

const STAGES: usize = 3;

/// `load_shared` of a `[rows, cols]` tile of stage `st` (a parameter) of a `[STAGES, rows,
/// root_cols]` f16 buffer at column `col_off`, in `layout`; stored so that the load is used.
fn program(
    root_cols: usize,
    swizzle: Option<Swizzle>,
    layout: &str,
    col_off: i32,
    threads: u32,
) -> (Program, SharedLayout) {
    let lay = parse(layout).unwrap();
    let (rows, cols) = (lay.shape()[0], lay.shape()[1]);
    let mut b = ProgramBuilder::new("ldsm", threads);
    let st = b.param_i32("st");
    let y = b.param_ptr("y", DType::F16, true);
    b.grid(vec![1.into()]);
    let mut shared = SharedLayout::row_major(&[STAGES, rows, root_cols]);
    if let Some(sw) = swizzle {
        shared = shared.with_swizzle(sw);
    }
    let sh = b.allocate_shared("sh", DType::F16, shared.clone());
    let tile = b.slice_shared(
        "tile",
        sh,
        vec![st.into(), 0.into(), 0.into()],
        vec![rows, root_cols],
    );
    let r = b.load_shared("r", tile, lay, vec![0.into(), col_off.into()]);
    let gy = b.view_global(
        "gy",
        y,
        DType::F16,
        vec![Expr::Int(rows as i32), Expr::Int(cols as i32)],
    );
    b.store_global(r, gy, vec![0.into(), 0.into()]);
    (b.finish(), shared)
}

/// A tiny evaluator of the generator's integer expressions: literals (`u` suffix allowed),
/// names, `( )`, casts `(uint32_t)` / `(int)`, and `* / % + - << >> & ^ |` with C's precedence.
struct Eval<'a> {
    toks: Vec<String>,
    pos: usize,
    vars: &'a dyn Fn(&str) -> i64,
}

fn tokenize(s: &str) -> Vec<String> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch.is_ascii_alphanumeric() || ch == '_' {
            let j = (i..c.len())
                .find(|&j| !(c[j].is_ascii_alphanumeric() || c[j] == '_'))
                .unwrap_or(c.len());
            out.push(c[i..j].iter().collect());
            i = j;
        } else if (ch == '<' || ch == '>' || ch == '&') && c.get(i + 1) == Some(&ch) {
            out.push(format!("{ch}{ch}"));
            i += 2;
        } else {
            out.push(ch.to_string());
            i += 1;
        }
    }
    out
}

impl Eval<'_> {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(|s| s.as_str())
    }
    fn next(&mut self) -> String {
        self.pos += 1;
        self.toks[self.pos - 1].clone()
    }
    fn prec(op: &str) -> Option<u8> {
        Some(match op {
            "&&" => 1,
            "|" => 2,
            "^" => 3,
            "&" => 4,
            "<" => 5,
            "<<" | ">>" => 6,
            "+" | "-" => 7,
            "*" | "/" | "%" => 8,
            _ => return None,
        })
    }
    /// `c ? a : b` (lowest precedence, right-associative) over binary expressions.
    fn ternary(&mut self) -> i64 {
        let c = self.expr(0);
        if self.peek() != Some("?") {
            return c;
        }
        self.pos += 1;
        let a = self.ternary();
        assert_eq!(self.next(), ":");
        let b = self.ternary();
        if c != 0 {
            a
        } else {
            b
        }
    }
    fn expr(&mut self, min: u8) -> i64 {
        let mut lhs = self.unary();
        while let Some(p) = self.peek().and_then(Self::prec) {
            if p < min {
                break;
            }
            let op = self.next();
            let rhs = self.expr(p + 1);
            lhs = match op.as_str() {
                "&&" => i64::from(lhs != 0 && rhs != 0),
                "|" => lhs | rhs,
                "^" => lhs ^ rhs,
                "&" => lhs & rhs,
                "<" => i64::from(lhs < rhs),
                "<<" => lhs << rhs,
                ">>" => lhs >> rhs,
                "+" => lhs + rhs,
                "-" => lhs - rhs,
                "*" => lhs * rhs,
                "/" => lhs / rhs,
                _ => lhs % rhs,
            };
        }
        lhs
    }
    /// The type words of a cast at the current position (after `(`), if it is one.
    fn cast_type(&self) -> Option<(usize, String)> {
        let words = ["uint32_t", "int", "unsigned", "long", "const", "void", "*"];
        let mut j = self.pos;
        let mut ty = Vec::new();
        while j < self.toks.len() && words.contains(&self.toks[j].as_str()) {
            ty.push(self.toks[j].clone());
            j += 1;
        }
        (!ty.is_empty() && self.toks.get(j).map(|s| s.as_str()) == Some(")"))
            .then(|| (j + 1, ty.join(" ")))
    }
    fn unary(&mut self) -> i64 {
        let t = self.next();
        if t == "(" {
            if let Some((after, ty)) = self.cast_type() {
                self.pos = after;
                let v = self.unary();
                return match ty.as_str() {
                    "uint32_t" | "unsigned" => v as u32 as i64,
                    "int" => v as i32 as i64,
                    _ => v, // long long, pointers
                };
            }
            let v = self.ternary();
            assert_eq!(self.next(), ")");
            return v;
        }
        if t == "-" {
            return -self.unary();
        }
        if t.chars().next().unwrap().is_ascii_digit() {
            return t.trim_end_matches(['u', 'l']).parse().unwrap();
        }
        (self.vars)(&t)
    }
}

fn eval(text: &str, vars: &dyn Fn(&str) -> i64) -> i64 {
    let mut e = Eval {
        toks: tokenize(text),
        pos: 0,
        vars,
    };
    let v = e.ternary();
    assert_eq!(e.pos, e.toks.len(), "trailing tokens in `{text}`");
    v
}

/// One `ldmatrix` of the generated code: matrices, transposed, first register, address.
struct Ldsm {
    k: usize,
    trans: bool,
    reg: usize,
    addr: String,
}

/// The `const` definitions and `ldmatrix` calls of `r = load_shared(..)`'s block.
fn ldsm_lines(source: &str) -> (Vec<(String, String)>, Vec<Ldsm>) {
    let start = source
        .lines()
        .position(|l| l.trim_start().starts_with("// r = load_shared("))
        .expect("the load's comment");
    let mut defs = Vec::new();
    let mut calls = Vec::new();
    for line in source.lines().skip(start + 1) {
        let l = line.trim();
        if l == "}" {
            break;
        }
        if let Some(rest) = l
            .strip_prefix("const uint32_t ")
            .or(l.strip_prefix("const int "))
        {
            let (name, e) = rest.split_once(" = ").unwrap();
            defs.push((name.to_string(), e.trim_end_matches(';').to_string()));
        } else if let Some(rest) = l.strip_prefix("tilus_ldsm_x") {
            let k = rest[..1].parse().unwrap();
            let trans = rest[1..].starts_with("_trans");
            let args = &rest[rest.find('(').unwrap() + 1..rest.rfind(')').unwrap()];
            let (reg, addr) = args.split_once(", ").unwrap();
            let reg = reg[reg.find('[').unwrap() + 1..reg.find(']').unwrap()]
                .parse()
                .unwrap();
            calls.push(Ldsm {
                k,
                trans,
                reg,
                addr: addr.to_string(),
            });
        }
    }
    (defs, calls)
}

/// Every local of every thread comes from the shared element the layouts say.
fn check(root_cols: usize, swizzle: Option<Swizzle>, layout: &str, col_off: i32, threads: u32) {
    let (p, shared) = program(root_cols, swizzle, layout, col_off, threads);
    verify(&p, &Target::default()).unwrap_or_else(|d| panic!("{layout}: {d:?}"));
    let k = emit(&p, &Target::default()).unwrap();
    let (defs, calls) = ldsm_lines(&k.source);
    assert!(!calls.is_empty(), "{layout}: no ldmatrix\n{}", k.source);
    let lay = parse(layout).unwrap();
    let lt = lay.num_threads();
    for st in 0..STAGES as i64 {
        // addr[t][c]: the byte address thread t passes to call c.
        let addr: Vec<Vec<i64>> = (0..threads as i64)
            .map(|tid| {
                let mut env: Vec<(String, i64)> = Vec::new();
                for (name, e) in &defs {
                    // The shared window's base address: the allocation starts at 0.
                    let e = e
                        .strip_prefix("tilus_smem_addr(")
                        .and_then(|x| x.strip_suffix(')'))
                        .unwrap_or(e);
                    let v = eval(e, &|v| match v {
                        "tid" => tid,
                        "st" => st,
                        "tilus_smem" => 0,
                        other => {
                            env.iter()
                                .find(|(n, _)| n == other)
                                .unwrap_or_else(|| panic!("unknown name `{other}`"))
                                .1
                        }
                    });
                    env.push((name.clone(), v));
                }
                calls
                    .iter()
                    .map(|c| {
                        eval(&c.addr, &|v| match v {
                            "tid" => tid,
                            "st" => st,
                            other => env.iter().find(|(n, _)| n == other).unwrap().1,
                        })
                    })
                    .collect()
            })
            .collect();
        for t in 0..threads as usize {
            let (warp, lane) = (t / 32, t % 32);
            // Element offset of row r of matrix i of call c (lane 8i + r of this warp).
            let row = |c: usize, i: usize, r: usize| {
                let a = addr[warp * 32 + 8 * i + r][c];
                assert_eq!(a % 16, 0, "{layout}: row address {a} not 16-byte aligned");
                (a / 2) as usize
            };
            for (c, call) in calls.iter().enumerate() {
                for i in 0..call.k {
                    let elems = if call.trans {
                        let r0 = 2 * (lane % 4);
                        [row(c, i, r0) + lane / 4, row(c, i, r0 + 1) + lane / 4]
                    } else {
                        let base = row(c, i, lane / 4) + 2 * (lane % 4);
                        [base, base + 1]
                    };
                    for (half, got) in elems.into_iter().enumerate() {
                        let local = 2 * (call.reg + i) + half;
                        let idx = lay.eval(t % lt, local);
                        let want = shared.offset(&[st as usize, idx[0], idx[1] + col_off as usize]);
                        assert_eq!(
                            got, want,
                            "{layout} (swizzle {swizzle:?}, stage {st}): thread {t} local {local} \
                             = tile {idx:?} reads element {got}, expected {want}"
                        );
                    }
                }
            }
        }
    }
}

const MMA_A: &str = "column_local(2, 2).spatial(8, 4).local(1, 2)";
const MMA_B: &str = "local(2, 1).column_spatial(4, 8).local(2, 1)";

#[test]
fn plain_ldmatrix_of_a_fragments() {
    for (cols, sw, off) in [
        (64, Some((3, 3, 3)), 32),
        (128, Some((3, 3, 4)), 96),
        (64, None, 16),
    ] {
        let sw = sw.map(|(b, s, h)| Swizzle::new(b, s, h).unwrap());
        check(
            cols,
            sw,
            &format!("spatial(4, 1).local(1, 2).{MMA_A}"),
            off,
            128,
        );
    }
    // Eight warps of 16 rows each (the prefill attention's Q tile at BM = 128).
    let sw = Swizzle::new(3, 3, 4).unwrap();
    check(
        128,
        Some(sw),
        &format!("spatial(8, 1).local(1, 2).{MMA_A}"),
        64,
        256,
    );
}

/// K^T as the B operand: K rows loaded with pairs of consecutive columns per thread (plain
/// ldmatrix), replicated over the warps (the prefill attention's K tile).
#[test]
fn plain_ldmatrix_of_k_rows_replicated() {
    for (cols, sw, off) in [(64, (3, 3, 3), 32), (128, (3, 3, 4), 64)] {
        let sw = Swizzle::new(sw.0, sw.1, sw.2).unwrap();
        check(
            cols,
            Some(sw),
            "replicated(4).column_local(8, 2).local(1, 2).spatial(8, 4).local(1, 2)",
            off,
            128,
        );
    }
}

/// V as the B operand (`ldmatrix.trans`), replicated over the warps.
#[test]
fn transposed_ldmatrix_of_b_fragments() {
    for (cols, sw, off) in [(64, (3, 3, 3), 32), (128, (3, 3, 4), 96)] {
        let sw = Swizzle::new(sw.0, sw.1, sw.2).unwrap();
        check(
            cols,
            Some(sw),
            &format!("replicated(4).local(4, 4).{MMA_B}"),
            off,
            128,
        );
    }
}

/// `copy_async` of rows `r0..r0 + rows` (columns `col0..col0 + cols`) of `x [n, gcols]` f16
/// into stage `st` of a `[STAGES, rows, cols]` buffer; `n`, `r0` and `st` are parameters.
fn copy_program(
    rows: usize,
    cols: usize,
    gcols: usize,
    col0: i32,
    swizzle: Swizzle,
    threads: u32,
) -> (Program, SharedLayout) {
    let mut b = ProgramBuilder::new("cpa", threads);
    let n = b.param_i32("n");
    let r0 = b.param_i32("r0");
    let st = b.param_i32("st");
    let x = b.param_ptr("x", DType::F16, false);
    let y = b.param_ptr("y", DType::F16, true);
    b.grid(vec![1.into()]);
    let gx = b.view_global("gx", x, DType::F16, vec![n.into(), (gcols as i32).into()]);
    let shared = SharedLayout::row_major(&[STAGES, rows, cols]).with_swizzle(swizzle);
    let sh = b.allocate_shared("sh", DType::F16, shared.clone());
    let tile = b.slice_shared(
        "tile",
        sh,
        vec![st.into(), 0.into(), 0.into()],
        vec![rows, cols],
    );
    b.copy_async(tile, gx, vec![r0.into(), col0.into()]);
    b.copy_async_commit_group();
    b.copy_async_wait_group(0);
    b.synchronize();
    let lay = parse(&format!(
        "local({}, 1).spatial({}, {}).local(1, 8)",
        rows * cols / 8 / threads as usize,
        threads as usize / (cols / 8),
        cols / 8
    ))
    .unwrap();
    let r = b.load_shared("r", tile, lay, vec![0.into(), 0.into()]);
    let gy = b.view_global(
        "gy",
        y,
        DType::F16,
        vec![Expr::Int(rows as i32), Expr::Int(cols as i32)],
    );
    b.store_global(r, gy, vec![0.into(), 0.into()]);
    (b.finish(), shared)
}

/// Every 16-byte chunk of the tile is copied once: from global element `(r0 + r) * gcols +
/// col0 + c` to the shared element of `[st, r, c]`, with size 16 inside the view and 0 (zero
/// fill) past row `n`.
fn check_copy(rows: usize, cols: usize, gcols: usize, col0: i32, swizzle: Swizzle, threads: u32) {
    let (p, shared) = copy_program(rows, cols, gcols, col0, swizzle, threads);
    verify(&p, &Target::default()).unwrap_or_else(|d| panic!("{d:?}"));
    let k = emit(&p, &Target::default()).unwrap();
    let src = &k.source;
    let start = src
        .lines()
        .position(|l| l.trim_start().starts_with("// copy_async("))
        .expect("the copy's comment");
    // The kernel-level names the block refers to (view extents, strides).
    let mut defs: Vec<(String, String)> = Vec::new();
    let mut calls: Vec<[String; 3]> = Vec::new();
    for line in src.lines().take(start) {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("const int ") {
            if let Some((name, e)) = rest.split_once(" = ") {
                if name.starts_with("gx_") {
                    defs.push((name.to_string(), e.trim_end_matches(';').to_string()));
                }
            }
        }
    }
    for line in src.lines().skip(start + 1) {
        let l = line.trim();
        if l == "}" {
            break;
        }
        let decl = [
            "const int ",
            "const long long ",
            "const uint32_t ",
            "const bool ",
        ]
        .iter()
        .find_map(|p| l.strip_prefix(p));
        if let Some(rest) = decl {
            let (name, e) = rest.split_once(" = ").unwrap();
            let e = e.trim_end_matches(';');
            let e = e
                .strip_prefix("tilus_smem_addr(")
                .and_then(|x| x.strip_suffix(')'))
                .unwrap_or(e);
            defs.push((name.to_string(), e.to_string()));
        } else if let Some(rest) = l.strip_prefix("tilus_cp_async_16(") {
            let args = rest.strip_suffix(");").unwrap();
            // Split at the top-level commas.
            let (mut depth, mut parts, mut cur) = (0, Vec::new(), String::new());
            for ch in args.chars() {
                match ch {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    ',' if depth == 0 => {
                        parts.push(std::mem::take(&mut cur));
                        continue;
                    }
                    _ => {}
                }
                cur.push(ch);
            }
            parts.push(cur);
            assert_eq!(parts.len(), 3, "{l}");
            calls.push([parts[0].clone(), parts[1].clone(), parts[2].clone()]);
        } else if !l.is_empty() && !l.starts_with("//") && !l.starts_with('{') {
            panic!("unexpected line in the copy: {l}\n{src}");
        }
    }
    assert!(!calls.is_empty(), "no cp.async 16\n{src}");
    for (n, r0, st) in [
        (1000i64, 0i64, 0i64),
        (1000, 37, 2),
        (50, 20, 1),
        (20, 20, 0),
    ] {
        let mut got: Vec<(usize, Option<i64>)> = Vec::new();
        for tid in 0..threads as i64 {
            let mut env: Vec<(String, i64)> = Vec::new();
            let lookup = |env: &Vec<(String, i64)>, v: &str| -> i64 {
                match v {
                    "tid" => tid,
                    "n" => n,
                    "r0" => r0,
                    "st" => st,
                    "tilus_smem" | "x" => 0,
                    other => {
                        env.iter()
                            .rev()
                            .find(|(name, _)| name == other)
                            .unwrap_or_else(|| panic!("unknown name `{other}`"))
                            .1
                    }
                }
            };
            for (name, e) in &defs {
                let v = eval(e, &|v| lookup(&env, v));
                env.push((name.clone(), v));
            }
            for [s, g, size] in &calls {
                let s = eval(s, &|v| lookup(&env, v));
                let g = eval(g, &|v| lookup(&env, v));
                let size = eval(size, &|v| lookup(&env, v));
                assert_eq!(s % 16, 0, "shared address {s} not 16-byte aligned");
                match size {
                    16 => got.push(((s / 2) as usize, Some(g / 2))),
                    0 => got.push(((s / 2) as usize, None)),
                    other => panic!("size {other}"),
                }
            }
        }
        let mut want: Vec<(usize, Option<i64>)> = Vec::new();
        for r in 0..rows {
            for c in (0..cols).step_by(8) {
                let s = shared.offset(&[st as usize, r, c]);
                let row = r0 + r as i64;
                let g = (row < n).then(|| row * gcols as i64 + col0 as i64 + c as i64);
                want.push((s, g));
            }
        }
        got.sort();
        want.sort();
        let what =
            format!("cp.async of [{rows}, {cols}] (n {n}, r0 {r0}, stage {st}, {swizzle:?})");
        assert_eq!(got.len(), want.len(), "{what}: chunk count");
        if let Some((g, w)) = got.iter().zip(&want).find(|(g, w)| g != w) {
            panic!("{what}: (shared element, global element) {g:?}, expected {w:?}");
        }
    }
}

/// The prefill attention's K/V tiles: 64 rows of 64 or 128 columns out of a wider row (a KV
/// head's slice), 8 warps and 4.
#[test]
fn copy_async_chunks_land_where_the_layouts_say() {
    check_copy(64, 64, 256, 128, Swizzle::new(3, 3, 3).unwrap(), 256);
    check_copy(64, 128, 512, 256, Swizzle::new(3, 3, 4).unwrap(), 256);
    check_copy(64, 128, 128, 0, Swizzle::new(3, 3, 4).unwrap(), 128);
    check_copy(32, 64, 64, 0, Swizzle::new(3, 3, 3).unwrap(), 128);
}
