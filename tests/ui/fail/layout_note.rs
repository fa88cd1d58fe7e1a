// A verifier error about a layout variable says where the variable was defined.
#[tilus::kernel(grid = [1], warps = 1, space(BM = [16, 32]))]
fn k<const BM: i32>(m: i32, a: Global<f32>) {
    let ga = view_global(a, [m, 16]);
    let wide = layout!(spatial(BM, 16));
    let rows = layout!(
        local(2, 1)
            .spatial(8, 8)
    );
    // The layouts span more threads than the block has.
    let r = load_global(ga, wide, [0, 0]);
    let s = register::<f32>(rows, 0.0);
    // Composed from a variable: the note names it too.
    let t = load_global(ga, layout!(local(2, 1).wide), [0, 0]);
    print(r);
    print(s);
    print(t);
}

fn main() {}
