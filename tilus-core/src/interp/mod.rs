//! The CPU reference interpreter: the semantic oracle for CI and the CPU fallback.
//!
//! [`run`] verifies the program (against `Target::default()`), then executes it for every block
//! of its grid, one block after another (blocks are ordered with grid dimension 0 fastest, like
//! CUDA's `x`; [`run_ordered`] takes another [`BlockOrder`]). A `fence` changes nothing here:
//! every global write of a block is visible to the blocks that run after it. Within a block the program runs once: scalars are uniform, and each instruction
//! acts on the whole block's tensors at once, thread by thread where that matters.
//!
//! Semantics beyond the conventions of `crate::ir`:
//! - A register tensor keeps one copy of its locals per *block* thread; replicas (block thread
//!   `t` plays layout thread `t % layout.num_threads()`) hold their own copies.
//! - Stores (`store_global`, `store_shared`) of an element held by several threads are done by
//!   the lowest `(thread, local)` holding it; replicas hold equal values, so this only matters
//!   for the shared-memory race checks (one writer, not many).
//! - `allocate_global` makes one zero-filled buffer per launch, per instruction: every block
//!   that executes it gets the same buffer (blocks run sequentially here, in order).
//! - `allocate_shared` reserves 16-byte-aligned space once per block, per instruction (executing
//!   it again in a loop returns the same space); `slice_shared` aliases its source.
//! - `copy_async` reads global memory when issued and writes shared memory when a
//!   `copy_async_wait_group` retires its group; see `memory` for the shared-memory checks that
//!   catch missing waits and barriers.
//! - `dot` sums `c + sum_k a*b` exactly in `f64` and rounds once to `c`'s dtype per element
//!   (`f32` for floats). The GPU accumulates in `f32` per mma (k = 16), so results agree to `f32`
//!   rounding of partial sums, not bit for bit; integer dots are exact on both (and overflowing
//!   `i32` is an error here).
//! - `print` writes to stderr.
//! - A `specialize!` region runs its roles as separate threads of control, each a block of its
//!   own threads, interleaved where an `mbarrier_wait` blocks (`roles`); shared-memory
//!   accesses of different roles are ordered by the mbarriers alone (`memory`).
//!
//! Errors (never panics on a verified program): out-of-buffer global access, `i32` and `i64`
//! overflow, an `i64` narrowed `as i32` out of range (the GPU keeps the low 32 bits), and
//! division by zero in scalars and integer tensors, NaN results, and the shared-memory checks.
//! Each error carries the statement's span and names the instruction, variables and index.

mod barrier;
mod instr;
mod math;
mod memory;
mod numeric;
mod order;
mod reduce;
mod roles;
mod scalar;

use std::collections::HashMap;
use std::rc::Rc;

use crate::ir::{Program, ScalarType, SpanId, Stmt, StmtKind, VarId, VarType};
use crate::layout::Layout;
use crate::verify::table::LayoutTable;
use crate::verify::{verify, Target};
use memory::{Globals, SharedMem, Value};
pub use order::BlockOrder;
use scalar::Scalar;

/// A kernel argument, in parameter order.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    I32(i32),
    I64(i64),
    F32(f32),
    Bool(bool),
    /// The bytes behind a pointer parameter (compact storage for sub-byte dtypes). Written back
    /// in place for mutable parameters.
    Buffer(Vec<u8>),
}

/// A runtime error, naming the instruction (and index) that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InterpError {
    pub span: crate::ir::SpanId,
    pub message: String,
}

/// Run `program` for every block of its grid, in launch order.
pub fn run(program: &Program, args: &mut [Arg]) -> Result<(), InterpError> {
    run_ordered(program, args, &BlockOrder::Launch)
}

/// [`run`] with the blocks in `order` (each still runs to its end before the next starts).
pub fn run_ordered(
    program: &Program,
    args: &mut [Arg],
    order: &BlockOrder,
) -> Result<(), InterpError> {
    let fail = |message: String| InterpError {
        span: program.span,
        message,
    };
    if let Err(diags) = verify(program, &Target::default()) {
        let first = diags[0].clone();
        let all: Vec<String> = diags.iter().map(|d| d.message.clone()).collect();
        return Err(InterpError {
            span: first.span,
            message: format!("`{}` does not verify: {}", program.name, all.join("; ")),
        });
    }
    if args.len() != program.params.len() {
        return Err(fail(format!(
            "`{}` takes {} arguments, got {}",
            program.name,
            program.params.len(),
            args.len()
        )));
    }
    let mut env = vec![None; program.vars.len()];
    let mut globals = Globals::default();
    // Check every argument before taking any buffer, so an error leaves `args` untouched.
    for (k, (param, arg)) in program.params.iter().zip(args.iter()).enumerate() {
        let var = program.var(param.var);
        let ok = matches!(
            (&var.ty, arg),
            (VarType::Scalar(ScalarType::I32), Arg::I32(_))
                | (VarType::Scalar(ScalarType::I64), Arg::I64(_))
                | (VarType::Scalar(ScalarType::F32), Arg::F32(_))
                | (VarType::Scalar(ScalarType::Bool), Arg::Bool(_))
                | (VarType::Pointer { .. }, Arg::Buffer(_))
        );
        if !ok {
            let want = match var.ty {
                VarType::Pointer { .. } => "a buffer",
                VarType::Scalar(ScalarType::F32) => "an f32",
                VarType::Scalar(ScalarType::Bool) => "a bool",
                VarType::Scalar(ScalarType::I64) => "an i64",
                _ => "an i32",
            };
            return Err(fail(format!(
                "argument {k} (`{}`) must be {want}, got {arg:?}",
                var.name
            )));
        }
    }
    for (param, arg) in program.params.iter().zip(args.iter_mut()) {
        let value = match arg {
            Arg::I32(v) => Value::I32(*v),
            Arg::I64(v) => Value::I64(*v),
            Arg::F32(v) => Value::F32(*v),
            Arg::Bool(v) => Value::Bool(*v),
            Arg::Buffer(bytes) => {
                globals.buffers.push(std::mem::take(bytes));
                globals.names.push(program.var(param.var).name.clone());
                Value::Ptr(globals.buffers.len() - 1)
            }
        };
        env[param.var.0 as usize] = Some(value);
    }
    let mut machine = Machine {
        p: program,
        block_threads: program.num_threads as usize,
        globals,
        scratch: HashMap::new(),
        tables: HashMap::new(),
        permutations: HashMap::new(),
    };
    let result = machine.launch(&env, order);
    // Hand the buffers back, also after an error (they hold whatever was written until then).
    let mut buffers = machine.globals.buffers.into_iter();
    for arg in args.iter_mut() {
        if let Arg::Buffer(bytes) = arg {
            *bytes = buffers.next().expect("one buffer per pointer argument");
        }
    }
    result
}

/// Launch-wide state.
struct Machine<'p> {
    p: &'p Program,
    block_threads: usize,
    globals: Globals,
    /// `allocate_global` instruction (by its variable) -> buffer.
    scratch: HashMap<VarId, usize>,
    tables: HashMap<Layout, Rc<LayoutTable>>,
    /// `(from, to)` -> the local permutation of a reordering cast (`Layout::local_permutation`),
    /// computed once per launch instead of at every executed cast.
    permutations: HashMap<(Layout, Layout), Rc<Vec<usize>>>,
}

/// One block's state.
struct Block {
    env: Vec<Option<Value>>,
    shared: SharedMem,
    /// `allocate_shared` instruction (by its variable) -> byte address.
    shared_alloc: HashMap<VarId, usize>,
    index: Vec<i32>,
    /// `dot_async` groups in flight, oldest first: the accumulator and the shared bytes each
    /// warpgroup's first thread reads.
    pending_dots: std::collections::VecDeque<instr::PendingDot>,
}

#[derive(Clone, PartialEq, Eq)]
enum Flow {
    Next,
    Exit,
    /// An `mbarrier_wait` whose phase has not completed (described): the statement did not run.
    Wait(String),
}

fn at(span: SpanId) -> impl Fn(String) -> InterpError {
    move |message| InterpError { span, message }
}

impl<'p> Machine<'p> {
    fn launch(&mut self, params: &[Option<Value>], order: &BlockOrder) -> Result<(), InterpError> {
        let span = self.p.span;
        let mut grid = Vec::new();
        for (d, e) in self.p.grid.iter().enumerate() {
            match scalar::eval(e, params, &self.p.vars).map_err(at(span))? {
                Scalar::I32(n) if n >= 0 => grid.push(n as usize),
                v => return Err(at(span)(format!("grid extent {d} is {v:?}"))),
            }
        }
        let total: usize = grid.iter().product();
        for linear in order.sequence(total).map_err(at(span))? {
            let mut rest = linear;
            let index = grid
                .iter()
                .map(|&n| {
                    let i = rest % n;
                    rest /= n;
                    i as i32
                })
                .collect();
            let mut block = Block {
                env: params.to_vec(),
                shared: SharedMem::default(),
                shared_alloc: HashMap::new(),
                index,
                pending_dots: Default::default(),
            };
            block.shared.one_role(self.block_threads);
            let mut run = self.exec(&self.p.body, &mut block);
            if run.is_ok() && block.shared.tma_in_flight() > 0 {
                run = Err(InterpError {
                    span: self.p.span,
                    message: format!(
                        "{} tma_load(s) still in flight at the end of the kernel; missing mbarrier_wait?",
                        block.shared.tma_in_flight()
                    ),
                });
            }
            if run.is_ok() && !block.pending_dots.is_empty() {
                run = Err(InterpError {
                    span: self.p.span,
                    message: format!(
                        "{} dot_async group(s) still in flight at the end of the kernel; missing dot_wait(0)?",
                        block.pending_dots.len()
                    ),
                });
            }
            run.map_err(|mut e| {
                let idx = &block.index;
                e.message = format!("block {idx:?}: {}", e.message);
                e
            })?;
        }
        Ok(())
    }

    fn table(&mut self, layout: &Layout) -> Result<Rc<LayoutTable>, String> {
        if let Some(t) = self.tables.get(layout) {
            return Ok(t.clone());
        }
        let t = Rc::new(LayoutTable::new(layout)?);
        self.tables.insert(layout.clone(), t.clone());
        Ok(t)
    }

    /// Output local `i` of a cast from `from` to `to` is input local `sigma[i]`.
    fn permutation(&mut self, from: &Layout, to: &Layout) -> Result<Rc<Vec<usize>>, String> {
        let key = (from.clone(), to.clone());
        if let Some(s) = self.permutations.get(&key) {
            return Ok(s.clone());
        }
        let sigma = Rc::new(from.local_permutation(to).ok_or_else(|| {
            format!(
                "cast: {} does not hold the elements of {} on the same threads",
                to.to_expr(),
                from.to_expr()
            )
        })?);
        self.permutations.insert(key, sigma.clone());
        Ok(sigma)
    }

    fn eval(&self, e: &crate::ir::Expr, block: &Block) -> Result<Scalar, String> {
        scalar::eval(e, &block.env, &self.p.vars)
    }

    fn eval_i32(&self, e: &crate::ir::Expr, block: &Block, what: &str) -> Result<i32, String> {
        match self.eval(e, block)? {
            Scalar::I32(v) => Ok(v),
            v => Err(format!("{what} is {v:?}, not an i32")),
        }
    }

    fn eval_bool(&self, e: &crate::ir::Expr, block: &Block) -> Result<bool, String> {
        match self.eval(e, block)? {
            Scalar::Bool(b) => Ok(b),
            v => Err(format!("condition is {v:?}, not a bool")),
        }
    }

    /// Run a `let`, an assignment or an instruction.
    fn simple(&mut self, s: &'p Stmt, block: &mut Block) -> Result<Flow, InterpError> {
        let err = at(s.span);
        match &s.kind {
            StmtKind::Let { var, value } | StmtKind::Assign { var, value } => {
                let v = self
                    .eval(value, block)
                    .map_err(|e| err(format!("`{}` = ...: {e}", self.p.var(*var).name)))?;
                block.env[var.0 as usize] = Some(v.value());
                Ok(Flow::Next)
            }
            StmtKind::Instr(ins) => self
                .instr(ins, block)
                .map_err(|e| err(format!("{}: {e}", ins.name()))),
            _ => unreachable!("compound statements are run by exec and the role cursors"),
        }
    }

    fn exec(&mut self, stmts: &'p [Stmt], block: &mut Block) -> Result<Flow, InterpError> {
        for s in stmts {
            let err = at(s.span);
            let flow = match &s.kind {
                StmtKind::Let { .. } | StmtKind::Assign { .. } | StmtKind::Instr(_) => {
                    match self.simple(s, block)? {
                        Flow::Wait(what) => {
                            return Err(err(format!(
                                "mbarrier_wait: deadlock: {what} and no other thread can \
                                 arrive; is the phase right (each completed phase flips it), and \
                                 did every tma_load or mbarrier_arrive of the phase run?"
                            )))
                        }
                        flow => flow,
                    }
                }
                StmtKind::Specialize { roles } => {
                    self.specialize(roles, block)?;
                    Flow::Next
                }
                StmtKind::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    if self.eval_bool(cond, block).map_err(&err)? {
                        self.exec(then_body, block)?
                    } else {
                        self.exec(else_body, block)?
                    }
                }
                StmtKind::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                    ..
                } => {
                    let a = self
                        .eval_i32(start, block, "the loop start")
                        .map_err(&err)?;
                    let b = self.eval_i32(end, block, "the loop end").map_err(&err)?;
                    let mut flow = Flow::Next;
                    let mut i = a;
                    while i < b {
                        block.env[var.0 as usize] = Some(Value::I32(i));
                        if self.exec(body, block)? == Flow::Exit {
                            flow = Flow::Exit;
                            break;
                        }
                        // The GPU's `int` increment would overflow (undefined behaviour in C).
                        i = i32::try_from(*step)
                            .ok()
                            .and_then(|s| i.checked_add(s))
                            .ok_or_else(|| {
                                err(format!("the loop variable overflows i32: {i} + {step}"))
                            })?;
                    }
                    flow
                }
                StmtKind::While { cond, body } => {
                    let mut flow = Flow::Next;
                    while self.eval_bool(cond, block).map_err(&err)? {
                        if self.exec(body, block)? == Flow::Exit {
                            flow = Flow::Exit;
                            break;
                        }
                    }
                    flow
                }
            };
            if flow == Flow::Exit {
                return Ok(Flow::Exit);
            }
        }
        Ok(Flow::Next)
    }
}
