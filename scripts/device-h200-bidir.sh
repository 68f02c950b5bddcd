#!/usr/bin/env bash
# A short call on the lent single-H200 machine: correctness of permute-loop-bidir against
# the reference (all ranks on the one GPU, copy-engine transport) and its single-rank
# schedules for validation, with the permute loop and flash beside it. Build as for
# scripts/device-h200.sh; carry [".build-cuda"]. Results in $OUT/all.tar.gz.
set -uo pipefail
R=/tmp/flashoverlap-r
FO_DEFAULT_LIMIT_S=300
. "$(dirname "$0")/device-common.sh"
HW=hardware-profiles/measured/h200-measured.toml
S=flash,permute-loop,permute-loop-bidir
echo "== [$(date +%T)] correctness"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch 1 \
    --seq 3072 --strategy $S --warmup 1 --repeats 2 --out "$R/check-llama-$w-tp$tp" --force \
    | tail -n 4
done; done
echo "== [$(date +%T)] single-rank schedules, stand-in none"
for w in ag-gemm gemm-rs mlp; do for tp in 4 8; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch 10 \
    --seq 3072 --strategy $S --emulate-rank 0 --stand-in none --warmup 3 --repeats 10 \
    --out "$R/emu-none-llama-$w-tp$tp-b10" --force | tail -n 4
done; done
$B/flashoverlap validate "$R"/emu-* --hardware "$HW" | tail -n 1
echo "== [$(date +%T)] done"
