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
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version,power.limit --format=csv
# Clocks, power and temperature through the session (read only).
F=clocks_event_reasons.active
nvidia-smi --query-gpu=$F --format=csv >/dev/null 2>&1 || F=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$F \
  --format=csv -lms 250 > "$R/smi.csv" 2>&1 &
SMI=$!
stamp "GPU unit tests"
REQUIRE_GPU=1 $B/cuda-tests --include-ignored --test-threads 1 2>&1 | tail -n 15
stamp "calibrate"
$B/flashoverlap calibrate --base h200-sxm-8 --name h200-measured --out "$R/h200-measured.toml" \
  --repeats 5 --force
HW="$R/h200-measured.toml"
[ -f "$HW" ] || HW=h200-sxm-8
stamp "single-rank schedules, stand-in none (the compute side)"
compute_side "$R"
stamp "single-rank schedules, stand-in copy (copy engine beside the GEMMs)"
copy_side "$R" copy
stamp "correctness: every strategy, all ranks on one GPU"
correctness "$R"
stamp "single-rank schedules, stand-in copies through NCCL (sends to self: SM kernels)"
copy_side "$R" nccl
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
