//! Host-side data parallelism for the offline weight transforms (quantization, re-layout): a
//! 470M-element weight takes tens of seconds on one core.

/// Call `f(i, chunk)` for every `chunk_len`-element chunk `i` of `data` (the last one may be
/// shorter), on all CPU cores. Each worker takes a contiguous run of chunks, so the result is
/// the same as a sequential loop whenever `f` depends only on its own arguments.
pub(crate) fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk_len: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let chunk_len = chunk_len.max(1);
    let chunks = data.len().div_ceil(chunk_len);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(chunks);
    if workers <= 1 {
        data.chunks_mut(chunk_len)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
        return;
    }
    let per_worker = chunks.div_ceil(workers);
    let f = &f;
    std::thread::scope(|scope| {
        for (w, run) in data.chunks_mut(per_worker * chunk_len).enumerate() {
            scope.spawn(move || {
                for (j, c) in run.chunks_mut(chunk_len).enumerate() {
                    f(w * per_worker + j, c);
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_once_with_its_index() {
        for (len, chunk) in [(0, 3), (1, 1), (10, 3), (1000, 7), (64, 64), (5, 100)] {
            let mut data = vec![usize::MAX; len];
            for_each_chunk_mut(&mut data, chunk, |i, c| {
                for (j, v) in c.iter_mut().enumerate() {
                    *v = i * chunk + j;
                }
            });
            assert_eq!(
                data,
                (0..len).collect::<Vec<_>>(),
                "len {len} chunk {chunk}"
            );
        }
    }
}
