// 2 x BM x 8192 f32 of shared memory: over 227 KiB only when BM >= 4.
#[tilus::kernel(grid = [1], warps = 4, space(BM = [1, 2, 4, 8], STAGES = [2]))]
fn k<const BM: i32, const STAGES: i32>(a: Global<f32>) {
    let s = shared::<f32>([STAGES, BM, 8192]);
    sync();
}

fn main() {}
