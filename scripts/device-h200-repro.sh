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
HW=hardware-profiles/measured/h200-measured.toml
# FO_CHECK=1: first the GPU unit tests and the correctness of every strategy (all ranks on
# the one GPU, copy-engine transport).
if [ -n "${FO_CHECK:-}" ]; then
  stamp "GPU unit tests"
  REQUIRE_GPU=1 $B/cuda-tests --include-ignored --test-threads 1 2>&1 | tail -n 3
  stamp "correctness: every strategy, all ranks on one GPU"
  correctness "$R"
fi
EMU_FILTER="tail -n 1"
stamp "single-rank schedules, stand-in none"
compute_side "$R"
# FO_QUICK=1: the copy-engine set only, and no calibration of this machine.
T="copy nccl"; [ -n "${FO_QUICK:-}" ] && T=copy
stamp "single-rank schedules, stand-in copy ($T)"
for t in $T; do copy_side "$R" $t; done
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
