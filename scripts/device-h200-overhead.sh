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
HW=hardware-profiles/measured/h200-measured.toml
stamp "GPU unit tests"
REQUIRE_GPU=1 $B/cuda-tests --include-ignored --test-threads 1 2>&1 | tail -n 16
stamp "single-rank schedules, stand-in none, with the back-to-back baseline"
# The overhead lines are on standard error (in the log); the tables are not needed.
EMU_FILTER="tail -n 0"
compute_side "$R" --back-to-back
$B/flashoverlap validate "$R"/emu-* --hardware "$HW" --out "$R/validate.json" --force | tail -n 2
stamp done
