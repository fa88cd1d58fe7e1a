//! Every default configuration builds and passes the verifier (layouts, the mma plan of the
//! dot, broadcasts, shared memory), for every weight type, activation type and group size.

use tilus::kernels::qmatmul::*;
use tilus::DType;

fn weight_types() -> Vec<DType> {
    [
        "u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "i2", "i3", "i4", "i5", "i6", "i7", "i8",
        "f3e1m1", "f4e2m1", "f5e2m2", "f5e3m1", "f6e3m2", "f6e2m3", "f7e3m3", "f7e4m2", "f8e4m3",
        "f8e5m2",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect()
}

#[test]
fn every_default_config_builds_and_verifies() {
    for wd in weight_types() {
        for ad in [DType::F16, DType::BF16] {
            for g in [Some(32), Some(64), Some(128), None] {
                let z = matches!(wd, DType::UInt(_));
                let cfg = QMatmulConfig::default_for(wd, ad, g, z);
                let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
                assert!(kernel.reduce.is_none());
            }
        }
    }
}
