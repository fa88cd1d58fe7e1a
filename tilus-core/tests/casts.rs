//! Casts through the public API: plans, CUDA text, host twin and scalar expressions.
//!
//! The exhaustive checks live next to the code (`codegen::cast::tests`); these tests use only
//! what the rest of the workspace can use. `cast_gpu_bundle` (ignored) writes a self-checking
//! CUDA program that runs every plan and every scalar expression on a GPU and compares the
//! results bit for bit with the host twin (see its doc comment).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt::Write as _;
use tilus_core::codegen::cast::{
    cast_op_count, cast_plan, cast_source, decode_to_f32_expr, encode_from_f32_expr, host_cast,
    host_decode_to_f32, host_encode_from_f32, CastPlan,
};
use tilus_core::DType;

fn packed_sources() -> Vec<DType> {
    DType::all().filter(|d| d.bits() <= 8).collect()
}

fn pack(bits: u32, codes: &[u32]) -> Vec<u32> {
    let mut words = vec![0u32; (codes.len() * bits as usize).div_ceil(32)];
    for (j, &c) in codes.iter().enumerate() {
        for k in 0..bits as usize {
            let bit = j * bits as usize + k;
            words[bit / 32] |= ((c >> k) & 1) << (bit % 32);
        }
    }
    words
}

fn lane_value(dst: DType, bits: u16) -> f64 {
    match dst {
        DType::F16 => half::f16::from_bits(bits).to_f64(),
        DType::BF16 => half::bf16::from_bits(bits).to_f64(),
        _ => unreachable!(),
    }
}

#[test]
fn cast_public_api_round_trip_through_dtype() {
    let mut rng = StdRng::seed_from_u64(rand::random());
    for src in packed_sources() {
        for dst in [DType::F16, DType::BF16] {
            let Some(plan) = cast_plan(src, dst) else {
                // Only generic floats with 5+ exponent bits lack an exact f16 path.
                assert_eq!(dst, DType::F16, "{src}");
                assert!(matches!(src, DType::Float { exp, .. } if exp >= 5), "{src}");
                continue;
            };
            assert_eq!(plan.fn_name, format!("tilus_cast_{src}_to_{dst}"));
            assert!(cast_source(&plan).contains(&plan.fn_name));
            assert!(cast_op_count(&plan) > 0);
            let groups = 5;
            let codes: Vec<u32> = (0..groups * plan.group)
                .map(|_| rng.random_range(0..1u32 << src.bits()))
                .collect();
            let out = host_cast(&plan, &pack(src.bits(), &codes));
            assert_eq!(out.len(), groups * plan.out_words);
            for (j, &c) in codes.iter().enumerate() {
                let bits = (out[j / 2] >> (16 * (j % 2))) as u16;
                let (got, want) = (lane_value(dst, bits), src.decode(c));
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{src} -> {dst}: code {c:#x} gave {got}, want {want}"
                );
            }
        }
    }
}

#[test]
fn cast_scalar_public_api_matches_dtype() {
    for d in packed_sources() {
        for c in 0..1u32 << d.bits() {
            let v = host_decode_to_f32(d, c);
            let want = d.decode(c);
            assert!(v.to_bits() == (want as f32).to_bits() || (v.is_nan() && want.is_nan()));
            if v.is_finite() {
                assert_eq!(d.decode(host_encode_from_f32(d, v)), v as f64, "{d} {c:#x}");
            }
        }
        assert!(!decode_to_f32_expr(d, "code").is_empty());
        assert!(!encode_from_f32_expr(d, "value").is_empty());
    }
}

/// Plans concatenate into one translation unit: distinct names, no shared helpers.
#[test]
fn cast_sources_concatenate() {
    let mut all = String::new();
    let mut names = Vec::new();
    for src in packed_sources() {
        for dst in [DType::F16, DType::BF16] {
            if let Some(p) = cast_plan(src, dst) {
                all.push_str(&cast_source(&p));
                names.push(p.fn_name);
            }
        }
    }
    for n in &names {
        assert_eq!(all.matches(&format!("void {n}(")).count(), 1, "{n}");
    }
}

fn probes(d: DType, rng: &mut StdRng) -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        -f32::MAX,
        f32::from_bits(1),
        1.5,
        2.5,
        -2.5,
        65504.0,
        65520.0,
    ];
    if d.bits() <= 16 {
        let mut vals: Vec<f64> = (0..1u32 << d.bits())
            .map(|c| d.decode(c))
            .filter(|x| x.is_finite())
            .collect();
        vals.sort_by(f64::total_cmp);
        vals.dedup();
        let step = (vals.len() / 2000).max(1);
        for w in vals.windows(2).step_by(step) {
            let mid = ((w[0] + w[1]) / 2.0) as f32;
            v.extend([w[0] as f32, mid, mid.next_up(), mid.next_down()]);
        }
    }
    for _ in 0..4000 {
        v.push(f32::from_bits(rng.random()));
        let e: i32 = rng.random_range(-30..20);
        v.push(rng.random_range(-1.0f32..1.0) * 2f32.powi(e));
    }
    v
}

fn push_words(buf: &mut Vec<u8>, words: &[u32]) {
    for w in words {
        buf.extend_from_slice(&w.to_le_bytes());
    }
}

/// Writes `casts_gpu.cu` and `casts_gpu.bin` into `$TILUS_CAST_GPU_DIR` (default: the system
/// temp dir). Build and run on a GPU machine with
/// `nvcc -std=c++17 -arch=sm_90a -o casts_gpu casts_gpu.cu && ./casts_gpu casts_gpu.bin`;
/// it prints one line per check and `ALL OK` when every GPU result equals the host twin's
/// (NaN compared by NaN-ness).
#[test]
#[ignore = "writes a CUDA program for a GPU machine"]
fn cast_gpu_bundle() {
    let dir = std::env::var("TILUS_CAST_GPU_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let mut rng = StdRng::seed_from_u64(rand::random());
    let mut cu = String::from(
        "#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n#include <vector>\n\
         #include <cuda_fp16.h>\n#include <cuda_bf16.h>\n\n",
    );
    let mut bin: Vec<u8> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    // Records: kind (0 cast, 1 decode, 2 encode), id, count, in_per, out_per, cmp, data...
    // cmp: 0 f16 lanes, 1 bf16 lanes, 2 f32, 3 exact.
    let mut dispatch = String::new();
    let mut record = |kind: u32, id: u32, cmp: u32, inp: &[u32], exp: &[u32], in_per, out_per| {
        let n = inp.len() / in_per as usize;
        assert_eq!(exp.len(), n * out_per as usize);
        push_words(&mut bin, &[kind, id, n as u32, in_per, out_per, cmp]);
        push_words(&mut bin, inp);
        push_words(&mut bin, exp);
    };
    let mut plans: Vec<CastPlan> = Vec::new();
    for src in packed_sources() {
        for dst in [DType::F16, DType::BF16] {
            plans.extend(cast_plan(src, dst));
        }
    }
    for (id, p) in plans.iter().enumerate() {
        cu.push_str(&cast_source(p));
        let _ = writeln!(
            cu,
            "__global__ void k_cast_{id}(const uint32_t* in, uint32_t* out, int n) {{\n  int g = blockIdx.x * blockDim.x + threadIdx.x;\n  if (g < n) {}(in + g * {}, out + g * {});\n}}\n",
            p.fn_name, p.in_words, p.out_words
        );
        let _ = writeln!(
            dispatch,
            "  if (kind == 0 && id == {id}) k_cast_{id}<<<(n + 127) / 128, 128>>>(din, dout, n);"
        );
        names.push(p.fn_name.clone());
        // Every code in every position, then random groups.
        let bits = p.src.bits();
        let mut codes: Vec<u32> = Vec::new();
        for pos in 0..p.group {
            let base: Vec<u32> = (0..p.group)
                .map(|_| rng.random_range(0..1u32 << bits))
                .collect();
            for c in 0..1u32 << bits {
                let mut g = base.clone();
                g[pos] = c;
                codes.extend(g);
            }
        }
        for _ in 0..500 * p.group {
            codes.push(rng.random_range(0..1u32 << bits));
        }
        let input = pack(bits, &codes);
        let expected = host_cast(p, &input);
        let cmp = if p.dst == DType::F16 { 0 } else { 1 };
        record(
            0,
            id as u32,
            cmp,
            &input,
            &expected,
            p.in_words as u32,
            p.out_words as u32,
        );
    }
    let scalar_types: Vec<DType> = packed_sources()
        .into_iter()
        .chain([
            DType::F16,
            DType::BF16,
            DType::F32,
            DType::UInt(32),
            DType::Int(32),
        ])
        .collect();
    for (id, &d) in scalar_types.iter().enumerate() {
        let _ = writeln!(
            cu,
            "__global__ void k_dec_{id}(const uint32_t* in, uint32_t* out, int n) {{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {{ const uint32_t code = in[i]; out[i] = __float_as_uint({}); }}\n}}",
            decode_to_f32_expr(d, "code")
        );
        let _ = writeln!(
            cu,
            "__global__ void k_enc_{id}(const uint32_t* in, uint32_t* out, int n) {{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {{ const float value = __uint_as_float(in[i]); out[i] = {}; }}\n}}\n",
            encode_from_f32_expr(d, "value")
        );
        let _ = writeln!(
            dispatch,
            "  if (kind == 1 && id == {id}) k_dec_{id}<<<(n + 127) / 128, 128>>>(din, dout, n);\n  if (kind == 2 && id == {id}) k_enc_{id}<<<(n + 127) / 128, 128>>>(din, dout, n);"
        );
        let codes: Vec<u32> = if d.bits() <= 16 {
            (0..1u32 << d.bits()).collect()
        } else {
            (0..100_000).map(|_| rng.random()).collect()
        };
        let dec: Vec<u32> = codes
            .iter()
            .map(|&c| host_decode_to_f32(d, c).to_bits())
            .collect();
        record(1, id as u32, 2, &codes, &dec, 1, 1);
        let vals: Vec<u32> = probes(d, &mut rng).iter().map(|v| v.to_bits()).collect();
        let enc: Vec<u32> = vals
            .iter()
            .map(|&v| host_encode_from_f32(d, f32::from_bits(v)))
            .collect();
        record(2, id as u32, 3, &vals, &enc, 1, 1);
    }
    let _ = writeln!(
        cu,
        r#"
static bool lane_nan(uint32_t h, int cmp) {{
  return cmp == 0 ? ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) : ((h & 0x7F80) == 0x7F80 && (h & 0x7F));
}}
static bool same(uint32_t got, uint32_t want, int cmp) {{
  if (cmp == 3) return got == want;
  if (cmp == 2) {{
    bool wn = (want & 0x7F800000) == 0x7F800000 && (want & 0x7FFFFF);
    bool gn = (got & 0x7F800000) == 0x7F800000 && (got & 0x7FFFFF);
    return wn ? gn : got == want;
  }}
  for (int k = 0; k < 2; ++k) {{
    uint32_t g = (got >> (16 * k)) & 0xFFFF, w = (want >> (16 * k)) & 0xFFFF;
    if (lane_nan(w, cmp) ? !lane_nan(g, cmp) : g != w) return false;
  }}
  return true;
}}
static void launch(int kind, int id, const uint32_t* din, uint32_t* dout, int n) {{
{dispatch}}}
int main(int argc, char** argv) {{
  FILE* f = fopen(argc > 1 ? argv[1] : "casts_gpu.bin", "rb");
  if (!f) {{ printf("cannot open data\n"); return 2; }}
  long bad_total = 0, records = 0;
  uint32_t hdr[6];
  while (fread(hdr, 4, 6, f) == 6) {{
    uint32_t kind = hdr[0], id = hdr[1], n = hdr[2], ip = hdr[3], op = hdr[4], cmp = hdr[5];
    std::vector<uint32_t> in((size_t)n * ip), want((size_t)n * op), got((size_t)n * op);
    if (fread(in.data(), 4, in.size(), f) != in.size() || fread(want.data(), 4, want.size(), f) != want.size()) {{ printf("short file\n"); return 2; }}
    uint32_t *din, *dout;
    cudaMalloc(&din, in.size() * 4); cudaMalloc(&dout, got.size() * 4);
    cudaMemcpy(din, in.data(), in.size() * 4, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0xAB, got.size() * 4);
    launch(kind, id, din, dout, (int)n);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {{ printf("CUDA error %s\n", cudaGetErrorString(e)); return 2; }}
    cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost);
    cudaFree(din); cudaFree(dout);
    long bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {{
      if (!same(got[i], want[i], cmp)) {{
        if (bad < 5) printf("  MISMATCH kind %u id %u item %zu: got %08x want %08x (in %08x)\n", kind, id, i / op, got[i], want[i], in[(i / op) * ip]);
        ++bad;
      }}
    }}
    printf("kind %u id %3u: %8u items, %ld bad\n", kind, id, n, bad);
    bad_total += bad; ++records;
  }}
  printf("%ld records, %ld mismatches\n%s\n", records, bad_total, bad_total ? "FAILED" : "ALL OK");
  return bad_total ? 1 : 0;
}}
"#
    );
    std::fs::write(dir.join("casts_gpu.cu"), cu).unwrap();
    std::fs::write(dir.join("casts_gpu.bin"), bin).unwrap();
    let mut legend = String::new();
    for (i, n) in names.iter().enumerate() {
        let _ = writeln!(legend, "cast {i}: {n}");
    }
    for (i, d) in scalar_types.iter().enumerate() {
        let _ = writeln!(legend, "scalar {i}: {d}");
    }
    std::fs::write(dir.join("casts_gpu.txt"), legend).unwrap();
}
