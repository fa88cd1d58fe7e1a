// After a failed binding, its uses stay quiet: every mistake is reported once, and nothing else.
#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, a: Global<f32>, out: GlobalMut<f32>) {
    // A helper whose declaration fails: its calls and their results are poisoned.
    fn split(t: Vec<f32>) -> (Tensor, Tensor) {
        (t, t)
    }
    // A helper whose body fails: reported once, however often it is called.
    fn halve(t: Tensor) -> (Tensor, Tensor) {
        let h = t * hafl;
        (h, h)
    }
    let ga = view_global(a, [m]);
    let go = view_global(out, [m]);
    let x = load_global(ga, layout!(spatial(32)), [0]);
    let (p, q) = split(x);
    let (u, v) = halve(x);
    let (u2, v2) = halve(p);
    // Assigning a failed helper's results to existing tensors.
    let mut y = load_global(ga, layout!(spatial(32)), [0]);
    let mut z = y;
    (y, z) = halve(y);
    (y, z) = split(z);
    // A layout whose definition fails, used twice.
    let l = layout!(spatial(32).local(m));
    let w = load_global(ga, l, [0]);
    let w2 = load_global(ga, l, [32]);
    // A tensor whose definition fails: its reassignments and uses are quiet.
    let mut acc = register::<f32>(layout!(spatail(32)), 0.0);
    acc = acc + p;
    acc += u;
    acc = exp(acc);
    // A failing right-hand side leaves the tensor as it was.
    let mut s = register::<f32>(layout!(spatial(32)), 0.0);
    s = s + undefined;
    s += q * v2;
    store_global(acc + s + u + v + u2 + y + z + w + w2, go, [0]);
}

fn main() {}
