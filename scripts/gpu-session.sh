#!/usr/bin/env bash
# The next device call's plan as one script (docs/PERFORMANCE.md, "Latest"): validates and A/Bs the
# opt-in GPU paths that were built without a GPU, within one device command (<= 10 minutes).
#   here:  scripts/gpu-check.sh pack build   (the carry limit: see below)
#   there: device tool, carry [".gpu"], command: bash scripts/gpu-session.sh [STAGE...]
# STAGE: new (the new tests alone), tests, q8, xb, qnorm, abenv, lean, l2, staged, boundary, gateup, moe, splits, attn, attn_llama, sanitize, decode, families, sampled,
# defaults, table, serve, serve_kv, serve_kvq, serve_trace, serve_mbt, serve_b8, serve_relay, bulk, serve_bulk, fused, fused_timing, fused_ncu,
# fused_sanitize, timeline, trace, trace8, trace_shapes
# (default: tests table serve trace8). Next call (docs/PERFORMANCE.md "Next"): QKV_T=150 qkv, then
# SERVE_KV="8 off" KVQ_SIMT=0 serve_kvq, then on an H200 table. timeline: a block timeline of the
# decode attention beside the kernel trace of the same run (TL_SHAPES; env such as BUNSEN_DECODE_FUSED_COMBINE=1
# passes through).
# Times (H100/H200): l2 ~0.3-1 minute per shape and case pair (H100), staged ~2.5, serve_kv ~1.2 per mode, tests ~2.5-5.5 minutes, q8 ~1.5-4, xb ~1-2, moe ~2.5 (~0.3 with MOE_AB=0), splits ~2.5,
# attn ~2, attn_llama ~1.5-2, sanitize ~0.5-2, decode ~4, families ~3.5, defaults ~2, sampled ~1.5, table ~2, serve ~2-3 (64 streams
# greedy and sampled, then 256 greedy unless SERVE_256=0), serve_trace ~1.5, serve_mbt ~2, serve_b8 ~1, serve_relay ~2,
# bulk ~2-3.5, serve_bulk ~2, fused ~3,
# trace/trace8/trace_shapes ~0.5-1.5: split them over calls of < 10 minutes. The trace stages need .gpu/lib's
# libcupti and trace library. A machine start costs 1-5 minutes of device time: plan calls back to back on a
# warm machine (it is given back after 30 s idle).
# AB_T: seconds per A/B (default 200); AB_REPS: reps per case (default 2); SHARD_T: seconds per test shard (default 200);
# ONLY_8B=1: q8 and xb A/B the 8B alone.
# The carry limit is 64 MiB on disk, tracked files included: pack a build configured for the device (sm_90a
# code only, uncompressed fatbins: scripts/gpu-check.sh pack says how), ~29 MB with the trace library, ~44 MiB
# with the tracked files. (A default build's compressed fatbins pack to ~57 MB: too much with the tracked files.)
# Results land in $OUT/r and are snapshotted to $OUT/results.tgz after every stage, so a call cut by its
# time limit still returns what finished. Stages (each bounded by `timeout`):
#   1. the tests of the unvalidated paths (NEW_TESTS), then the rest of test_cuda in four parallel shards;
#   1b. (q8) the 8-bit GEMV plans per decode launch shape (QMmaPlanBench.Shapes) and batch-1 decode A/B of
#      BUNSEN_QMMA_PLAN8 0 (register kernel) | 5 | 6 (f16 kernels) on llama3.1-8b and llama3.2-1b at 8 bits;
#   1c. (xb) batch-1 decode A/B of BUNSEN_QMMA_XBATCH 1 | 8 on llama3.1-8b and llama3.2-1b at 4 bits;
#   1d. (sanitize) compute-sanitizer memcheck + racecheck of the new kernels (scripts/sanitize.sh cases
#      matching SANITIZE_ONLY, default gemv_q8_f16);
#   2. batch-1 decode A/B (scripts/bench_ab.py, reps alternating): BUNSEN_FUSED_NORM 0|1, BUNSEN_L2_PREFETCH
#      0|16|64 and BUNSEN_ARGMAX_SPLIT on llama3.1-8b and llama3.2-1b; then (families) the fused norm on
#      qwen3-8b, qwen3.5-4b and gemma4-e4b (its post-norm form), L2 prefetch and argmax split on the 8B 4-bit,
#      argmax split on gemma4-e4b;
#   3. sampled decode: BUNSEN_SAMPLE_HIST peers|first, 8B and 1B, temperature 0.8 top-p 0.95;
#   4. serving, 64 streams of the 8B, greedy and sampled, BUNSEN_DEVICE_SAMPLING 0|1 on the server;
#   5. a kernel trace of the 1B step (when the trace library was packed).
set -uo pipefail
cd "$(dirname "$0")/.."
G=.gpu
R=${OUT:-gpu-session-out}/r
mkdir -p "$R"
export LD_LIBRARY_PATH=$PWD/$G/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export BUNSEN_CACHE=/tmp/bunsen-gpu-session
unxz_to() {
  [ -e "${1%.xz}" ] && return 0
  xz -d -k "$1" 2>/dev/null ||
    python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$1" "${1%.xz}"
}
for f in "$G/bunsen.xz" "$G/test_cuda.xz" "$G/lib/libcupti.so.13.xz"; do [ -f "$f" ] && unxz_to "$f"; done
chmod +x "$G/bunsen" "$G/test_cuda" 2>/dev/null
# test_cuda finds its fixtures under the source tree it was built from: make that path this checkout.
built_in=$(grep -a -o -m1 '/[[:alnum:]_./-]*/tests/cuda/test_cuda_' "$G/test_cuda" | head -1)
built_in=${built_in%/tests/cuda/test_cuda_}
if [ -n "$built_in" ] && [ ! -e "$built_in" ]; then mkdir -p "$(dirname "$built_in")" && ln -sfn "$PWD" "$built_in"; fi
snap() {
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/tmp.tgz" -C "$OUT" r && mv "$OUT/tmp.tgz" "$OUT/results.tgz"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$R/smi.txt" 2>&1

NEW_TESTS=${NEW_TESTS:-'*FusedNorm*:*QuantNormPrologue*'}  # (a call may name others)
new() {  # only the tests of the unvalidated paths (NEW_OUT: the output's name, default new_tests)
  local out="$R/${NEW_OUT:-new_tests}.txt"
  timeout "${NEW_T:-150}" "$G/test_cuda" --gtest_filter="$NEW_TESTS" >"$out" 2>&1
  echo "${NEW_OUT:-new tests} rc=$?: $(grep -c '^\[       OK' "$out") ok, $(grep -c '^\[  FAILED' "$out") failed"
  grep -h '^\[  FAILED' "$out" | sort -u | head -20
  snap
}
tests() {
  new
  for i in 0 1 2 3; do
    GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout "${SHARD_T:-200}" "$G/test_cuda" \
      --gtest_filter="-$NEW_TESTS" >"$R/shard$i.txt" 2>&1 &
  done
  wait
  for i in 0 1 2 3; do
    echo "shard $i: $(grep -c '^\[       OK' "$R/shard$i.txt") ok, $(grep -c '^\[  FAILED' "$R/shard$i.txt") failed"
  done
  grep -h '^\[  FAILED' "$R"/shard*.txt | sort -u | head -20
  snap
}

ab() {  # out-name, bunsen benchmark args, case:ENV=..[,ENV=..] ...
  local name=$1 args=$2
  shift 2
  timeout "${AB_T:-200}" python3 scripts/bench_ab.py --bunsen "$G/bunsen" --reps "${AB_REPS:-2}" --out "$R/$name" \
    --args "--device cuda --prompt-len 1024 --prefill-lens 1024 --gen 128 --no-probe $args" "$@" \
    >"$R/$name.txt" 2>&1
  echo "== $name (rc $?)"
  tail -8 "$R/$name.txt"
  snap
}
decode() {
  ab ab_8b "--synthetic llama3.1-8b" base:BUNSEN_FUSED_NORM=0 norm:BUNSEN_FUSED_NORM=1 \
    norm_pf16:BUNSEN_FUSED_NORM=1,BUNSEN_L2_PREFETCH=16 norm_pf64:BUNSEN_FUSED_NORM=1,BUNSEN_L2_PREFETCH=64 \
    norm_split:BUNSEN_FUSED_NORM=1,BUNSEN_ARGMAX_SPLIT=1
  ab ab_1b "--synthetic llama3.2-1b" base:BUNSEN_FUSED_NORM=0 norm:BUNSEN_FUSED_NORM=1 \
    norm_pf16:BUNSEN_FUSED_NORM=1,BUNSEN_L2_PREFETCH=16 norm_pf64:BUNSEN_FUSED_NORM=1,BUNSEN_L2_PREFETCH=64 \
    norm_split:BUNSEN_FUSED_NORM=1,BUNSEN_ARGMAX_SPLIT=1
}

families() {
  ab ab_qwen35 "--synthetic qwen3.5-4b" base:BUNSEN_FUSED_NORM=0 norm:BUNSEN_FUSED_NORM=1
  ab ab_qwen3 "--synthetic qwen3-8b" base:BUNSEN_FUSED_NORM=0 norm:BUNSEN_FUSED_NORM=1
  ab ab_8b_q4 "--synthetic llama3.1-8b --quant 4" base:BUNSEN_L2_PREFETCH=0 pf64:BUNSEN_L2_PREFETCH=64 \
    split:BUNSEN_ARGMAX_SPLIT=1
  ab ab_e4b "--synthetic gemma4-e4b" base:BUNSEN_FUSED_NORM=0 norm:BUNSEN_FUSED_NORM=1 \
    split:BUNSEN_ARGMAX_SPLIT=1 norm_split:BUNSEN_FUSED_NORM=1,BUNSEN_ARGMAX_SPLIT=1
}

q8() {  # the f16 8-bit GEMV (BUNSEN_QMMA_PLAN8 5, 6) against the register kernel (0)
  BUNSEN_BENCH_GEMV=1 timeout 150 "$G/test_cuda" --gtest_filter='QMmaPlanBench.Shapes' >"$R/q8_bench.txt" 2>&1
  echo "gemv bench rc=$?"
  grep 'BEST' "$R/q8_bench.txt"
  grep -E '^\[bench\] q8 .*split auto' "$R/q8_bench.txt" | head -40
  snap
  ab ab_8b_q8 "--synthetic llama3.1-8b --quant 8" regs:BUNSEN_QMMA_PLAN8=0 f16:BUNSEN_QMMA_PLAN8=5 \
    f16ring:BUNSEN_QMMA_PLAN8=6
  [ "${ONLY_8B:-0}" = 1 ] || ab ab_1b_q8 "--synthetic llama3.2-1b --quant 8" regs:BUNSEN_QMMA_PLAN8=0 \
    f16:BUNSEN_QMMA_PLAN8=5 f16ring:BUNSEN_QMMA_PLAN8=6
}

xb() {  # the 4-bit tile kernel's x staging: one chunk per thread at a time (1) or 8 loads in flight (8)
  ab ab_8b_q4_xb "--synthetic llama3.1-8b --quant 4" x1:BUNSEN_QMMA_XBATCH=1 x8:BUNSEN_QMMA_XBATCH=8
  [ "${ONLY_8B:-0}" = 1 ] || ab ab_1b_q4_xb "--synthetic llama3.2-1b --quant 4" x1:BUNSEN_QMMA_XBATCH=1 \
    x8:BUNSEN_QMMA_XBATCH=8
}

qnorm() {  # the quantized GEMVs' norm prologue (BUNSEN_QMMA_NORM=0: add_rms_norm launches as before)
  local spec name shape bits
  for spec in ${QNORM_SHAPES:-8b_q4:llama3.1-8b:4 8b_q8:llama3.1-8b:8 1b_q4:llama3.2-1b:4 qwen35_q4:qwen3.5-4b:4}; do
    IFS=: read -r name shape bits <<<"$spec"
    ab "ab_${name}_qnorm" "--synthetic $shape --quant $bits" off:BUNSEN_QMMA_NORM=0 on:BUNSEN_QMMA_NORM=1
  done
}

abenv() {  # batch-1 decode A/B of ABENV_CASES ("case:ENV=V[,ENV=V] ...") on ABENV_SHAPES ("name:shape[:bits] ...")
  local spec name shape bits
  for spec in ${ABENV_SHAPES:-8b_q4:llama3.1-8b:4}; do
    IFS=: read -r name shape bits <<<"$spec"
    # shellcheck disable=SC2086
    ab "ab_${name}_env" "--synthetic $shape${bits:+ --quant $bits}" ${ABENV_CASES:?ABENV_CASES names the cases}
  done
}

lean() {  # the lean decode-attention instances: their tests (bit for bit against the full ones, and the decode
  # suite with them on), then BUNSEN_DECODE_LEAN 0|1 on LEAN_SHAPES (the 8B 4-bit, e4b's cluster path, Qwen3.5's
  # head_dim-256 three-stage ring, the 8B and 1B bf16)
  NEW_TESTS='*LeanInstances*:*CudaDecodeTest*/0:*CudaDecodeTest*/2' NEW_T=${NEW_T:-150} new
  ABENV_SHAPES=${LEAN_SHAPES:-8b_q4:llama3.1-8b:4 e4b:gemma4-e4b qwen35:qwen3.5-4b 8b:llama3.1-8b 1b:llama3.2-1b} \
    ABENV_CASES="full:BUNSEN_DECODE_LEAN=0 lean:BUNSEN_DECODE_LEAN=1" abenv
}

l2() {  # the weight streams' L2 policy (l2_hint.cuh): its bit-identity tests, then batch-1 decode of the 4-bit
  # L2_SHAPES with BUNSEN_L2_EVICT_FIRST 0 | unset (the defaults: 4-bit launches evict_first when their weights fit
  # the L2) | 1, and of L2_SIZE_SHAPES (float and 8-bit weights) with the defaults (evict_first) | 2 (the size
  # rule for them too)
  NEW_TESTS='*L2EvictFirst*' NEW_T=${NEW_T:-100} new
  ABENV_SHAPES=${L2_SHAPES:-1b_q4:llama3.2-1b:4 8b_q4:llama3.1-8b:4} \
    ABENV_CASES="normal:BUNSEN_L2_EVICT_FIRST=0 default: first:BUNSEN_L2_EVICT_FIRST=1" abenv
  ABENV_SHAPES=${L2_SIZE_SHAPES:-8b:llama3.1-8b 8b_q8:llama3.1-8b:8 1b:llama3.2-1b} \
    ABENV_CASES="default: size:BUNSEN_L2_EVICT_FIRST=2" abenv
}

staged() {  # the staged combine (attention_combine.cu): its bit-identity test and the lean one, then batch-1 decode
  # with BUNSEN_DECODE_COMBINE_STAGED 0|1 on STAGED_SHAPES (the 1B, the 8B at 4 bits and bf16)
  NEW_TESTS='*StagedCombine*:*LeanInstances*' NEW_T=${NEW_T:-150} new
  ABENV_SHAPES=${STAGED_SHAPES:-1b:llama3.2-1b 8b_q4:llama3.1-8b:4 8b:llama3.1-8b} \
    ABENV_CASES="lean:BUNSEN_DECODE_COMBINE_STAGED=0 staged:BUNSEN_DECODE_COMBINE_STAGED=1" abenv
}

boundary() {  # the step's head and tail: the fused tail (BUNSEN_FUSED_TAIL), the argmax writing the pinned ids
  # (BUNSEN_IDS_DIRECT) and the vectorised embedding: their tests and the decode suites that cross a step, then
  # batch-1 decode with both switches on (the defaults) | both off | the tail alone on BOUNDARY_SHAPES
  NEW_TESTS='*Embedding*:*Argmax*:*Graph*:*Pipelined*:*Golden*:*EveryFamily*:*DecodeRows*:*BatchedDecode*:*Greedy*' \
    NEW_T=${NEW_T:-240} new
  ABENV_SHAPES=${BOUNDARY_SHAPES:-1b:llama3.2-1b 8b:llama3.1-8b 8b_q4:llama3.1-8b:4 qwen35:qwen3.5-4b e4b:gemma4-e4b} \
    ABENV_CASES="default: off:BUNSEN_FUSED_TAIL=0,BUNSEN_IDS_DIRECT=0 tail:BUNSEN_IDS_DIRECT=0" abenv
}

gateup() {  # the strided norm GEMV (the default since the thirty-third session) and the GEMV tests after
  # gemv.cu's split (gemv_body.cuh, gemv_fused.cu): the tests, then batch-1 decode at the defaults |
  # BUNSEN_GEMV_STRIDE=0 (the blocked launches) on GATEUP_SHAPES
  NEW_TESTS='*StridedNorm*:*FusedNorm*:*Linear*:*Gemv*:*QkvRope*:*Rope*:*Golden*' NEW_T=${NEW_T:-200} new
  ABENV_SHAPES=${GATEUP_SHAPES:-8b:llama3.1-8b 1b:llama3.2-1b qwen35:qwen3.5-4b} \
    ABENV_CASES="default: blocked:BUNSEN_GEMV_STRIDE=0" abenv
}

moe() {  # the MoE tests and kernel bench, then decode and prefill of both MoE shapes at 4 bits (MOE_AB=0: tests only)
  local f
  for f in 'CudaMoeTest.*' 'CudaTest.EveryFamilyConvertedTo4BitMatchesTheCpu'; do
    BUNSEN_CUDA_BENCH=1 timeout 90 "$G/test_cuda" --gtest_filter="$f" >>"$R/moe_tests.txt" 2>&1
    echo "$f rc=$?: $(grep -c '^\[       OK' "$R/moe_tests.txt") ok so far," \
      "$(grep -c '^\[  FAILED' "$R/moe_tests.txt") failed"
    grep -E '^\[  FAILED|^\[ bench' "$R/moe_tests.txt" | sort -u | head -12
    snap
  done
  [ "${MOE_AB:-1}" = 1 ] && [ -x "$G/bunsen" ] || return 0
  local name
  for name in ab_moe:gemma4-26b-a4b ab_qwen3moe:qwen3-30b-a3b; do
    ab "${name%%:*}" "--synthetic ${name#*:} --quant 4" default:
    python3 -c "import glob,json,os,sys
for f in sorted(glob.glob(sys.argv[1] + '/*_*.json')):
    print('  prefill', os.path.basename(f)[:-5], round(json.load(open(f)).get('prefill_tok_s', 0), 1), 'tok/s')" \
      "$R/${name%%:*}" 2>/dev/null
  done
}

splits() {  # fewer key slices per row (one combine round of 32) against the count that fills the GPU
  ab ab_e4b_splits "--synthetic gemma4-e4b" auto:BUNSEN_DECODE_SPLITS=0 s16:BUNSEN_DECODE_SPLITS=16 \
    s32:BUNSEN_DECODE_SPLITS=32
  ab ab_8b_splits "--synthetic llama3.1-8b" auto:BUNSEN_DECODE_SPLITS=0 s16:BUNSEN_DECODE_SPLITS=16 \
    s32:BUNSEN_DECODE_SPLITS=32
}

attn() {  # the decode attention path by shape: the cluster default (<= 2 rows x kv heads) against split
  ab ab_e4b_attn "--synthetic gemma4-e4b" default: split:BUNSEN_DECODE_ATTN=split
  ab ab_qwen35_attn "--synthetic qwen3.5-4b" default: cluster:BUNSEN_DECODE_ATTN=cluster
  ab ab_26b_attn "--synthetic gemma4-26b-a4b --quant 4" default: split:BUNSEN_DECODE_ATTN=split
}

attn_llama() {  # batch-1 decode attention on 8 kv heads: the split path (slices, then a combine launch) vs the
  # cluster path and the fused combine (the last slice of a kv head merges); ATTN_LLAMA_CASES: other cases
  local cases=${ATTN_LLAMA_CASES:-split:BUNSEN_DECODE_ATTN=split cluster:BUNSEN_DECODE_ATTN=cluster \
    fcomb:BUNSEN_DECODE_ATTN=split,BUNSEN_DECODE_FUSED_COMBINE=1}
  # shellcheck disable=SC2086
  ab ab_1b_attn "--synthetic llama3.2-1b" $cases
  # shellcheck disable=SC2086
  ab ab_8b_attn "--synthetic llama3.1-8b" $cases
  # shellcheck disable=SC2086
  ab ab_8b_q4_attn "--synthetic llama3.1-8b --quant 4" $cases
}

bulk() {  # the packed decode attention's bulk copies: tests (the bulk parameters 5 and 6), bench, sanitizer
  timeout "${BULK_T:-200}" "$G/test_cuda" --gtest_filter='Variants/CudaDecodeTest.*/5:Variants/CudaDecodeTest.*/6' \
    >"$R/bulk_tests.txt" 2>&1
  echo "bulk decode tests rc=$?: $(grep -c '^\[       OK' "$R/bulk_tests.txt") ok, $(grep -c '^\[  FAILED' "$R/bulk_tests.txt") failed"
  grep -h '^\[  FAILED' "$R/bulk_tests.txt" | sort -u | head -10
  BUNSEN_BENCH_ATTENTION=1 timeout 120 "$G/test_cuda" --gtest_filter='*DecodeAttentionBenchPackedProbe*' \
    >"$R/bulk_probe.txt" 2>&1
  echo "probe rc=$?"
  grep 'decode attention' "$R/bulk_probe.txt"
  snap
  SANITIZE_ONLY=decode_packed_bulk SANITIZE_BUDGET=120 bash scripts/sanitize.sh "$G" "$R/sanitize" \
    >"$R/sanitize_bulk.txt" 2>&1
  echo "sanitize rc=$?"
  tail -4 "$R/sanitize_bulk.txt"
  snap
}
serve_bulk() {  # 64 streams, the packed decode attention with cp.async copies, then with bulk copies
  local s=${BULK_SEED:-9}  # prompt seeds s and s + 1 (another pair for a second round)
  BUNSEN_DECODE_BULK=0 TAG=_cpasync$s serve_run 64 "greedy:$s"
  BUNSEN_DECODE_BULK=1 TAG=_bulk$s serve_run 64 "greedy:$((s + 1))"
}

fused() {  # the persistent decode step (BUNSEN_DECODE_FUSED): its tests, then per shape a timing record and A/B
  timeout "${FUSED_T:-120}" "$G/test_cuda" --gtest_filter='*FusedDecode*' >"$R/fused_tests.txt" 2>&1
  local rc=$?
  echo "fused tests rc=$rc: $(grep -c '^\[       OK' "$R/fused_tests.txt") ok, $(grep -c '^\[  FAILED' "$R/fused_tests.txt") failed"
  grep -E '^\[  FAILED|^\[ fused|Failure|Expected|Which is|row [0-9]' "$R/fused_tests.txt" | head -30
  snap
  [ $rc = 124 ] && return 1  # a hang: no A/B
  local m
  local i=0
  # FUSED_FORMS: the other forms' settings (comma-separated ENV=V lists), each a run of the wider-shape test
  for m in ${FUSED_FORMS:-BUNSEN_DECODE_FUSED_COPY=1 BUNSEN_DECODE_FUSED_COPY=2 BUNSEN_DECODE_FUSED_SEGS=1 \
    BUNSEN_DECODE_FUSED_SEGS=2 BUNSEN_DECODE_FUSED_SEGS=4}; do
    i=$((i + 1))
    env ${m//,/ } timeout 90 "$G/test_cuda" --gtest_filter='*FusedDecodeStepMatchesThePerOpStepAtWiderShapes' \
      >"$R/fused_tests_form$i.txt" 2>&1
    echo "$m: rc=$? $(grep -c '^\[       OK' "$R/fused_tests_form$i.txt") ok"
    grep -E '^\[  FAILED|^\[ fused' "$R/fused_tests_form$i.txt" | head -8
  done
  for m in "8b:--synthetic llama3.1-8b" "1b:--synthetic llama3.2-1b" "8b_q4:--synthetic llama3.1-8b --quant 4" \
    "8b_q8:--synthetic llama3.1-8b --quant 8"; do
    # FUSED_SHAPES: the shapes to time and A/B (default all: 8b 1b 8b_q4 8b_q8); FUSED_TIMING=0: no timing record
    case " ${FUSED_SHAPES:-8b 1b 8b_q4 8b_q8} " in *" ${m%%:*} "*) ;; *) continue ;; esac
    [ "${FUSED_TIMING:-1}" = 0 ] || fused_timing_one "$m"
    # FUSED_EXTRA: more cases for every shape, e.g. "lsu:BUNSEN_DECODE_FUSED=1,BUNSEN_DECODE_FUSED_COPY=1"
    # shellcheck disable=SC2086
    AB_T=${AB_T:-150} ab "ab_${m%%:*}_fused" "${m#*:}" base:BUNSEN_DECODE_FUSED=0 fused:BUNSEN_DECODE_FUSED=1 \
      ${FUSED_EXTRA:-}
  done
}
fused_timing_one() {  # NAME:ARGS: where a layer's time goes in the fused step (scripts/fused_timing.py)
  local m=$1 t="timing_${1%%:*}${TIMING_TAG:-}"  # TIMING_TAG: a suffix for the files (another form's record)
  BUNSEN_DECODE_FUSED=1 BUNSEN_DECODE_FUSED_TIMING="$R/$t.bin" timeout 120 "$G/bunsen" benchmark \
    --device cuda --prompt-len 1024 --prefill-lens 1024 --gen 32 --no-probe ${m#*:} >"$R/$t.txt" 2>&1
  echo "== $t (rc $?): $(grep -m1 '^decode ' "$R/$t.txt")"
  python3 scripts/fused_timing.py "$R/$t.bin" 2>&1 | tee -a "$R/$t.txt"
  echo "slowest attention blocks, layer 1:" >>"$R/$t.txt"
  python3 scripts/fused_timing.py "$R/$t.bin" --slowest attention --layer 1 >>"$R/$t.txt" 2>&1
  snap
}
fused_timing() {  # the timing records alone, 1B, 8B, 8B 4-bit (FUSED_SHAPES as in fused)
  local m
  for m in "1b:--synthetic llama3.2-1b" "8b:--synthetic llama3.1-8b" "8b_q4:--synthetic llama3.1-8b --quant 4"; do
    case " ${FUSED_SHAPES:-1b 8b 8b_q4} " in *" ${m%%:*} "*) ;; *) continue ;; esac
    fused_timing_one "$m"
  done
}
fused_ncu() {  # Nsight Compute on one fused step: sections and per-SASS-line stall samples (FUSED_NCU_ARGS: model)
  local args=${FUSED_NCU_ARGS:---synthetic llama3.1-8b --quant 4}
  # shellcheck disable=SC2086
  BUNSEN_DECODE_FUSED=1 timeout 300 ncu --clock-control none --kernel-name regex:decode_mega_kernel \
    --launch-skip 3 --launch-count 1 --set full --import-source no -f -o "$R/fused_ncu" "$G/bunsen" benchmark \
    --device cuda --prompt-len 1024 --prefill-lens 1024 --gen 8 --no-probe $args >"$R/fused_ncu_run.txt" 2>&1
  echo "ncu rc=$?"
  tail -5 "$R/fused_ncu_run.txt"
  ncu -i "$R/fused_ncu.ncu-rep" --page details >"$R/fused_ncu_details.txt" 2>&1
  grep -E "Duration|Throughput|Warp Cycles|Issued|Stall|No Eligible|Active Warps" "$R/fused_ncu_details.txt" | head -40
  ncu -i "$R/fused_ncu.ncu-rep" --page source --print-source sass --csv 2>"$R/fused_ncu_sass.err" |
    xz >"$R/fused_ncu_sass.csv.xz"
  cuobjdump -sass "$G/bunsen" 2>/dev/null | awk '/Function : /{f = ($0 ~ /decode_mega_kernelILi128ELb0/)} f' |
    xz >"$R/fused_sass.txt.xz"
  rm -f "$R/fused_ncu.ncu-rep"
}
fused_sanitize() {  # memcheck + racecheck of the persistent decode step
  SANITIZE_ONLY=decode_fused_step SANITIZE_BUDGET=${SANITIZE_BUDGET:-150} bash scripts/sanitize.sh "$G" "$R/sanitize" \
    >"$R/sanitize_fused.txt" 2>&1
  echo "sanitize rc=$?"
  tail -4 "$R/sanitize_fused.txt"
  snap
}

sanitize() {  # memcheck + racecheck of the kernels built without a GPU
  SANITIZE_ONLY=${SANITIZE_ONLY:-gemv_q8_f16} SANITIZE_BUDGET=${SANITIZE_BUDGET:-150} \
    bash scripts/sanitize.sh "$G" "$R/sanitize" >"$R/sanitize.txt" 2>&1
  echo "sanitize rc=$?"
  tail -8 "$R/sanitize.txt"
  snap
}

defaults() {  # the committed defaults against everything off, on the shapes whose defaults changed
  local off=BUNSEN_FUSED_NORM=0,BUNSEN_ARGMAX_SPLIT=0
  ab def_1b "--synthetic llama3.2-1b" defaults: "off:$off"
  ab def_8b "--synthetic llama3.1-8b" defaults: "off:$off"
  ab def_qwen35 "--synthetic qwen3.5-4b" defaults: "off:$off"
  ab def_8b_sampled "--synthetic llama3.1-8b --temperature 0.8 --top-p 0.95" defaults: \
    "off:$off,BUNSEN_SAMPLE_HIST=peers"
}

sampled() {
  ab ab_8b_sampled "--synthetic llama3.1-8b --temperature 0.8 --top-p 0.95" \
    peers:BUNSEN_SAMPLE_HIST=peers first:BUNSEN_SAMPLE_HIST=first
  ab ab_1b_sampled "--synthetic llama3.2-1b --temperature 0.8 --top-p 0.95" \
    peers:BUNSEN_SAMPLE_HIST=peers first:BUNSEN_SAMPLE_HIST=first
}

serve() {  # 64 streams of the 8B, greedy and sampled (device sampling on), then 256 streams greedy
  # Each run draws its own prompts (--seed), so no run is served from an earlier run's prefix cache.
  serve_run 64 "greedy:0 sampled:1"
  [ "${SERVE_256:-1}" = 1 ] && serve_run 256 "greedy:2"
}

serve_kv() {  # 64 streams of the 8B with a quantized KV cache (SERVE_KV: --kv-quant modes, default "fp8 8")
  local q
  for q in ${SERVE_KV:-fp8 8}; do SERVE_ARGS="--kv-quant $q" TAG=_kv$q serve_run 64 "greedy:3"; done
}

qkv() {  # the quantized cache's tests (the packed tensor-core kernel's included), then its micro-benchmark
  NEW_TESTS='*QuantKv*' NEW_OUT=qkv_tests NEW_T=${QKV_T:-180} new
  grep -hE 'Failure|worst at|not taken|Which is' "$R/qkv_tests.txt" | head -20
  BUNSEN_BENCH_ATTENTION=1 timeout 150 "$G/test_cuda" --gtest_filter='*DecodeAttentionBenchQuantized*' \
    >"$R/qkv_bench.txt" 2>&1
  grep -h '^\[ bench' "$R/qkv_bench.txt"
  snap
}

serve_kvq() {  # the same, each --kv-quant mode (SERVE_KV, default "8 fp8"; "off" = a bf16 cache) on the packed
  # tensor-core kernel (attention_decode_qmma.cu, BUNSEN_DECODE_QUANT_MMA=1) and then, unless KVQ_SIMT=0, on the
  # SIMT kernel (=0), same seeds
  local q
  for q in ${SERVE_KV:-8 fp8}; do
    BUNSEN_DECODE_QUANT_MMA=1 SERVE_ARGS="--kv-quant $q" TAG=_kv${q}_tc serve_run 64 "greedy:3"
    [ "$q" = off ] || [ "${KVQ_SIMT:-1}" = 0 ] ||
      BUNSEN_DECODE_QUANT_MMA=0 SERVE_ARGS="--kv-quant $q" TAG=_kv${q}_simt serve_run 64 "greedy:3"
  done
}

serve_trace() {  # a kernel trace of the server under 64 streams: GPU busy/idle and where the busy time goes
  [ -f "$G/lib/libbunsen_kernel_trace.so" ] || return 0
  LD_PRELOAD=$PWD/$G/lib/libbunsen_kernel_trace.so BUNSEN_KERNEL_TRACE="$R/trace_serve.csv" TAG=_traced \
    serve_run 64 "greedy:3"
  for _ in $(seq 30); do [ -s "$R/trace_serve.csv" ] && break; sleep 1; done
  python3 scripts/kernel_trace.py "$R/trace_serve.csv" --whole --after-idle-ms 500 --top 30 >"$R/trace_serve.txt" 2>&1
  python3 scripts/kernel_trace.py "$R/trace_serve.csv" --whole --after-idle-ms 500 --by-shape --top 40 >"$R/trace_serve_shapes.txt" 2>&1
  head -34 "$R/trace_serve.txt"
  xz -9 "$R/trace_serve.csv"
  snap
}

serve_mbt() {  # 64 streams with other step budgets: --max-num-batched-tokens each of MBT (default "512 1024";
  # the server's default is 2048; 4096 and 8192 measured no gain on the H200, 512 / 1024 -6.9 / -2.5 % on the
  # H100 where scripts/serve_model.py had predicted +3 % at 512).
  local seed=4 n
  for n in ${MBT:-512 1024}; do
    SERVE_ARGS="--max-num-batched-tokens $n" TAG=_mbt$n serve_run 64 "greedy:$seed"
    seed=$((seed + 1))
  done
}

serve_b8() {  # 64 streams with the packed decode attention's 8-warp blocks (BUNSEN_DECODE_BATCHED=8)
  BUNSEN_DECODE_BATCHED=8 TAG=_b8 serve_run 64 "greedy:6"
}

serve_relay() {  # 64 streams with the events delivered on the engine thread (BUNSEN_EVENT_RELAY=0), then relayed
  BUNSEN_EVENT_RELAY=0 TAG=_norelay serve_run 64 "greedy:7"
  TAG=_relay serve_run 64 "greedy:8"
}

serve_run() {  # streams, mode:seed ... (env: SERVE_ARGS for the server, TAG for the output names)
  local n=$1 port=18080 run mode seed tag=${TAG:-}
  # shellcheck disable=SC2086
  timeout 200 "$G/bunsen" serve --synthetic llama3.1-8b --device cuda --batch "$n" --ctx 1536 --port $port \
    ${SERVE_ARGS:-} >"$R/serve_$n$tag.log" 2>&1 &
  local pid=$! up=0
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && { up=1; break; }
    sleep 1
  done
  if [ $up = 1 ]; then
    for run in $2; do
      mode=${run%%:*} seed=${run##*:}
      local extra="--seed $seed"
      [ "$mode" = sampled ] && extra="$extra --temperature 0.8 --top-p 0.95"
      # shellcheck disable=SC2086
      env -u LD_PRELOAD timeout 90 "$G/bunsen" benchmark --serve "http://127.0.0.1:$port" --concurrency "$n" \
        --requests $((2 * n)) --prompt-len 1024 --gen 256 $extra --json >"$R/serve_${n}_$mode$tag.json" \
        2>"$R/serve_${n}_$mode$tag.err"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['ttft_ms']; i=d['itl_ms']
print(sys.argv[2], '%.1f tok/s, %d done, TTFT p50/p99 %.1f / %.1f ms, ITL p50/p99 %.2f / %.2f ms' % (
d['output_tok_s'], d['completed'], t['p50'], t['p99'], i['p50'], i['p99']))" \
        "$R/serve_${n}_$mode$tag.json" "$n streams $mode$tag" 2>/dev/null || echo "$n streams $mode$tag FAILED"
      # The engine thread's time so far (cumulative over this server's runs): scheduling, forwards, events.
      curl -s "http://127.0.0.1:$port/stats" >"$R/serve_stats_${n}_$mode$tag.json"
      python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['engine']
print('  engine: %d steps,' % e['steps'], ', '.join('%s %.2f s' % (k, v) for k, v in e.items() if k.endswith('_s')))" \
        "$R/serve_stats_${n}_$mode$tag.json" 2>/dev/null
    done
  else
    echo "server (--batch $n) did not come up"; tail -3 "$R/serve_$n$tag.log"
  fi
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  snap
}

table() {  # the must-show batch-1 figures of issues 4, 8, 9 with the committed defaults, one run each
  local i=0 spec shape args
  local one="--prefill-lens 1024"
  for spec in "llama3.1-8b|--prefill-lens 2048" "llama3.2-1b|$one" "llama3.1-8b|--quant 4 --prefill-lens 2048" \
    "llama3.1-8b|--quant 8 $one" "qwen3.5-4b|$one" "gemma4-e4b|$one" "gemma4-26b-a4b|--quant 4 $one"; do
    shape=${spec%%|*} args=${spec#*|}
    local probe=--no-probe
    [ $i = 0 ] && probe=""
    # shellcheck disable=SC2086
    timeout 75 "$G/bunsen" benchmark --device cuda --synthetic "$shape" --prompt-len 1024 --gen 128 $probe \
      $args --json >"$R/table_$i.json" 2>"$R/table_$i.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1]))
pf=' '.join('pp%d %.0f' % (p['prompt_len'], p['tok_s']) + (' (%.0f%% of the matmul rate)' % (100 * p['matmul_fraction'])
if 'matmul_fraction' in p else '') for p in d.get('prefill', []))
mm=' | matmul probe %.0f GFLOP/s' % d['probe_matmul_gflops'] if d.get('probe_matmul_gflops') else ''
print(sys.argv[2], '| decode %.1f tok/s %.3f ms, %.2f GB/tok, %.0f GB/s, probe %s |' % (d['decode_tok_s'],
d['ms_per_token'], d['weight_bytes_per_token'] / 1e9, d['decode_gbps'], d.get('probe_read_gbps', '-')), pf + mm)" \
      "$R/table_$i.json" "$shape $args" 2>/dev/null || {
      echo "$shape $args FAILED"; tail -2 "$R/table_$i.err"; }
    i=$((i + 1))
    snap
  done
}

timeline() {  # the decode attention's block timeline (BUNSEN_DECODE_TIMING) and the kernel trace of the same run, per
  # TL_SHAPES ("name:synthetic-shape[:bits] ..."), so a block's wait return can be set against the kernel before
  # it (the same globaltimer): tl_NAME.{csv.xz,txt,trace.csv.xz,trace.txt} (scripts/decode_timing.py)
  [ -f "$G/lib/libbunsen_kernel_trace.so" ] || return 0
  local m name shape bits
  for m in ${TL_SHAPES:-8b_q4:llama3.1-8b:4 8b:llama3.1-8b}; do
    IFS=: read -r name shape bits <<<"$m"
    LD_PRELOAD=$PWD/$G/lib/libbunsen_kernel_trace.so BUNSEN_KERNEL_TRACE="$R/tl_$name.trace.csv" \
      BUNSEN_DECODE_TIMING="$R/tl_$name.csv" timeout 90 "$G/bunsen" benchmark --device cuda --synthetic "$shape" \
      ${bits:+--quant "$bits"} --prompt-len 1024 --prefill-lens 1024 --gen 48 --no-probe --json >"$R/tl_$name.json" 2>&1
    python3 scripts/decode_timing.py "$R/tl_$name.csv" --skip 8 >"$R/tl_$name.txt" 2>&1
    python3 scripts/kernel_trace.py "$R/tl_$name.trace.csv" --by-shape >"$R/tl_$name.trace.txt" 2>&1
    echo "== timeline $name $(grep -o '"decode_tok_s": [0-9.]*' "$R/tl_$name.json")"
    cat "$R/tl_$name.txt"
    xz -9 "$R/tl_$name.csv" "$R/tl_$name.trace.csv"
    snap
  done
}

trace() {  # where the 1B's step goes (the norms in the prologues: the default for llama-like layers)
  TRACE_SHAPES="1b:llama3.2-1b" trace_shapes
}

trace8() {  # where the 8B 4-bit step goes (the largest gap: issue 8's 700 tok/s)
  TRACE_SHAPES="8b_q4:llama3.1-8b:4" trace_shapes
}

trace_shapes() {  # per-op kernel traces of TRACE_SHAPES ("name:synthetic-shape[:quant bits]" ..., default the
  # 8B and 1B in bf16): trace_NAME.{json,txt,csv.xz} (scripts/kernel_trace.py --by-shape)
  [ -f "$G/lib/libbunsen_kernel_trace.so" ] || return 0
  local m name shape bits
  for m in ${TRACE_SHAPES:-8b:llama3.1-8b 1b:llama3.2-1b}; do
    IFS=: read -r name shape bits <<<"$m"
    LD_PRELOAD=$PWD/$G/lib/libbunsen_kernel_trace.so BUNSEN_KERNEL_TRACE="$R/trace_$name.csv" \
      timeout 90 "$G/bunsen" benchmark --device cuda --synthetic "$shape" ${bits:+--quant "$bits"} --prompt-len 1024 \
      --prefill-lens 1024 --gen 48 --no-probe --json >"$R/trace_$name.json" 2>&1
    python3 scripts/kernel_trace.py "$R/trace_$name.csv" --by-shape >"$R/trace_$name.txt" 2>&1
    echo "== trace $name"
    head -30 "$R/trace_$name.txt"
    xz -9 "$R/trace_$name.csv"
    snap
  done
}

STAGES="new tests q8 xb qnorm abenv lean l2 staged boundary gateup moe splits attn attn_llama sanitize decode families sampled defaults table serve serve_kv qkv serve_kvq serve_trace \
serve_mbt serve_b8 serve_relay bulk serve_bulk fused fused_timing fused_ncu fused_sanitize timeline trace trace8 trace_shapes"
[ $# -gt 0 ] || set -- tests table serve trace8
for stage in "$@"; do
  case " $STAGES " in
    *" $stage "*) $stage ;;
    *)
      echo "unknown stage $stage (one of: $STAGES)" >&2
      exit 2
      ;;
  esac
done
