// Helper functions: each mistake is reported at the user's tokens, once.
#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, s: f32, a: Global<f32>) {
    fn twice(t: Tensor) -> Tensor {
        t + t
    }
    fn scaled(t: Tensor, by: f32) -> Tensor {
        t * by
    }
    fn forever(t: Tensor) -> Tensor {
        forever(t)
    }
    fn add(t: Tensor) -> Tensor {
        t
    }
    fn bad(mut t: Tensor, v: Vec<i32>) {}
    let r = load_global(view_global(a, [m]), layout!(spatial(32)), [0]);
    let x = twice(r, r);
    let y = scaled(r, m);
    let z = forever(r);
    let (p, q) = twice(r);
}

fn main() {}
