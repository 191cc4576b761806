#!/usr/bin/env bash
# The twenty-seventh session's last device call: the decode attention and combine tests with the lean instances
# on (default), then on an H200 the target table and the lean A/B on the 8B shapes, on an H100 the A/B alone.
set -uo pipefail
cd "$(dirname "$0")/.."
R=${OUT:-gpu-session-out}/r
mkdir -p "$R"
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in .gpu/test_cuda.xz .gpu/bunsen.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; done
chmod +x .gpu/test_cuda .gpu/bunsen
F='*CudaDecodeTest*:*DecodeRows*:*GraphReplay*:*ModelMatchesGoldens*:*QuantModel*'
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout "${T_TESTS:-120}" .gpu/test_cuda --gtest_filter="$F" >"$R/t$i.txt" 2>&1 &
done
wait
for i in 0 1 2 3; do
  echo "shard $i: $(grep -c '^\[       OK' "$R/t$i.txt") ok, $(grep -c '^\[  FAILED' "$R/t$i.txt") failed"
done
grep -h '^\[  FAILED' "$R"/t*.txt | sort -u | head
cases="full:BUNSEN_DECODE_LEAN=0 lean:BUNSEN_DECODE_LEAN=1"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash scripts/gpu-session.sh table
  ABENV_SHAPES="8b_q4:llama3.1-8b:4 e4b:gemma4-e4b" ABENV_CASES=$cases AB_T=70 bash scripts/gpu-session.sh abenv
else
  ABENV_SHAPES="8b_q4:llama3.1-8b:4 e4b:gemma4-e4b 8b:llama3.1-8b 1b:llama3.2-1b" ABENV_CASES=$cases AB_T=70 \
    bash scripts/gpu-session.sh abenv
fi
