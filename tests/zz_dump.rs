#[test]
fn dump() {
    use tilus::kernels::vq::kernel::vq_gemv;
    use tilus::kernels::vq::linear::{default_cache, kernel_config, warps_for};
    use tilus::vq::VqConfig;
    for (c, name) in [(VqConfig::GPTVQ_2, "g"), (VqConfig::AQLM_3, "a")] {
        let w = warps_for(c, 57344, 8192);
        let cfg = kernel_config(c, default_cache(c), w, (57344, 8192), 3, 4);
        let p = vq_gemv::program(&cfg).unwrap();
        let src = tilus::core::codegen::emit(&p, &Default::default())
            .unwrap()
            .source;
        std::fs::write(format!("/tmp/vq_{name}.cu"), &src).unwrap();
        let ptx = tilus::runtime::compile_ptx(&src, "sm_90a").unwrap();
        std::fs::write(format!("/tmp/vq_{name}.ptx"), &ptx).unwrap();
    }
}
