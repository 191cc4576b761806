#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over the CUDA kernel tests of test_cuda (GPU machine only):
#   scripts/sanitize.sh BUILD_DIR [OUT_DIR]
# BUILD_DIR holds test_cuda as BUILD_DIR/tests/test_cuda (a build tree), BUILD_DIR/tests/cuda/test_cuda or
# BUILD_DIR/test_cuda (scripts/gpu-check.sh's .gpu/, whose lib/ joins LD_LIBRARY_PATH). Each case is one
# gtest filter chosen to stay small (racecheck runs ~50-100x slower than a plain run; the whole list is
# meant to finish in < 8 minutes on an H200 with the default 4 jobs at once) under a per-run timeout. Prints
# a table (case, tool, hazards/errors, gtest verdict, seconds); logs go to OUT_DIR (default sanitize-out).
# Exit status 0 only when every run finished, its tests passed and the tool reported nothing, except the
# cases marked "expect hazards" (they reproduce a known racecheck report with a fix switched off, and fail
# when that report is absent). Env: SANITIZE_JOBS (runs at once, 4), SANITIZE_TIMEOUT (s per run, 150),
# SANITIZE_BUDGET (s for the whole list, 450: no run starts or lasts past it; the rest are NOT_RUN),
# SANITIZE_ONLY (a regex over case names), COMPUTE_SANITIZER (path of the tool).
set -uo pipefail

usage() { echo "usage: scripts/sanitize.sh BUILD_DIR [OUT_DIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
build=$1
out=${2:-sanitize-out}
jobs=${SANITIZE_JOBS:-4}
limit=${SANITIZE_TIMEOUT:-150}
budget=${SANITIZE_BUDGET:-450}
only=${SANITIZE_ONLY:-.}

if [ ! -x "$build/test_cuda" ] && [ -f "$build/test_cuda.xz" ]; then  # gpu-check.sh pack's .gpu/, not unpacked yet
  xz -d -k "$build/test_cuda.xz" 2>/dev/null ||
    python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" \
      "$build/test_cuda.xz" "$build/test_cuda"
  chmod +x "$build/test_cuda"
fi
bin=
for c in "$build/tests/test_cuda" "$build/tests/cuda/test_cuda" "$build/test_cuda"; do
  [ -x "$c" ] && { bin=$c; break; }
done
[ -n "$bin" ] || { echo "sanitize.sh: no executable test_cuda under $build" >&2; exit 2; }
cublas=$(ls "${CUDA_HOME:-/usr/local/cuda}"/lib64/libcublasLt.so.* 2>/dev/null | head -1)
[ -n "$cublas" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$(dirname "$cublas")"  # cuBLASLt, linked dynamically
[ -d "$build/lib" ] && export LD_LIBRARY_PATH="$build/lib:$LD_LIBRARY_PATH"  # .gpu/lib: PCRE2, utf8proc
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")}
[ -x "$cs" ] || { echo "sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
mkdir -p "$out" || exit 2

# tools;case;gtest filter;env (VAR=value, space separated, or -);extra sanitizer options (or -);expect
# Decode attention: variants 0 split (tensor cores), 1 SIMT, 2 cluster, 3/4 packed, 5/6 packed with bulk copies;
# head_dim 64..512.
D=Variants/CudaDecodeTest
cases=(
  # test_cuda_decode_sanitize.cpp: every head_dim (64..512), 8/16 MMA rows, 1/3 slices, odd/even tile counts,
  # split path with the combine kernel and the fused combine, cluster path.
  "memcheck racecheck;decode_small_all_paths;Paths/CudaDecodeSanitize.*;-;-;clean"
  "memcheck racecheck;decode_mixed_split;$D.MixedLengthsGqaAndHeadDims/0;-;-;clean"
  "memcheck racecheck;decode_mixed_simt;$D.MixedLengthsGqaAndHeadDims/1;-;-;clean"
  "memcheck racecheck;decode_mixed_cluster;$D.MixedLengthsGqaAndHeadDims/2;-;-;clean"
  "memcheck racecheck;decode_mixed_packed;$D.MixedLengthsGqaAndHeadDims/3:$D.MixedLengthsGqaAndHeadDims/4;-;-;clean"
  "memcheck racecheck;decode_packed_bulk;$D.MixedLengthsGqaAndHeadDims/5:$D.MixedLengthsGqaAndHeadDims/6:$D.InvalidBlockIdPoisonsOnlyItsRow/5;-;-;clean"
  # The persistent decode step (decode_mega.cu) over the llama golden fixtures (head_dim 16, 1-4 layers).
  "memcheck racecheck;decode_fused_step;CudaTest.FusedDecodeStepMatchesThePerOpStepOnTheLlamaFixtures;-;-;clean"
  "memcheck racecheck;decode_wide_256_512;$D.WideHeadsAndLargeGroups/0:$D.WideHeadsAndLargeGroups/2;-;-;clean"
  "memcheck racecheck;decode_gemma4_f32;$D.Gemma4ShapesF32Out/0;-;-;clean"
  "memcheck racecheck;decode_fused_combine;$D.FusedCombineAcrossContextsAndSliceCounts/0;-;-;clean"
  "memcheck racecheck;decode_invalid_block;$D.InvalidBlockIdPoisonsOnlyItsRow/0:$D.InvalidBlockIdPoisonsOnlyItsRow/2;-;-;clean"
  "memcheck racecheck;decode_cluster_sizes;$D.ClusterSizesAgainstReference/2;-;-;clean"
  # head_dim 256 with the barrier balance off: racecheck's count-paired barrier phases report the epilogue's
  # `red` writes against the ring's ldmatrix reads and merge_streams' reads (attention_decode_mma.cu).
  "racecheck;decode_256_balance_off;$D.MixedLengthsGqaAndHeadDims/0;BUNSEN_DECODE_BARRIER_BALANCE=0;-;hazards"
  # Prefill attention (mma.sync, fa2b, WMMA) on its small-shape cases.
  "memcheck racecheck;prefill_small;CudaTest.PrefillTensorCoresOddBlockSizesGroupsAndOutputs:CudaTest.PrefillTensorCoresInvalidBlockIdPoisonsOnlyItsSequence:CudaTest.PrefillTensorCoresWholeInvalidFirstTilePoisonsItsRows;-;-;clean"
  # GEMV: dense small-M paths, quantized (CUDA cores, tensor cores, forced k splits), the tiled kernel (its
  # first 400 launches under racecheck: every plan, split and m at k = 512 and 1536).
  "memcheck racecheck;gemv_dense;CudaTest.LinearEachPathForcedAtTheOtherPathsSizes:CudaTest.LinearWithEmptyKWritesBias;-;-;clean"
  "memcheck racecheck;gemv_quant;CudaQuantTest.ForcedPathsAgreeAtEverySize:CudaQuantTest.TensorCoreGemvEveryKSplit:CudaQuantTest.StridedMisalignedAndRowSlicedViews;-;-;clean"
  "memcheck;gemv_quant_tiled;CudaTest.TiledQuantGemvMatchesTheCpu;-;-;clean"
  "racecheck;gemv_quant_tiled;CudaTest.TiledQuantGemvMatchesTheCpu;-;--launch-count 400;clean"
  # The f16 8-bit GEMV (plans 5 and 6: register stages, the per-lane cp.async ring), its first 400 launches
  # under racecheck (groups 32 and 64, both scale dtypes).
  "memcheck;gemv_q8_f16;CudaTest.F16QuantGemv8MatchesTheCpuFarOutsideF16Range;-;-;clean"
  "racecheck;gemv_q8_f16;CudaTest.F16QuantGemv8MatchesTheCpuFarOutsideF16Range;-;--launch-count 400;clean"
  "memcheck racecheck;quant_fused;CudaTest.LinearQMultiMatchesLinearQPerPart:CudaTest.LinearQSwigluMatchesLinearQLinearQSiluMul;-;-;clean"
  # Rowwise fused norms, the (chunked) gated delta rule, the fused DeltaNet decode step, MoE.
  "memcheck racecheck;rowwise_fused;CudaTest.RmsNormQkvMatchesTheUnfusedOps:CudaTest.PostNormResidualMatchesTheUnfusedOps;-;-;clean"
  "memcheck racecheck;delta_rule;CudaTest.GatedDeltaRuleMatchesReference:CudaTest.ChunkedDeltaRuleMixedBatch;-;-;clean"
  "memcheck racecheck;deltanet_fused;DeltaNetFusedTest.MatchesTheThreeOps;-;-;clean"
  "memcheck racecheck;moe;CudaMoeTest.RouteMatchesTheCpu:CudaMoeTest.GeluExperts:CudaMoeTest.InvalidIdContributesNothing;-;-;clean"
)

# One run: writes OUT/<case>.<tool>.log and OUT/<case>.<tool>.res (tab-separated table row fields).
run_one() {
  local tool=$1 name=$2 filter=$3 env=$4 extra=$5 expect=$6 limit=$7
  local log="$out/$name.$tool.log" t0 t1 rc n verdict secs
  local -a envs=() opts=()
  [ "$env" != - ] && read -r -a envs <<<"$env"
  [ "$extra" != - ] && read -r -a opts <<<"$extra"
  t0=$(date +%s.%N)
  env ${envs[@]+"${envs[@]}"} timeout -k 10 "$limit" "$cs" --tool "$tool" --print-limit 50 \
    ${opts[@]+"${opts[@]}"} "$bin" --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [ "$tool" = racecheck ]; then  # "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"
    n=$(sed -n 's/.*RACECHECK SUMMARY: \([0-9]*\) hazard.*/\1/p' "$log" | head -1)
  else  # "ERROR SUMMARY: N errors"
    n=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | head -1)
  fi
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    verdict=TIMEOUT
  elif grep -q '^\[  FAILED  \]' "$log"; then
    verdict=FAILED
  elif grep -q '^\[  SKIPPED \]' "$log" && ! grep -q '^\[       OK \]' "$log"; then
    verdict=SKIPPED
  elif grep -q '^\[  PASSED  \] 0 tests' "$log"; then
    verdict=NO_TESTS  # a filter that matches nothing
  elif grep -q '^\[  PASSED  \]' "$log"; then
    verdict=PASSED
  else
    verdict="rc=$rc"
  fi
  [ -n "$n" ] || n="?"
  local ok=no
  if [ "$expect" = hazards ]; then
    [ "$verdict" = PASSED ] && [ "$n" != "?" ] && [ "$n" -gt 0 ] && ok=yes
  else
    [ "$verdict" = PASSED ] && [ "$n" = 0 ] && ok=yes
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$tool" "$n" "$verdict" "$secs" \
    "$([ $ok = yes ] && echo ok || echo "CHECK ($expect expected)")" >"$out/$name.$tool.res"
}

rm -f "$out"/*.res
start=$(date +%s)
running=0
for c in "${cases[@]}"; do
  IFS=';' read -r tools name filter env extra expect <<<"$c"
  [[ $name =~ $only ]] || continue
  for tool in $tools; do
    left=$((budget - ($(date +%s) - start)))
    if [ "$left" -lt 15 ]; then  # past the budget: listed, not run
      printf '%s\t%s\t-\tNOT_RUN\t0\tCHECK (over budget)\n' "$name" "$tool" >"$out/$name.$tool.res"
      continue
    fi
    run_one "$tool" "$name" "$filter" "$env" "$extra" "$expect" $((left < limit ? left : limit)) &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
      wait -n
      running=$((running - 1))
    fi
  done
done
wait

bad=0
{
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' case tool hazards/errors gtest seconds result
  for c in "${cases[@]}"; do
    IFS=';' read -r tools name _ <<<"$c"
    for tool in $tools; do
      f="$out/$name.$tool.res"
      [ -f "$f" ] || continue
      cat "$f"
      grep -q $'\tok$' "$f" || bad=$((bad + 1))
    done
  done
} >"$out/summary.tsv"
column -t -s $'\t' "$out/summary.tsv" 2>/dev/null || cat "$out/summary.tsv"
echo "total $(($(date +%s) - start)) s; $bad run(s) to check; logs in $out/"
[ "$bad" -eq 0 ]
