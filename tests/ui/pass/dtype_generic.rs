// A kernel generic over a weight type, instantiated per listed dtype.
use tilus::DType;

#[tilus::kernel(grid = [n / BN], warps = 1, space(BN = [128, 256]), dtypes(W = [i4, u4, i6, f6e3m2]))]
pub fn dequant<const BN: i32, W: DTypeParam>(n: i32, w: Global<u8>, out: GlobalMut<f16>) {
    let [bj] = block_indices();
    let nb = BN * W::BITS / 8 / 32; // bytes per thread (BN values of W over 32 threads)
    let gw = view_global(w, [n / BN, BN * W::BITS / 8]);
    let bytes = load_global(gw, layout!(spatial(32).local(nb)), [bj, 0]);
    let values = view::<W>(bytes, layout!(spatial(32).local(BN / 32)));
    store_global(cast::<f16>(values), view_global(out, [n]), [bj * BN]);
}

fn main() {
    assert_eq!(dequant::SPACE.len(), 8);
    let cfg = dequant::Config { BN: 128, W: DType::Int(4) };
    assert!(cfg.index().is_some());
    let w = vec![0x21u8; 64];
    let mut out = vec![tilus::prelude::f16::ZERO; 128];
    dequant::interpret(&cfg, 128, &w, &mut out).unwrap();
    assert_eq!(out[0].to_f32(), 1.0);
    assert_eq!(out[1].to_f32(), 2.0);
}
