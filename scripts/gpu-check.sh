#!/usr/bin/env bash
# GPU check in two steps, because the GPU machine cannot build the project (no Debian -dev packages there):
#   scripts/gpu-check.sh pack [BUILD]   here: copies BUILD/bunsen, BUILD/tests/test_cuda (stripped, xz) and the
#                                       non-system shared libraries they need (PCRE2, utf8proc) into .gpu/
#                                       (git-ignored)
#   scripts/gpu-check.sh run            there (device tool: carry [".gpu"]): CUDA tests, generate on the demo
#                                       on cuda and cpu (same greedy ids expected), benchmarks and the 8B
#                                       decode step's kernel breakdown (scripts/kernel_trace.py); results in $OUT
# cuBLASLt is linked dynamically and found in the GPU machine's /usr/local/cuda/lib64.
set -uo pipefail
cd "$(dirname "$0")/.."
G=.gpu

pack() {
  local build=${1:-build}
  rm -rf "$G" && mkdir -p "$G/lib"
  cp "$build/bunsen" "$build/tests/test_cuda" "$G/" || exit 1
  for so in libpcre2-8.so.0 libutf8proc.so.2; do
    cp "$(ldd "$build/bunsen" | awk -v s="$so" '$1 == s {print $3}')" "$G/lib/" || exit 1
  done
  # The kernel timeline library (tools/kernel_trace) and its CUPTI, when built.
  if [ -f "$build/libbunsen_kernel_trace.so" ]; then
    cp "$build/libbunsen_kernel_trace.so" "$G/lib/" &&
      cp "$(ldd "$build/libbunsen_kernel_trace.so" | awk '$1 == "libcupti.so.13" {print $3}')" "$G/lib/" || exit 1
  fi
  # The device tool carries at most 64 MiB, tracked files included: strip and xz the binaries (run() unpacks
  # them there). nvcc compresses fatbins by default, and xz cannot shrink those: a build with compressed fatbins
  # and PTX packs to ~57 MB, one configured for the device with
  #   cmake -S . -B build -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_CUDA_FLAGS=--compress-mode=none
  # (sm_90a code only, uncompressed) to ~29 MB with the trace library and CUPTI (2026-12-06).
  grep -q -- '--compress-mode=none' "$build/CMakeCache.txt" 2>/dev/null ||
    echo "note: $build compresses its fatbins; the pack may exceed the carry (see scripts/gpu-check.sh pack)" >&2
  strip "$G/bunsen" "$G/test_cuda" && xz -T0 -6 "$G/bunsen" "$G/test_cuda" || exit 1
  local packed tracked
  packed=$(du -sb "$G" | cut -f1)
  tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  echo "$G: $((packed / 1048576)) MiB; with the tracked files $(((packed + tracked) / 1048576)) of the 64 MiB carry"
}

run() {
  local out=${OUT:-gpu-check-out}
  mkdir -p "$out"
  for f in bunsen test_cuda; do
    [ -x "$G/$f" ] || { xz -d -k "$G/$f.xz" 2>/dev/null ||
      python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$G/$f.xz" "$G/$f"
      chmod +x "$G/$f"; }
  done
  [ -d /work/main ] || ln -sfn "$PWD" /work/main  # the test binary looks for its fixtures where it was built
  local cublas
  cublas=$(ls /usr/local/cuda/lib64/libcublasLt.so.* 2>/dev/null | head -1)
  export LD_LIBRARY_PATH=$PWD/$G/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):${LD_LIBRARY_PATH:-}
  export BUNSEN_CACHE=/tmp/bunsen-gpu-check
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  ldd "$G/bunsen" "$G/test_cuda" | grep "not found"
  timeout 300 "$G/test_cuda" --gtest_output="json:$out/test_cuda.json" >"$out/test_cuda.txt" 2>&1
  echo "test_cuda rc=$?"; grep -E "^\[  (FAILED|PASSED|SKIPPED) " "$out/test_cuda.txt"
  for dev in cuda cpu; do
    timeout 60 "$G/bunsen" generate --device $dev --prompt-tokens 9707,11,1879,525,498 --max-tokens 24 \
      --temperature 0 --json >"$out/generate_$dev.json" 2>&1
    echo "generate $dev rc=$?"
  done
  python3 - "$out" <<'PY'
import json, sys
a, b = (json.load(open(f"{sys.argv[1]}/generate_{d}.json")) for d in ("cuda", "cpu"))
print("greedy ids cuda == cpu:", a["generated_ids"] == b["generated_ids"])
PY
  for shape in qwen2.5-0.5b llama3.1-8b; do
    timeout 150 "$G/bunsen" benchmark --device cuda --synthetic $shape --json >"$out/bench_$shape.json" 2>"$out/bench_$shape.err"
    echo "benchmark $shape rc=$?"; cat "$out/bench_$shape.json"
  done
  # Where the 8B decode step's time goes, kernel by kernel (tools/kernel_trace; tracing slows it 5-18 %).
  if [ -f "$G/lib/libbunsen_kernel_trace.so" ]; then
    timeout 150 env LD_PRELOAD="$PWD/$G/lib/libbunsen_kernel_trace.so" BUNSEN_KERNEL_TRACE="$out/trace_8b.csv" \
      "$G/bunsen" benchmark --device cuda --synthetic llama3.1-8b --prompt-len 1024 --gen 48 --no-probe --json \
      >/dev/null 2>"$out/trace_8b.err"
    echo "kernel trace rc=$?"
    python3 scripts/kernel_trace.py "$out/trace_8b.csv" --by-shape --top 12
  fi
}

case "${1:-}" in
  pack) pack "${2:-}" ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh pack [BUILD] | run" >&2; exit 2 ;;
esac
