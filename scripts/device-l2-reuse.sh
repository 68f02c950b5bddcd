#!/usr/bin/env bash
# Why small partial GEMMs run faster in a schedule than the calibration says (issue 23:
# the second held-out set's worst cases, `chunked:16` of qwen2.5-14b ag-gemm at tp 8,
# 256-row GEMMs predicted 43% slow), and the warm GEMM times that model it. One call on
# one lent GPU:
#  1. plans of 16 GEMMs of one shape back to back (operands reused, L2 warm) against the
#     same GEMMs each after a 256 MiB copy on their stream (L2 evicted, as the
#     calibration times them), for shapes of the second set (weights under and over L2);
#  2. the second held-out set's compute side (stand-in none) as scripts/
#     device-h200-heldout.sh runs it (FO_SET1=1: the first set's too);
#  3. a calibration of this GPU (`own/`): with FO_EXACT=1, after the runs and with their
#     exact GEMM shapes added (`calibrate --shapes-from`: their prediction no longer
#     interpolates between grid shapes, and what is left is the schedule's error);
#     without, first, on the grid alone (what a user's calibration is), the held-out
#     sets validated against it.
# The calibration times each grid shape cold and warm (right after a GEMM over the same
# B), so its profile predicts both.
#   Build and stage as for scripts/device-h200.sh; carry [".build-cuda"].
# FO_L2=0 leaves out part 1 (already measured), FO_SET1=1 adds the first held-out set.
# Call 1 (2026-12-07, results/h200-2026-12-07e): FO_EXACT=1. Call 2 (results/
# h200-2026-12-07f), with what device time was left: FO_L2=0 FO_LIMIT_S=330.
set -uo pipefail
R=/tmp/flashoverlap-l2
FO_DEFAULT_LIMIT_S=570
. "$(dirname "$0")/device-common.sh"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
BASE=h100-sxm-8
[[ "$GPU" == *H200* ]] && BASE=h200-sxm-8
HW=$BASE
mkdir -p "$R/own"
if [ -z "${FO_EXACT:-}" ]; then
  stamp "calibrate on $BASE, grid only, cold and warm (own/)"
  $B/flashoverlap calibrate --base "$BASE" --name own --out "$R/own/own.toml" --repeats 3 \
    --force | tail -n 1
  HW=$R/own/own.toml
fi
# 1. Warm against cold. Shapes m × n × k: qwen2.5-14b fc1 at tp 8 (weight 35 MB), its
# fc2 at tp 8 (18 MB), command-r fc1 at tp 8 (92 MB, over any L2) and at tp 2 (369 MB),
# and a calibration grid shape as a check of the cold protocol.
[ "${FO_L2:-1}" = 1 ] && stamp "warm and cold GEMMs"
mkdir -p "$R/plans"
[ "${FO_L2:-1}" = 1 ] && for s in 256x3456x5120 512x3456x5120 1024x3456x5120 2048x3456x5120 256x5120x1728 \
  1024x5120x1728 256x5632x8192 1024x5632x8192 256x22528x8192 256x3072x5120; do
  IFS=x read -r m n k <<< "$s"
  g=$(printf '[[op]]\nkind = "gemm"\nm = %s\nn = %s\nk = %s\n' "$m" "$n" "$k")
  c=$(printf '[[op]]\nkind = "copy"\nbytes = "256MiB"\n')
  { echo "version = 1"; echo "name = \"warm-$s\""; echo "$g"; echo "repeat = 16"; } \
    > "$R/plans/warm-$s.toml"
  { echo "version = 1"; echo "name = \"cold-$s\""
    for _ in $(seq 16); do echo "$c"; echo "$g"; done; } > "$R/plans/cold-$s.toml"
  for t in warm cold; do
    $B/flashoverlap run --plan "$R/plans/$t-$s.toml" --hardware "$HW" --warmup 3 \
      --repeats 10 --out "$R/l2-$t-$s" --force | tail -n 1
  done
done
# 2. The held-out sets' compute side.
HS=sequential,chunked:2,chunked:4,chunked:8,chunked:16,flash,direct,permute-loop,permute-loop-bidir
heldout() { # MODEL... -- BATCHES...
  local models=() batches=() seen=
  for a in "$@"; do
    if [ "$a" = -- ]; then seen=1; elif [ -n "$seen" ]; then batches+=("$a"); else models+=("$a"); fi
  done
  for m in "${models[@]}"; do for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
    for b in "${batches[@]}"; do
      $B/flashoverlap run --hardware "$HW" --model models/hf/$m.json --workload $w --tp $tp \
        --batch $b --seq 2048 --strategy $HS --emulate-rank 0 --stand-in none --warmup 3 \
        --repeats 10 --out "$R/ho-none-$m-$w-tp$tp-b$b" --force | tail -n 1
    done
  done; done; done
}
stamp "second held-out set, stand-in none"
heldout qwen2.5-14b command-r -- 2 5
if [ -n "${FO_SET1:-}" ]; then
  stamp "first held-out set, stand-in none"
  heldout llama-2-7b yi-34b -- 3 7
fi
# 3. With FO_EXACT: this GPU's calibration with the runs' exact shapes.
if [ -n "${FO_EXACT:-}" ]; then
  stamp "calibrate on $BASE with the runs' GEMM shapes (own/)"
  $B/flashoverlap calibrate --base "$BASE" --name own --out "$R/own/own.toml" --repeats 3 \
    --shapes-from "$R"/ho-none-* --force | tail -n 1
fi
$B/flashoverlap validate "$R"/ho-none-* --hardware "$R/own/own.toml" \
  --out "$R/validate-none.json" --force | tail -n 2
stamp done
