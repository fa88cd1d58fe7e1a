// A tile whose layout spans fewer threads than the block, used by nothing wider: every warp
// loads, computes and stores the same elements. `#[kernel]` warns (a `deprecated` warning, made
// an error here so that the test sees it).
#![deny(deprecated)]

#[tilus::kernel(grid = [1], warps = 2, space(BM = [16, 32]))]
fn k<const BM: i32>(m: i32, a: Global<f32>, w: Global<f32>, out: GlobalMut<f32>) {
    let ga = view_global(a, [m, 32]);
    let go = view_global(out, [m, 32]);
    // 32 of 64 threads when BM = 16: warned.
    let x = load_global(ga, layout!(local(1, 4).spatial(BM / 4, 8)), [0, 0]);
    store_global(x * 2.0, go, [0, 0]);
    // Intended copies: not warned.
    #[allow(replicated)]
    let y = load_global(ga, layout!(local(1, 4).spatial(4, 8)), [0, 0]);
    store_global(y, go, [0, 0]);
    // A vector broadcast to every row: not warned.
    let tile = layout!(local(1, 4).spatial(8, 8));
    let gw = view_global(w, [1, 32]);
    let v = load_global(gw, layout!(local(1, 4).spatial(1, 8)), [0, 0]);
    let full = load_global(ga, tile, [0, 0]);
    store_global(full * v, go, [0, 0]);
    // Copies only printed: warned. (Copies used by a wider computation, such as an mma operand
    // shared by the warps that split `N`, are a broadcast: examples/fig2.rs builds silently.)
    let z = register::<f32>(layout!(local(2, 4).spatial(4, 8)), 1.0);
    print(z);
}

fn main() {}
