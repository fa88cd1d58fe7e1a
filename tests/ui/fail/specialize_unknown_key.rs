#[tilus::kernel(grid = [cdiv(n, 384)], warps = 12)]
fn k(n: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let gx = view_global(x, [n]);
    let gy = view_global(y, [n]);
    specialize! {
        role(warps = 4, regs = 40) => {
            store_global(load_global(gx, layout!(spatial(128)), [bi * 384]), gy, [bi * 384]);
        }
        role(warps = 8, registers = 232) => {
            let r = load_global(gx, layout!(spatial(256)), [bi * 384 + 128]);
            store_global(r, gy, [bi * 384 + 128]);
        }
    }
}

fn main() {}
