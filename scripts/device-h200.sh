#!/usr/bin/env bash
# One call on the lent single-H200 machine: GPU unit tests, calibration (dense grid),
# single-rank schedules off the calibration grid for validation, correctness of every
# strategy (all ranks on the one GPU, copy-engine transport). Everything lands in
# $OUT/all.tar.gz.
#   Build here first:  cargo build --release --features cuda && \
#     cargo test --release -p flashoverlap-cuda --no-run && scripts/stage-cuda.sh
#   Then run through the device tool with carry [".build-cuda"].
# (The 2026-12-03 results were measured by this script as of commit 73a3bbc.)
# Calibration and runs use the default protocol: no heater, the GPU's clocks between
# short bursts (a 5 ms heater did not reach sustained-load clocks; see HEAT_MS in
# src/exec/gpu/mod.rs). nvidia-smi logs clocks, power and temperature to smi.csv.
set -uo pipefail
R=/tmp/flashoverlap-r
FO_DEFAULT_LIMIT_S=540
. "$(dirname "$0")/device-common.sh"
stamp() { echo "== [$(date +%T)] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version,power.limit --format=csv
# Clocks, power and temperature through the session (read only).
F=clocks_event_reasons.active
nvidia-smi --query-gpu=$F --format=csv >/dev/null 2>&1 || F=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$F \
  --format=csv -lms 250 > "$R/smi.csv" 2>&1 &
SMI=$!
stamp "GPU unit tests"
REQUIRE_GPU=1 $B/cuda-tests --test-threads 1 2>&1 | tail -n 15
stamp "calibrate"
$B/flashoverlap calibrate --base h200-sxm-8 --name h200-measured --out "$R/h200-measured.toml" \
  --repeats 5 --force
HW="$R/h200-measured.toml"
[ -f "$HW" ] || HW=h200-sxm-8
S=sequential,chunked:2,chunked:4,flash,direct,permute-loop
# Validation set: shapes of models whose widths are not calibration widths (llama-3-8b and
# mistral-7b: ffn 14336; qwen2.5-7b: hidden 3584, ffn 18944) at token counts that are not
# calibration m values (3·3072·b).
stamp "single-rank schedules, stand-in none (the compute side)"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do for b in 3 10; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch $b \
    --seq 3072 --strategy $S --emulate-rank 0 --stand-in none --warmup 3 --repeats 10 \
    --out "$R/emu-none-llama-$w-tp$tp-b$b" --force | tail -n 7
done; done; done
for w in ag-gemm gemm-rs mlp; do for tp in 2 4; do for b in 2 6; do
  $B/flashoverlap run --hardware "$HW" --model models/hf/qwen2.5-7b.json --workload $w --tp $tp \
    --batch $b --seq 3072 --strategy $S --emulate-rank 0 --stand-in none --warmup 3 --repeats 10 \
    --out "$R/emu-none-qwen-$w-tp$tp-b$b" --force | tail -n 7
done; done; done
stamp "single-rank schedules, stand-in copy (copy engine beside the GEMMs)"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch 10 \
    --seq 3072 --strategy $S --emulate-rank 0 --stand-in copy --warmup 3 --repeats 10 \
    --out "$R/emu-copy-llama-$w-tp$tp-b10" --force | tail -n 7
done; done
stamp "correctness: every strategy, all ranks on one GPU"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch 1 \
    --seq 3072 --strategy $S --warmup 1 --repeats 2 --out "$R/check-llama-$w-tp$tp" --force \
    | tail -n 7
done; done
stamp "single-rank schedules, stand-in copies through NCCL (sends to self: SM kernels)"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch 10 \
    --seq 3072 --strategy $S --emulate-rank 0 --stand-in copy --transport nccl --warmup 3 \
    --repeats 10 --out "$R/emu-nccl-llama-$w-tp$tp-b10" --force | tail -n 7
done; done
stamp "validate (calibrated profile)"
$B/flashoverlap validate "$R"/emu-* --hardware "$HW" --out "$R/validate.json" --force | tail -n 3
# Diagnostic, not validation: the runs' own GEMM shapes measured the calibration's way,
# which splits each error into the GEMM model's (interpolation) and the schedule's.
stamp "diagnostic: the compute-side runs' own GEMM shapes"
mkdir -p "$R/run-shapes"
$B/flashoverlap calibrate --base h200-sxm-8 --name h200-run-shapes \
  --out "$R/run-shapes/h200-run-shapes.toml" --shapes-from "$R"/emu-none-* --repeats 5 --force \
  | tail -n 2
[ -f "$R/run-shapes/h200-run-shapes.toml" ] && $B/flashoverlap validate "$R"/emu-* \
  --hardware "$R/run-shapes/h200-run-shapes.toml" --out "$R/run-shapes/validate.json" --force \
  | tail -n 3
kill $SMI
stamp done
