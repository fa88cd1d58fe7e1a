#[tilus::kernel(grid = [1], warps = 1, dtypes(W = [i4, i9, q8]))]
fn k<W: DTypeParam>(a: Global<u8>) {
    sync();
}

fn main() {}
