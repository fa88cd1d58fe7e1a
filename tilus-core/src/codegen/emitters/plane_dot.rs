//! `plane_dot`: the dot product of bit planes in each thread's registers, as a carry-save sum.
//!
//! A result is `Σ popc(w_p AND a_q) << (p + q)` over the planes and words the thread holds
//! ([`crate::verify::plan_plane_dot`]). Counting each term's bits costs one `popc` per term,
//! and `popc` issues at a quarter of the integer rate through the shared MIO queue (perf note
//! 73): W3A4's one-token kernel spent most of its issue stalls there. So the terms are first
//! added as whole words, bit by bit in parallel: the terms of weight `2^s` form column `s`, and
//! while a column holds three words a full adder (`x ^ y ^ z`, and the majority as a carry
//! into column `s + 1`, one `lop3` each) replaces them by one word of the column and one of
//! the next. At most two words per column are left, and only those are counted. 48 terms
//! (W3A4, four words) leave 12 `popc`s; the adders cost what the 36 `popc`s and their
//! additions did.

use std::collections::VecDeque;

use crate::codegen::context::Ctx;
use crate::codegen::emitters::elementwise::store_codes;
use crate::codegen::CodegenError;
use crate::ir::VarId;
use crate::verify::plan_plane_dot;

pub(crate) fn plane_dot(
    cx: &mut Ctx,
    out: VarId,
    w: VarId,
    a: VarId,
    dim: usize,
) -> Result<(), CodegenError> {
    let (_, wl) = cx.reg(w)?;
    let (_, al) = cx.reg(a)?;
    let plan = plan_plane_dot(&wl, &al, dim, cx.block_threads).map_err(|e| cx.err(e))?;
    let (wn, an, o) = (cx.name(w), cx.name(a), cx.name(out));
    cx.w.open("");
    let mut codes = Vec::with_capacity(plan.terms.len());
    for terms in &plan.terms {
        let mut columns: Vec<VecDeque<String>> = Vec::new();
        for t in terms {
            let s = t.shift as usize;
            if columns.len() <= s {
                columns.resize(s + 1, VecDeque::new());
            }
            let v = cx.fresh("pt");
            cx.w.line(format!(
                "const uint32_t {v} = {wn}[{}] & {an}[{}];",
                t.w_local, t.a_local
            ));
            columns[s].push_back(v);
        }
        // Full adders, lowest column first (carries move up); first in, first out, so each
        // column's sum is a balanced tree rather than a chain.
        let mut s = 0;
        while s < columns.len() {
            while columns[s].len() >= 3 {
                let x = columns[s].pop_front().expect("three words");
                let y = columns[s].pop_front().expect("three words");
                let z = columns[s].pop_front().expect("three words");
                let (sum, carry) = (cx.fresh("ps"), cx.fresh("pc"));
                cx.w.line(format!("const uint32_t {sum} = {x} ^ {y} ^ {z};"));
                cx.w.line(format!(
                    "const uint32_t {carry} = ({x} & {y}) | ({z} & ({x} ^ {y}));"
                ));
                columns[s].push_back(sum);
                if columns.len() <= s + 1 {
                    columns.push(VecDeque::new());
                }
                columns[s + 1].push_back(carry);
            }
            s += 1;
        }
        let parts: Vec<String> = columns
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.is_empty())
            .map(|(s, c)| {
                let count = c
                    .iter()
                    .map(|v| format!("__popc({v})"))
                    .collect::<Vec<_>>()
                    .join(" + ");
                if s == 0 {
                    format!("(uint32_t)({count})")
                } else {
                    format!("((uint32_t)({count}) << {s})")
                }
            })
            .collect();
        codes.push(if parts.is_empty() {
            "0u".to_string()
        } else {
            parts.join(" + ")
        });
    }
    store_codes(cx, &o, 32, &codes);
    cx.w.close();
    Ok(())
}
