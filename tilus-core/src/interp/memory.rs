//! The three memory scopes of a block, as host data.
//!
//! - **Registers**: a [`RegTensor`] keeps each block thread's locals as raw bits, packed in the
//!   compact storage order (`crate::storage`), so `view` is an exact reinterpretation.
//! - **Global**: launch-wide byte buffers (the kernel's pointer arguments and scratch
//!   allocations); a [`GlobalView`] addresses them row-major by bit offset. Elements outside
//!   the view's shape are masked; elements inside the view but beyond the buffer are errors.
//! - **Shared**: one byte array per block ([`SharedMem`]), bump-allocated, with checks that make
//!   pipeline and barrier bugs visible (see below).
//!
//! Shared-memory checks. Each byte remembers who last wrote it and who read it since (one
//! thread, several threads, or a completed cp.async), when, and in which role (below); an
//! access by another thread that is not ordered after it by a barrier is a race:
//! - a read by thread `r` of a byte another thread wrote is a race (read-after-write);
//! - a write of a byte another thread read or wrote is a race (write-after-read/write); so is a
//!   cp.async issued over bytes read or written since the barrier;
//! - a cp.async lands when a `copy_async_wait_group` retires its group; its bytes then count as
//!   written by no thread in particular, because the GPU code may split the copy over threads
//!   in any way: every read needs a `synchronize` after the wait;
//! - touching bytes of a cp.async still in flight is an error (missing `wait_group`);
//! - reading bytes never written is an error (uninitialised shared memory);
//! - atomics (`atomic_add`..) of different threads on the same bytes do not race with each
//!   other, but they do with plain reads and writes of other threads since the last barrier;
//! - a `tma_load` is in flight like a cp.async (same checks when it is issued and while it
//!   flies) until an `mbarrier_wait` sees its barrier phase complete; its bytes then count as
//!   written by no thread (the barrier's completion makes them visible to every waiting thread).
//!
//! Order. Accesses are stamped with a clock that every synchronizing event advances. Outside a
//! `specialize!` region the block is one role and `synchronize` orders everything before it.
//! Inside one, each role `r` knows `seen[r][q]`: the time up to which role `q`'s accesses are
//! ordered before `r`'s next one. A role's `synchronize` (a named barrier of its threads)
//! advances `seen[r][r]`; an `mbarrier_arrive` releases what the role has seen and its own
//! accesses so far into the barrier's phase, and a wait that sees the phase complete acquires
//! them (a vector clock per role, joined through the barriers). A `tma_load`'s arrival
//! releases nothing (one thread issues it, and its copy is tracked by itself).

use std::collections::VecDeque;

use crate::layout::{Layout, SharedLayout};
use crate::storage;
use crate::verify::shared::element_offset;
use crate::DType;

/// The value of a variable.
#[derive(Clone, Debug)]
pub(super) enum Value {
    I32(i32),
    I64(i64),
    Bool(bool),
    F32(f32),
    /// A pointer parameter: index of its buffer.
    Ptr(usize),
    Global(GlobalView),
    Shared(SharedView),
    Reg(RegTensor),
}

/// A register tensor of the whole block.
#[derive(Clone, Debug)]
pub(super) struct RegTensor {
    pub dtype: DType,
    pub layout: Layout,
    /// Bytes per thread.
    stride: usize,
    data: Vec<u8>,
}

impl RegTensor {
    pub fn new(dtype: DType, layout: Layout, block_threads: usize) -> Self {
        let stride = storage::packed_len(dtype, layout.num_locals());
        RegTensor {
            dtype,
            layout,
            stride,
            data: vec![0; stride * block_threads],
        }
    }

    fn thread(&self, t: usize) -> &[u8] {
        &self.data[t * self.stride..(t + 1) * self.stride]
    }

    /// Code of local `i` of block thread `t`.
    pub fn get(&self, t: usize, i: usize) -> u32 {
        storage::get(self.dtype, self.thread(t), i)
    }

    pub fn set(&mut self, t: usize, i: usize, code: u32) {
        let s = self.stride;
        storage::set(self.dtype, &mut self.data[t * s..(t + 1) * s], i, code);
    }

    /// Copy the registers of layout threads `0..layout_threads` to their replicas (block thread
    /// `t` plays layout thread `t % layout_threads`).
    pub fn replicate(&mut self, layout_threads: usize) {
        let n = layout_threads * self.stride;
        if n == 0 {
            return;
        }
        for start in (n..self.data.len()).step_by(n) {
            self.data.copy_within(0..n, start);
        }
    }

    /// The same bits as another dtype and layout (the verifier checked the bits per thread).
    pub fn reinterpret(&self, dtype: DType, layout: Layout) -> RegTensor {
        RegTensor {
            dtype,
            layout,
            stride: self.stride,
            data: self.data.clone(),
        }
    }
}

/// A row-major view of a global buffer.
#[derive(Clone, Debug)]
pub(super) struct GlobalView {
    pub buffer: usize,
    pub dtype: DType,
    pub shape: Vec<i64>,
}

/// Launch-wide global memory.
#[derive(Default)]
pub(super) struct Globals {
    pub buffers: Vec<Vec<u8>>,
    /// The parameter (or scratch tensor) each buffer belongs to, for messages.
    pub names: Vec<String>,
}

impl Globals {
    /// The flat element index of `index`, or `None` when it is outside the view (masked).
    fn flat(view: &GlobalView, index: &[i64]) -> Option<usize> {
        let mut flat = 0i64;
        for (&i, &n) in index.iter().zip(&view.shape) {
            if i < 0 || i >= n {
                return None;
            }
            flat = flat * n + i;
        }
        Some(flat as usize)
    }

    fn check(&self, view: &GlobalView, flat: usize) -> Result<(), String> {
        let bits = view.dtype.bits() as usize;
        let len = self.buffers[view.buffer].len();
        if (flat + 1) * bits > len * 8 {
            return Err(format!(
                "it lies at bits {}..{} of buffer `{}`, which has only {len} bytes",
                flat * bits,
                (flat + 1) * bits,
                self.names[view.buffer]
            ));
        }
        Ok(())
    }

    /// The code at `index`, or `None` when masked.
    pub fn read(&self, view: &GlobalView, index: &[i64]) -> Result<Option<u32>, String> {
        let Some(flat) = Self::flat(view, index) else {
            return Ok(None);
        };
        self.check(view, flat)?;
        Ok(Some(storage::get(
            view.dtype,
            &self.buffers[view.buffer],
            flat,
        )))
    }

    /// Write `code` at `index` unless masked.
    pub fn write(&mut self, view: &GlobalView, index: &[i64], code: u32) -> Result<(), String> {
        let Some(flat) = Self::flat(view, index) else {
            return Ok(());
        };
        self.check(view, flat)?;
        storage::set(view.dtype, &mut self.buffers[view.buffer], flat, code);
        Ok(())
    }
}

/// A shared tensor: where its allocation starts, and where its first element is inside it.
#[derive(Clone, Debug)]
pub(super) struct SharedView {
    /// Byte address of the allocation.
    pub alloc: usize,
    /// Unswizzled element offset of element `[0, ..]` inside the allocation.
    pub base: usize,
    pub dtype: DType,
    pub layout: SharedLayout,
}

impl SharedView {
    /// Element offset from the allocation start, and the bytes the element touches.
    fn locate(&self, index: &[usize]) -> (usize, std::ops::Range<usize>) {
        let off = element_offset(&self.layout, self.base, index);
        let bits = self.dtype.bits() as usize;
        let first = self.alloc * 8 + off * bits;
        (off, first / 8..(first + bits).div_ceil(8))
    }
}

/// Who touched a byte last (thread numbers are the block's).
const NOBODY: u16 = u16::MAX;
const SEVERAL: u16 = u16::MAX - 1;
const ASYNC: u16 = u16::MAX - 2;
const ATOMIC: u16 = u16::MAX - 3;
/// Role bits of an access whose role is not known any more (before a region, unordered).
const ALL_ROLES: u8 = u8::MAX;
/// The issuer of an asynchronous copy: no thread in particular.
const NO_THREAD: usize = usize::MAX;

struct AsyncCopy {
    view: SharedView,
    /// (element offset from the allocation start, code).
    writes: Vec<(usize, u32)>,
    bytes: Vec<usize>,
}

/// A `tma_load` in flight: its copy, and the barrier (byte address) and phase it completes.
struct TmaCopy {
    copy: AsyncCopy,
    barrier: usize,
    phase: u64,
}

/// The `cp.async` copies of one role (the block's, outside a region): per thread on the GPU,
/// so one role's `wait_group` retires only its own.
#[derive(Default)]
pub(super) struct CopyGroups {
    /// Copies issued since the last commit.
    pending: Vec<AsyncCopy>,
    /// Committed groups, oldest first.
    groups: VecDeque<Vec<AsyncCopy>>,
}

/// One block's shared memory.
#[derive(Default)]
pub(super) struct SharedMem {
    bytes: Vec<u8>,
    written: Vec<bool>,
    writer: Vec<u16>,
    reader: Vec<u16>,
    in_flight: Vec<u16>,
    /// In-flight `dot_async` reads of each byte (retired by `dot_wait`).
    dot_reads: Vec<u16>,
    /// In-flight `tma_store` reads of each byte (retired by `tma_store_wait`).
    store_reads: Vec<u16>,
    /// The running role's `cp.async` groups.
    copies: CopyGroups,
    /// `tma_load`s not yet seen complete by an `mbarrier_wait`.
    tma: Vec<TmaCopy>,
    /// The mbarriers, by byte address.
    pub barriers: std::collections::HashMap<usize, super::barrier::Barrier>,
    /// When each byte was last written and last read, and the role bits of the accesses.
    write_time: Vec<u64>,
    read_time: Vec<u64>,
    write_roles: Vec<u8>,
    read_roles: Vec<u8>,
    /// The clock: every synchronizing event advances it (64 bits: no run reaches the end).
    now: u64,
    /// The roles' thread ranges (one role, all threads, outside a region) and the running one.
    roles: Vec<std::ops::Range<usize>>,
    role: usize,
    /// `seen[r][q]`: role `q`'s accesses up to this time are ordered before role `r`'s.
    seen: Vec<Vec<u64>>,
}

fn who(w: u16) -> String {
    match w {
        SEVERAL => "several threads".to_string(),
        ASYNC => "a cp.async".to_string(),
        ATOMIC => "atomics".to_string(),
        t => format!("thread {t}"),
    }
}

impl SharedMem {
    /// Reserve `bytes` (already a multiple of 16); returns the start address.
    pub fn alloc(&mut self, bytes: usize) -> usize {
        let start = self.bytes.len();
        let end = start + bytes;
        self.bytes.resize(end, 0);
        self.written.resize(end, false);
        self.writer.resize(end, NOBODY);
        self.reader.resize(end, NOBODY);
        self.in_flight.resize(end, 0);
        self.dot_reads.resize(end, 0);
        self.store_reads.resize(end, 0);
        self.write_time.resize(end, 0);
        self.read_time.resize(end, 0);
        self.write_roles.resize(end, 0);
        self.read_roles.resize(end, 0);
        start
    }

    /// The block's threads are one role (the start of every block).
    pub fn one_role(&mut self, threads: usize) {
        self.roles = std::iter::once(0..threads).collect();
        self.role = 0;
        self.seen = vec![vec![0]];
        self.now = self.now.max(1);
    }

    /// Enter a `specialize!` region whose roles hold `roles` (block thread ranges): each role
    /// has seen what the block had seen; accesses not ordered by then lose their role.
    pub fn enter_roles(&mut self, roles: Vec<std::ops::Range<usize>>) {
        let barrier = self.seen[self.role][self.role];
        for b in 0..self.bytes.len() {
            if self.write_time[b] > barrier {
                self.write_roles[b] = ALL_ROLES;
            }
            if self.read_time[b] > barrier {
                self.read_roles[b] = ALL_ROLES;
            }
        }
        self.seen = vec![vec![barrier; roles.len()]; roles.len()];
        self.roles = roles;
        self.role = 0;
    }

    /// The running role's `cp.async` groups, leaving none.
    pub fn take_copy_groups(&mut self) -> CopyGroups {
        std::mem::take(&mut self.copies)
    }

    /// Exchange the running role's `cp.async` groups with `other`.
    pub fn swap_copy_groups(&mut self, other: &mut CopyGroups) {
        std::mem::swap(&mut self.copies, other);
    }

    /// Run as role `r` from here on.
    pub fn switch_role(&mut self, r: usize) {
        self.role = r;
    }

    /// The block thread of the running role's thread `t`.
    fn thread(&self, t: usize) -> usize {
        self.roles[self.role].start + t
    }

    fn role_bit(&self) -> u8 {
        1 << self.role.min(7)
    }

    fn tick(&mut self) -> u64 {
        let t = self.now;
        self.now += 1;
        t
    }

    /// Whether an access by block thread `t` (or [`NO_THREAD`]) of the running role is not
    /// ordered after one by `who`, at `time`, of the roles in `bits`.
    fn unordered(&self, t: usize, who: u16, time: u64, bits: u8) -> bool {
        if who == NOBODY || who as usize == t {
            return false;
        }
        let seen = &self.seen[self.role];
        (0..seen.len()).any(|q| (q >= 8 || bits & (1 << q) != 0) && time > seen[q])
    }

    /// Record a read of byte `b` by block thread `t` (several unordered readers merge).
    fn note_read(&mut self, t: usize, b: usize) {
        let (who, time, bits) = (self.reader[b], self.read_time[b], self.read_roles[b]);
        if who == NOBODY || !self.unordered(t, who, time, bits) {
            self.reader[b] = t as u16;
            self.read_roles[b] = self.role_bit();
        } else {
            self.reader[b] = if who as usize == t { who } else { SEVERAL };
            self.read_roles[b] |= self.role_bit();
        }
        self.read_time[b] = self.now;
    }

    fn note_write(&mut self, who: u16, b: usize) {
        self.writer[b] = who;
        self.write_time[b] = self.now;
        self.write_roles[b] = self.role_bit();
    }

    /// Thread `t` reads `index` of `view` (named `name` in messages).
    pub fn read(
        &mut self,
        t: usize,
        view: &SharedView,
        name: &str,
        index: &[usize],
    ) -> Result<u32, String> {
        let t = self.thread(t);
        let (off, bytes) = view.locate(index);
        for b in bytes {
            if self.in_flight[b] > 0 {
                return Err(format!("read of shared tensor `{name}` at {index:?} while an asynchronous copy into it is in flight; missing wait_group or mbarrier_wait?"));
            }
            if !self.written[b] {
                return Err(format!("read of shared tensor `{name}` at {index:?}, which was never written (uninitialised shared memory)"));
            }
            let w = self.writer[b];
            if self.unordered(t, w, self.write_time[b], self.write_roles[b]) {
                return Err(match w {
                    ASYNC => format!("race on shared tensor `{name}`: thread {t} reads {index:?}, which a cp.async filled, but no synchronize followed the wait_group that completed it; missing synchronize?"),
                    w => format!("race on shared tensor `{name}`: thread {t} reads {index:?}, which {} wrote since the last synchronize; missing synchronize{}?", who(w), self.hint()),
                });
            }
            self.note_read(t, b);
        }
        Ok(storage::get(view.dtype, &self.bytes[view.alloc..], off))
    }

    /// An in-flight read of `index` of `view` by a `dot_async`: the checks of [`Self::read`]
    /// now, the read itself (for the race checks) when [`Self::retire_dot_read`] retires it.
    /// Returns the code and the bytes read.
    pub fn dot_read(
        &mut self,
        t: usize,
        view: &SharedView,
        name: &str,
        index: &[usize],
    ) -> Result<(u32, std::ops::Range<usize>), String> {
        let code = self.read(t, view, name, index)?;
        let (_, bytes) = view.locate(index);
        for b in bytes.clone() {
            // `read` marked it read now; the tensor cores read it until the dot_wait.
            self.dot_reads[b] += 1;
        }
        Ok((code, bytes))
    }

    /// A `dot_wait` retired thread `t`'s in-flight read of `bytes`: from here on it counts as a
    /// read by `t` since the last barrier.
    pub fn retire_dot_read(&mut self, t: usize, bytes: std::ops::Range<usize>) {
        let t = self.thread(t);
        for b in bytes {
            self.dot_reads[b] -= 1;
            self.note_read(t, b);
        }
    }

    /// Thread `t` writes `code` at `index` of `view`.
    pub fn write(
        &mut self,
        t: usize,
        view: &SharedView,
        name: &str,
        index: &[usize],
        code: u32,
    ) -> Result<(), String> {
        let t = self.thread(t);
        let (off, bytes) = view.locate(index);
        for b in bytes {
            if self.in_flight[b] > 0 {
                return Err(format!("write to shared tensor `{name}` at {index:?} while a cp.async into it is in flight; missing wait_group?"));
            }
            if self.dot_reads[b] > 0 {
                return Err(format!("write to shared tensor `{name}` at {index:?} while a dot_async reading it is in flight; missing dot_wait?"));
            }
            if self.store_reads[b] > 0 {
                return Err(format!("write to shared tensor `{name}` at {index:?} while a tma_store reading it is in flight; missing tma_store_wait?"));
            }
            if self.unordered(t, self.writer[b], self.write_time[b], self.write_roles[b]) {
                // Sub-byte stores are read-modify-writes of whole bytes on the GPU.
                let hint = if !view.dtype.bits().is_multiple_of(8) {
                    " (sub-byte elements of different threads share a byte)"
                } else {
                    ""
                };
                return Err(format!("race on shared tensor `{name}`: thread {t} writes {index:?}, which {} wrote since the last synchronize{hint}; missing synchronize{}?", who(self.writer[b]), self.hint()));
            }
            if self.unordered(t, self.reader[b], self.read_time[b], self.read_roles[b]) {
                return Err(format!("race on shared tensor `{name}`: thread {t} overwrites {index:?}, which {} read since the last synchronize; missing synchronize{}?", who(self.reader[b]), self.hint()));
            }
            self.note_write(t as u16, b);
            self.written[b] = true;
        }
        storage::set(view.dtype, &mut self.bytes[view.alloc..], off, code);
        Ok(())
    }

    /// Thread `t` atomically replaces the code at `index` of `view` by `update(old)`; returns
    /// the old code.
    pub fn atomic(
        &mut self,
        t: usize,
        view: &SharedView,
        name: &str,
        index: &[usize],
        update: impl FnOnce(u32) -> Result<u32, String>,
    ) -> Result<u32, String> {
        let t = self.thread(t);
        let (off, bytes) = view.locate(index);
        for b in bytes.clone() {
            if self.in_flight[b] > 0 {
                return Err(format!("atomic on shared tensor `{name}` at {index:?} while a cp.async into it is in flight; missing wait_group?"));
            }
            if self.dot_reads[b] > 0 {
                return Err(format!("atomic on shared tensor `{name}` at {index:?} while a dot_async reading it is in flight; missing dot_wait?"));
            }
            if self.store_reads[b] > 0 {
                return Err(format!("atomic on shared tensor `{name}` at {index:?} while a tma_store reading it is in flight; missing tma_store_wait?"));
            }
            if !self.written[b] {
                return Err(format!("atomic on shared tensor `{name}` at {index:?}, which was never written (uninitialised shared memory)"));
            }
            let w = self.writer[b];
            if w != ATOMIC && self.unordered(t, w, self.write_time[b], self.write_roles[b]) {
                return Err(format!("race on shared tensor `{name}`: thread {t} updates {index:?} atomically, which {} wrote since the last synchronize; missing synchronize{}?", who(w), self.hint()));
            }
            if self.unordered(t, self.reader[b], self.read_time[b], self.read_roles[b]) {
                return Err(format!("race on shared tensor `{name}`: thread {t} updates {index:?} atomically, which {} read since the last synchronize; missing synchronize{}?", who(self.reader[b]), self.hint()));
            }
        }
        let old = storage::get(view.dtype, &self.bytes[view.alloc..], off);
        let new = update(old)?;
        storage::set(view.dtype, &mut self.bytes[view.alloc..], off, new);
        for b in bytes {
            if self.writer[b] == ATOMIC
                && self.unordered(t, ATOMIC, self.write_time[b], self.write_roles[b])
            {
                // Atomics of several roles: the record keeps every one of them.
                self.write_roles[b] |= self.role_bit();
                self.write_time[b] = self.now;
            } else {
                self.note_write(ATOMIC, b);
            }
        }
        Ok(old)
    }

    /// Issue a cp.async writing `codes` (row-major over `view`'s shape) into `view`.
    pub fn copy_async(
        &mut self,
        view: &SharedView,
        name: &str,
        codes: impl Iterator<Item = (Vec<usize>, u32)>,
    ) -> Result<(), String> {
        let copy = self.issue_async(view, name, codes, "a cp.async")?;
        self.copies.pending.push(copy);
        Ok(())
    }

    /// Issue a `tma_load` like [`Self::copy_async`], completing with `phase` of the barrier at
    /// byte address `barrier`.
    pub fn tma_load(
        &mut self,
        view: &SharedView,
        name: &str,
        codes: impl Iterator<Item = (Vec<usize>, u32)>,
        barrier: usize,
        phase: u64,
    ) -> Result<(), String> {
        let copy = self.issue_async(view, name, codes, "a tma_load")?;
        self.tma.push(TmaCopy {
            copy,
            barrier,
            phase,
        });
        Ok(())
    }

    /// An `mbarrier_wait` saw the barrier at `barrier` complete every phase before `phase`:
    /// the copies of those phases land, visible to every thread.
    pub fn tma_complete(&mut self, barrier: usize, phase: u64) {
        let (done, rest): (Vec<TmaCopy>, Vec<TmaCopy>) = std::mem::take(&mut self.tma)
            .into_iter()
            .partition(|c| c.barrier == barrier && c.phase < phase);
        self.tma = rest;
        for c in done {
            let dst = &mut self.bytes[c.copy.view.alloc..];
            for (off, code) in c.copy.writes {
                storage::set(c.copy.view.dtype, dst, off, code);
            }
            for b in c.copy.bytes {
                self.in_flight[b] -= 1;
                self.written[b] = true;
                self.note_write(NOBODY, b);
            }
        }
    }

    /// `tma_load`s that no `mbarrier_wait` saw complete.
    pub fn tma_in_flight(&self) -> usize {
        self.tma.len()
    }

    /// The checks of an asynchronous copy into `view` and its in-flight bytes.
    fn issue_async(
        &mut self,
        view: &SharedView,
        name: &str,
        codes: impl Iterator<Item = (Vec<usize>, u32)>,
        what: &str,
    ) -> Result<AsyncCopy, String> {
        let mut writes = Vec::new();
        let mut bytes = Vec::new();
        for (index, code) in codes {
            let (off, range) = view.locate(&index);
            for b in range {
                if self.in_flight[b] > 0 {
                    return Err(format!("{what} into shared tensor `{name}` at {index:?} overlaps an earlier asynchronous copy still in flight; missing wait_group or mbarrier_wait?"));
                }
                if self.dot_reads[b] > 0 {
                    return Err(format!("{what} into shared tensor `{name}` at {index:?} while a dot_async reading it is in flight; missing dot_wait?"));
                }
                if self.store_reads[b] > 0 {
                    return Err(format!("{what} into shared tensor `{name}` at {index:?} while a tma_store reading it is in flight; missing tma_store_wait?"));
                }
                if self.unordered(
                    NO_THREAD,
                    self.reader[b],
                    self.read_time[b],
                    self.read_roles[b],
                ) {
                    return Err(format!("race on shared tensor `{name}`: {what} overwrites {index:?}, which {} read since the last synchronize; missing synchronize{}?", who(self.reader[b]), self.hint()));
                }
                if self.unordered(
                    NO_THREAD,
                    self.writer[b],
                    self.write_time[b],
                    self.write_roles[b],
                ) {
                    return Err(format!("race on shared tensor `{name}`: {what} overwrites {index:?}, which {} wrote since the last synchronize; missing synchronize{}?", who(self.writer[b]), self.hint()));
                }
                bytes.push(b);
            }
            writes.push((off, code));
        }
        // A byte shared by two elements of the same copy is one in-flight byte.
        bytes.sort_unstable();
        bytes.dedup();
        for &b in &bytes {
            self.in_flight[b] += 1;
        }
        Ok(AsyncCopy {
            view: view.clone(),
            writes,
            bytes,
        })
    }

    pub fn commit(&mut self) {
        let group = std::mem::take(&mut self.copies.pending);
        self.copies.groups.push_back(group);
    }

    /// Retire the oldest committed groups until at most `n` are in flight. Uncommitted copies
    /// stay in flight, as with `cp.async.wait_group`.
    pub fn wait(&mut self, n: usize) {
        while self.copies.groups.len() > n {
            for copy in self.copies.groups.pop_front().expect("non-empty") {
                let dst = &mut self.bytes[copy.view.alloc..];
                for (off, code) in copy.writes {
                    storage::set(copy.view.dtype, dst, off, code);
                }
                for b in copy.bytes {
                    self.in_flight[b] -= 1;
                    self.written[b] = true;
                    self.note_write(ASYNC, b);
                }
            }
        }
    }

    /// A `tma_store` reads `index` of `view` (after the block synchronized): the checks of
    /// [`Self::read`], and the bytes stay in flight until [`Self::retire_store_reads`].
    pub fn store_read(
        &mut self,
        view: &SharedView,
        name: &str,
        index: &[usize],
    ) -> Result<u32, String> {
        let code = self.read(0, view, name, index)?;
        let (_, bytes) = view.locate(index);
        for b in bytes {
            self.store_reads[b] += 1;
        }
        Ok(code)
    }

    /// A `tma_store_wait`: every `tma_store` has read its source.
    pub fn retire_store_reads(&mut self) {
        self.store_reads.fill(0);
    }

    /// A barrier of the running role's threads (the block's outside a region): every access
    /// of the role so far is ordered before its next ones.
    pub fn synchronize(&mut self) {
        let t = self.tick();
        let r = self.role;
        self.seen[r][r] = t;
    }

    /// The running role arrives on an mbarrier: what it has seen and its own accesses so far
    /// join the clock `phase` the barrier's current phase carries.
    pub fn release(&mut self, phase: &mut Vec<u64>) {
        let t = self.tick();
        let r = self.role;
        phase.resize(self.seen.len(), 0);
        for (q, p) in phase.iter_mut().enumerate() {
            let known = if q == r { t } else { self.seen[r][q] };
            *p = (*p).max(known);
        }
    }

    /// The running role saw a barrier phase complete that carried `phase`.
    pub fn acquire(&mut self, phase: &[u64]) {
        let r = self.role;
        for (q, &p) in phase.iter().enumerate().take(self.seen.len()) {
            self.seen[r][q] = self.seen[r][q].max(p);
        }
    }

    /// How a missing order is fixed, in messages.
    fn hint(&self) -> &'static str {
        if self.roles.len() > 1 {
            " (or, between roles, an mbarrier_arrive before and an mbarrier_wait after)"
        } else {
            ""
        }
    }

    /// Read without any check (for `print`).
    pub fn peek(&self, view: &SharedView, index: &[usize]) -> u32 {
        let (off, _) = view.locate(index);
        storage::get(view.dtype, &self.bytes[view.alloc..], off)
    }
}
