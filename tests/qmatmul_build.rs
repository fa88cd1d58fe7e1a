//! Every default configuration builds and passes the verifier (layouts, the mma plan of the
//! dot, broadcasts, shared memory), for every weight type, activation type and group size.

use tilus::kernels::qmatmul::weight_types;
use tilus::kernels::qmatmul::*;
use tilus::DType;

#[test]
fn every_default_config_builds_and_verifies() {
    for wd in weight_types() {
        for ad in [DType::F16, DType::BF16] {
            for g in [Some(32), Some(64), Some(128), None] {
                let z = matches!(wd, DType::UInt(_));
                let cfg = QMatmulConfig::default_for(wd, ad, g, z);
                let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
                // Without split-k, no semaphore and no fence.
                assert!(!kernel.main.to_string().contains("fence()"));
            }
        }
    }
}
