// Each thread holds 3 bytes (24 bits) but the i6 view asks for 8 x 6 = 48 bits.
#[tilus::kernel(grid = [1], warps = 4)]
fn k(b: Global<u8>) {
    let gb = view_global(b, [384]);
    let bytes = load_global(gb, layout!(local(3).spatial(128)), [0]);
    let w = view::<i6>(bytes, layout!(local(8).spatial(128)));
    print(w);
}

fn main() {}
