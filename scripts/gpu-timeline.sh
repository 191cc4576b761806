#!/usr/bin/env bash
# One device call: the decode attention's block timeline (BUNSEN_DECODE_TIMING) and the kernel trace of the
# same run, per shape, so a block's wait return can be set against the kernel before it (same globaltimer).
#   TL_SHAPES="name:synthetic-shape[:bits] ..." [TL_ENV="A=1 B=2"] bash scripts/gpu-timeline.sh
# Writes $OUT/r/tl_NAME.{csv.xz,txt,trace.csv.xz,trace.txt}. Needs .gpu (scripts/gpu-check.sh pack).
set -uo pipefail
cd "$(dirname "$0")/.."
G=.gpu
R=${OUT:-gpu-session-out}/r
mkdir -p "$R"
export LD_LIBRARY_PATH=$PWD/$G/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in "$G/bunsen.xz" "$G/lib/libcupti.so.13.xz"; do [ -f "$f" ] && [ ! -e "${f%.xz}" ] && xz -d -k "$f"; done
chmod +x "$G/bunsen"
for m in ${TL_SHAPES:-8b_q4:llama3.1-8b:4 8b:llama3.1-8b}; do
  IFS=: read -r name shape bits <<<"$m"
  env ${TL_ENV:-} LD_PRELOAD=$PWD/$G/lib/libbunsen_kernel_trace.so BUNSEN_KERNEL_TRACE="$R/tl_$name.trace.csv" \
    BUNSEN_DECODE_TIMING="$R/tl_$name.csv" timeout 90 "$G/bunsen" benchmark --device cuda --synthetic "$shape" \
    ${bits:+--quant "$bits"} --prompt-len 1024 --prefill-lens 1024 --gen 48 --no-probe --json >"$R/tl_$name.json" 2>&1
  python3 scripts/decode_timing.py "$R/tl_$name.csv" --skip 8 >"$R/tl_$name.txt" 2>&1
  python3 scripts/kernel_trace.py "$R/tl_$name.trace.csv" --by-shape >"$R/tl_$name.trace.txt" 2>&1
  echo "== $name $(grep -o '"decode_tok_s": [0-9.]*' "$R/tl_$name.json")"
  cat "$R/tl_$name.txt"
  xz -9 "$R/tl_$name.csv" "$R/tl_$name.trace.csv"
done
