#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let x: i32 = 3;
    loop {}
    if m > 0 {
        return;
    }
    let v = vec![1, 2];
    let c = async |y: i32| y + 1;
}

fn main() {}
