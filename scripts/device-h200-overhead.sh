#!/usr/bin/env bash
# The executor's overhead on the lent single-H200 machine: every compute-side validation
# schedule (stand-in none; llama-3-8b and qwen2.5-7b shapes, six strategies) with
# `run --back-to-back`, which times the same kernels issued back to back on one stream (no
# per-op events or waits) alternately with the schedule's repetitions. `validate` reports
# executor_overhead_pct per case (the chunked:K schedules are N partial GEMMs on one
# stream). Predictions use the checked-in profile.
#   Build and stage as for scripts/device-h200.sh; carry [".build-cuda"].
set -uo pipefail
R=/tmp/flashoverlap-overhead
FO_DEFAULT_LIMIT_S=400
. "$(dirname "$0")/device-common.sh"
stamp() { echo "== [$(date +%T)] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version,power.limit --format=csv
HW=hardware-profiles/measured/h200-measured.toml
S=sequential,chunked:2,chunked:4,flash,direct,permute-loop
stamp "GPU unit tests"
REQUIRE_GPU=1 $B/cuda-tests --test-threads 1 2>&1 | tail -n 16
stamp "single-rank schedules, stand-in none, with the back-to-back baseline"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do for b in 3 10; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch $b \
    --seq 3072 --strategy $S --emulate-rank 0 --stand-in none --warmup 3 --repeats 10 \
    --back-to-back --out "$R/emu-none-llama-$w-tp$tp-b$b" --force 2>&1 | grep "back to back"
done; done; done
for w in ag-gemm gemm-rs mlp; do for tp in 2 4; do for b in 2 6; do
  $B/flashoverlap run --hardware "$HW" --model models/hf/qwen2.5-7b.json --workload $w --tp $tp \
    --batch $b --seq 3072 --strategy $S --emulate-rank 0 --stand-in none --warmup 3 --repeats 10 \
    --back-to-back --out "$R/emu-none-qwen-$w-tp$tp-b$b" --force 2>&1 | grep "back to back"
done; done; done
$B/flashoverlap validate "$R"/emu-* --hardware "$HW" --out "$R/validate.json" --force | tail -n 2
stamp done
