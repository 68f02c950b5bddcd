#!/usr/bin/env bash
# A second call on the lent single-H200 machine, on the checked-in calibration
# (hardware-profiles/measured/h200-measured.toml, measured by scripts/device-h200.sh in an
# earlier call): the single-rank validation runs again (compute side, copy and NCCL
# stand-ins), to see how much prediction error moves from one machine session to the next.
#   Build and stage as for scripts/device-h200.sh; carry [".build-cuda"].
set -uo pipefail
R=/tmp/flashoverlap-repro
FO_DEFAULT_LIMIT_S=400
. "$(dirname "$0")/device-common.sh"
stamp() { echo "== [$(date +%T)] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version,power.limit --format=csv
HW=hardware-profiles/measured/h200-measured.toml
S=sequential,chunked:2,chunked:4,flash,direct,permute-loop
# FO_CHECK=1: first the GPU unit tests and the correctness of every strategy (all ranks on
# the one GPU, copy-engine transport).
if [ -n "${FO_CHECK:-}" ]; then
  stamp "GPU unit tests"
  REQUIRE_GPU=1 $B/cuda-tests --test-threads 1 2>&1 | tail -n 3
  stamp "correctness: every strategy, all ranks on one GPU"
  for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
    $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch 1 \
      --seq 3072 --strategy $S --warmup 1 --repeats 2 --out "$R/check-llama-$w-tp$tp" --force \
      | tail -n 7
  done; done
fi
stamp "single-rank schedules, stand-in none"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do for b in 3 10; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch $b \
    --seq 3072 --strategy $S --emulate-rank 0 --stand-in none --warmup 3 --repeats 10 \
    --out "$R/emu-none-llama-$w-tp$tp-b$b" --force | tail -n 1
done; done; done
for w in ag-gemm gemm-rs mlp; do for tp in 2 4; do for b in 2 6; do
  $B/flashoverlap run --hardware "$HW" --model models/hf/qwen2.5-7b.json --workload $w --tp $tp \
    --batch $b --seq 3072 --strategy $S --emulate-rank 0 --stand-in none --warmup 3 --repeats 10 \
    --out "$R/emu-none-qwen-$w-tp$tp-b$b" --force | tail -n 1
done; done; done
stamp "single-rank schedules, stand-in copy (copy engine, then NCCL)"
# FO_QUICK=1: the copy-engine set only, and no calibration of this machine.
T="copy nccl"; [ -n "${FO_QUICK:-}" ] && T=copy
for t in $T; do for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch 10 \
    --seq 3072 --strategy $S --emulate-rank 0 --stand-in copy --transport $t --warmup 3 \
    --repeats 10 --out "$R/emu-$t-llama-$w-tp$tp-b10" --force | tail -n 1
done; done; done
$B/flashoverlap validate "$R"/emu-* --hardware "$HW" --out "$R/validate.json" --force | tail -n 2
# This machine's own calibration, after the runs: how much of the error moving between
# sessions a fresh calibration takes back.
[ -n "${FO_QUICK:-}" ] && { stamp done; exit 0; }
stamp "calibrate this machine (own/)"
mkdir -p "$R/own"
$B/flashoverlap calibrate --base h200-sxm-8 --name h200-own --out "$R/own/h200-own.toml" \
  --repeats 5 --force | tail -n 1
[ -f "$R/own/h200-own.toml" ] && $B/flashoverlap validate "$R"/emu-* \
  --hardware "$R/own/h200-own.toml" --out "$R/own/validate.json" --force | tail -n 2
stamp done
