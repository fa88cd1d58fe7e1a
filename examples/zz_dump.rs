fn main() {
    use tilus::kernels::attention::kernel::attention_decode;
    let kv = std::env::args().nth(1).unwrap();
    for cfg in attention_decode::SPACE {
        if cfg.QUANT == 1
            && cfg.D == 128
            && cfg.PAGED == 1
            && cfg.PART == 1
            && cfg.A == tilus::DType::F16
            && cfg.KV.to_string() == kv
        {
            println!("{}", attention_decode::source(cfg).unwrap());
            return;
        }
    }
}
