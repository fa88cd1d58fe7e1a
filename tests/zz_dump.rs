#[test]
fn dump() {
    use tilus::kernels::attention::cq_kernel::attention_decode_cq;
    for tw in [16, 32] {
        let cfg = attention_decode_cq::Config { D: 128, V: 4, NW: 4, TW: tw, STAGES: 4, PG: 0, A: tilus::DType::F16 };
        let p = attention_decode_cq::program(&cfg).unwrap();
        let src = tilus::core::codegen::emit(&p, &Default::default()).unwrap().source;
        std::fs::write(format!("/tmp/cq_{tw}.cu"), &src).unwrap();
        let ptx = tilus::runtime::compile_ptx(&src, "sm_90a").unwrap();
        std::fs::write(format!("/tmp/cq_{tw}.ptx"), &ptx).unwrap();
    }
}
