#!/usr/bin/env bash
# Set up what `--features candle-cuda` needs to *build* on a machine without a CUDA toolkit or
# driver, from pinned pip wheels, in the git-ignored folder .venv-cuda-build/:
#   - nvcc, cicc (nvvm), the CRT and CCCL headers: candle-kernels compiles its .cu files;
#   - libcudart, libnvrtc, libcublas(Lt), libcurand to link against (candle's cuda feature
#     links them: cudarc's dynamic-linking mode), with the unversioned names the linker wants;
#   - a stub libcuda.so (soname libcuda.so.1) exporting the driver entry points cudarc
#     declares: the real one comes with the driver on the GPU machine.
# Usage, from the project root (installs once, then prints the exports to evaluate):
#   eval "$(bash tools/cuda-build-env.sh)"
#   cargo build --release --features candle-cuda --example llama_block
# The binaries need the real libraries at run time (LD_LIBRARY_PATH=/usr/local/cuda/lib64 on a
# machine with the CUDA 13 toolkit).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
site="$root/.venv-cuda-build"
wheels="nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.88 nvidia-cuda-nvrtc==13.0.88 nvidia-cublas==13.0.0.19 nvidia-curand==10.4.0.35 nvidia-cuda-cccl==13.0.85"
cu="$site/nvidia/cu13"
if [ "$(cat "$site/.tilus-wheels" 2>/dev/null)" != "$wheels" ]; then
    rm -rf "$site"
    # One wheel per --target install: pip does not merge into an existing nvidia/cu13 folder.
    for w in $wheels; do
        tmp=$(mktemp -d)
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
            --no-deps --no-compile --target "$tmp" "$w"
        mkdir -p "$site"
        cp -rn "$tmp"/. "$site"/
        rm -rf "$tmp"
    done
    lib="$cu/lib"
    for l in cudart nvrtc cublas cublasLt; do ln -sf "lib$l.so.13" "$lib/lib$l.so"; done
    ln -sf libcurand.so.10 "$lib/libcurand.so"
    # The driver API functions cudarc's bindings declare, as empty functions: enough to link.
    cudarc_src=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -maxdepth 1 -type d -name 'index.crates.io-*' \
        -exec find {} -maxdepth 1 -name 'cudarc-0.19.10' \; | head -1)
    if [ -z "$cudarc_src" ]; then
        (cd "$root" && cargo fetch --locked >/dev/null)
        cudarc_src=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -maxdepth 2 -type d -name 'cudarc-0.19.10' | head -1)
    fi
    grep -hoE '^\s+fn cu[A-Za-z0-9_]+\(' "$cudarc_src/src/driver/sys/mod.rs" \
        | sed -E 's/\s+fn (cu[A-Za-z0-9_]+)\(/\1/' | sort -u \
        | sed 's/.*/void &(void) {}/' > "$lib/cuda_stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$lib/libcuda.so" "$lib/cuda_stub.c"
    echo "$wheels" > "$site/.tilus-wheels"
fi
# candle-kernels compiles for CUDA_COMPUTE_CAP (the H100's 90 unless set); no GPU is asked.
echo "export CUDA_ROOT='$cu'"
echo "export PATH='$cu/bin':\"\$PATH\""
echo "export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}"
echo "CUDA build environment ready in $site" >&2
