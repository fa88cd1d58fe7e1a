//! `specialize!` regions: the roles run as separate threads of control, interleaved at their
//! barrier waits.
//!
//! Each role is a cursor over its body (a stack of statement lists and loops) that runs until
//! an `mbarrier_wait` finds its phase incomplete; then the next role that can go on runs, in
//! role order. This is one legal interleaving: every wait passes only once its phase completed,
//! and the shared-memory checks (`memory`) order the roles' accesses by the barriers alone, so a
//! missing arrival or wait is reported whatever the interleaving. When every unfinished role
//! waits, the block deadlocks: reported with each role's wait.
//!
//! A role is a block of its own threads: `Machine::block_threads` is the role's thread count
//! while it runs, and its `dot_async` groups and `cp.async` groups are its own.

use super::memory::Value;
use super::{at, Block, Flow, InterpError, Machine};
use crate::ir::{Expr, Role, SpanId, Stmt, StmtKind, VarId};

/// A loop a cursor is inside.
enum Loop<'p> {
    For {
        var: VarId,
        /// The variable's value in the iteration being run.
        current: i32,
        end: i32,
        step: u32,
        span: SpanId,
    },
    While {
        cond: &'p Expr,
        span: SpanId,
    },
}

/// One statement list being run: the next statement, and the loop it is the body of.
struct Frame<'p> {
    stmts: &'p [Stmt],
    pc: usize,
    looping: Option<Loop<'p>>,
}

/// Where one role is in its body, and its own asynchronous state.
struct Cursor<'p> {
    frames: Vec<Frame<'p>>,
    threads: usize,
    pending_dots: std::collections::VecDeque<super::instr::PendingDot>,
    copies: super::memory::CopyGroups,
    /// What the role waits for, when it is blocked.
    waiting: Option<(SpanId, String)>,
}

/// What one step of a cursor did.
enum Step {
    Ran,
    Blocked,
    Done,
}

impl<'p> Machine<'p> {
    /// Run a `specialize!` region to its end (every role finished).
    pub(super) fn specialize(
        &mut self,
        roles: &'p [Role],
        block: &mut Block,
    ) -> Result<(), InterpError> {
        let block_threads = self.block_threads;
        let mut start = 0;
        let mut ranges = Vec::new();
        let mut cursors: Vec<Cursor<'p>> = Vec::new();
        for r in roles {
            let threads = r.warps as usize * 32;
            ranges.push(start..start + threads);
            start += threads;
            cursors.push(Cursor {
                frames: vec![Frame {
                    stmts: &r.body,
                    pc: 0,
                    looping: None,
                }],
                threads,
                pending_dots: Default::default(),
                copies: Default::default(),
                waiting: None,
            });
        }
        // Asynchronous work the whole block issued before the region (every thread's, on the
        // GPU) goes to role 0, so that a wait there retires it and none of it vanishes.
        cursors[0].pending_dots = std::mem::take(&mut block.pending_dots);
        cursors[0].copies = block.shared.take_copy_groups();
        block.shared.enter_roles(ranges);
        let result = self.schedule(&mut cursors, block);
        self.block_threads = block_threads;
        // Leftover asynchronous work is reported at the end of the block, as outside a region.
        for c in &mut cursors {
            block.pending_dots.extend(c.pending_dots.drain(..));
        }
        block.shared.switch_role(0);
        result
    }

    fn schedule(
        &mut self,
        cursors: &mut [Cursor<'p>],
        block: &mut Block,
    ) -> Result<(), InterpError> {
        loop {
            let mut progress = false;
            let mut unfinished = 0;
            for (r, c) in cursors.iter_mut().enumerate() {
                if c.frames.is_empty() {
                    continue;
                }
                self.block_threads = c.threads;
                block.shared.switch_role(r);
                std::mem::swap(&mut block.pending_dots, &mut c.pending_dots);
                block.shared.swap_copy_groups(&mut c.copies);
                let ran = self.run_cursor(c, block);
                std::mem::swap(&mut block.pending_dots, &mut c.pending_dots);
                block.shared.swap_copy_groups(&mut c.copies);
                let (steps, done) = ran.map_err(|mut e| {
                    e.message = format!("role {r}: {}", e.message);
                    e
                })?;
                progress |= steps > 0;
                if !done {
                    unfinished += 1;
                }
            }
            if unfinished == 0 {
                return Ok(());
            }
            if !progress {
                let (span, _) = cursors
                    .iter()
                    .find_map(|c| c.waiting.clone())
                    .expect("a role that cannot go on waits");
                let waits: Vec<String> = cursors
                    .iter()
                    .enumerate()
                    .filter_map(|(r, c)| {
                        c.waiting.as_ref().map(|(_, w)| format!("role {r} is {w}"))
                    })
                    .collect();
                return Err(at(span)(format!(
                    "deadlock: every role that has not finished waits, and none can arrive: {}; \
                     is each phase right (each completed phase flips it), and did every \
                     tma_load or mbarrier_arrive of the phases run?",
                    waits.join("; ")
                )));
            }
        }
    }

    /// Run a role until it blocks or ends: the statements it ran, and whether it ended.
    fn run_cursor(
        &mut self,
        c: &mut Cursor<'p>,
        block: &mut Block,
    ) -> Result<(usize, bool), InterpError> {
        let mut steps = 0;
        loop {
            match self.step(c, block)? {
                Step::Ran => steps += 1,
                Step::Blocked => return Ok((steps, false)),
                Step::Done => return Ok((steps, true)),
            }
        }
    }

    /// Run the cursor's next statement (or loop test).
    fn step(&mut self, c: &mut Cursor<'p>, block: &mut Block) -> Result<Step, InterpError> {
        let Some(frame) = c.frames.last_mut() else {
            return Ok(Step::Done);
        };
        if frame.pc == frame.stmts.len() {
            // The end of a body: the next iteration of its loop, or back to the enclosing list.
            let again = match &mut frame.looping {
                None => false,
                Some(Loop::For {
                    var,
                    current,
                    end,
                    step,
                    span,
                }) => {
                    // As `Machine::exec`: the increment after each iteration must not overflow.
                    let next = i32::try_from(*step)
                        .ok()
                        .and_then(|s| current.checked_add(s))
                        .ok_or_else(|| {
                            at(*span)(format!(
                                "the loop variable overflows i32: {current} + {step}"
                            ))
                        })?;
                    *current = next;
                    if next < *end {
                        block.env[var.0 as usize] = Some(Value::I32(next));
                        true
                    } else {
                        false
                    }
                }
                Some(Loop::While { cond, span }) => {
                    let (cond, span) = (*cond, *span);
                    self.eval_bool(cond, block).map_err(at(span))?
                }
            };
            if again {
                frame.pc = 0;
            } else {
                c.frames.pop();
            }
            return Ok(if c.frames.is_empty() {
                Step::Done
            } else {
                Step::Ran
            });
        }
        let s = &frame.stmts[frame.pc];
        let err = at(s.span);
        let body = |stmts: &'p [Stmt], looping| Frame {
            stmts,
            pc: 0,
            looping,
        };
        match &s.kind {
            StmtKind::If {
                cond,
                then_body,
                else_body,
            } => {
                frame.pc += 1;
                let taken = if self.eval_bool(cond, block).map_err(&err)? {
                    then_body
                } else {
                    else_body
                };
                c.frames.push(body(taken, None));
            }
            StmtKind::For {
                var,
                start,
                end,
                step,
                body: stmts,
                ..
            } => {
                frame.pc += 1;
                let a = self
                    .eval_i32(start, block, "the loop start")
                    .map_err(&err)?;
                let b = self.eval_i32(end, block, "the loop end").map_err(&err)?;
                if a < b {
                    block.env[var.0 as usize] = Some(Value::I32(a));
                    let looping = Loop::For {
                        var: *var,
                        current: a,
                        end: b,
                        step: *step,
                        span: s.span,
                    };
                    c.frames.push(body(stmts, Some(looping)));
                }
            }
            StmtKind::While { cond, body: stmts } => {
                frame.pc += 1;
                if self.eval_bool(cond, block).map_err(&err)? {
                    let looping = Loop::While { cond, span: s.span };
                    c.frames.push(body(stmts, Some(looping)));
                }
            }
            StmtKind::Specialize { .. } => {
                return Err(err(
                    "a specialize! region inside a role (the verifier forbids it)".into(),
                ))
            }
            StmtKind::Let { .. } | StmtKind::Assign { .. } | StmtKind::Instr(_) => {
                match self.simple(s, block)? {
                    Flow::Next => frame.pc += 1,
                    Flow::Wait(what) => {
                        // Not run: the same statement is tried again when the role resumes.
                        c.waiting = Some((s.span, what));
                        return Ok(Step::Blocked);
                    }
                    Flow::Exit => {
                        return Err(err("exit inside a role (the verifier forbids it)".into()))
                    }
                }
            }
        }
        c.waiting = None;
        Ok(Step::Ran)
    }
}
