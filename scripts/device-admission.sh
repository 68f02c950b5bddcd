#!/usr/bin/env bash
# When does a device copy run beside a GEMM, and when does it wait for the GEMM's SMs?
# On the lent single-GPU machine: for each of four GEMM shapes (under one wave to about
# seven waves of 128 x 256 tiles on 132 SMs) and three copy sizes, a plan of four GEMMs
# back to back on one stream and eight copies back to back on a second, issued at once
# (as plans/gemms-beside-copies.toml, smaller), run rested; then validated against the
# profile. Build and stage as for scripts/device-h200.sh; carry [".build-cuda"].
#
# Why: the copy stand-in's worst held-out cases (results/h100-2026-12-07f) are copies
# that the model holds back until the GEMM's last wave (interference.
# memory_ops_wait_for_gemm_sms, set by `calibrate` from one 8192^3 GEMM beside one 1 GiB
# copy) while on that H100 copies (most under 8 MiB, up to 80) ran beside GEMMs of one to
# seven waves at about half their speed; on the H200 runs of 2026-12-04 15 MiB copies
# waited for GEMMs of two and more waves. Card, copy size and GEMM size are confounded there; this separates them.
#   FO_HW=PROFILE validates against PROFILE (default: the checked-in H200 calibration).
#   Plans go to $R/plans (kept with the results). About two minutes.
set -uo pipefail
R=/tmp/flashoverlap-admission
FO_DEFAULT_LIMIT_S=300
. "$(dirname "$0")/device-common.sh"
HW=${FO_HW:-hardware-profiles/measured/h200-measured.toml}
mkdir -p "$R/plans"
for g in 256x3456x5120 512x11264x8192 2560x3584x4096 2560x11264x8192; do
  IFS=x read -r m n k <<< "$g"
  for c in 2 16 128; do
    p=$R/plans/gemm-$g-copy-${c}MiB.toml
    cat > "$p" <<EOF
# Four ${m}x${n}x${k} bf16 GEMMs on one stream, eight ${c} MiB device copies on a second,
# issued at once (scripts/device-admission.sh).
version = 1
name = "gemm $g beside $c MiB copies"

[[stream]]
name = "copy"
kind = "comm"

[[op]]
name = "gemm"
kind = "gemm"
m = $m
n = $n
k = $k
repeat = 4

[[op]]
name = "copy"
stream = "copy"
kind = "copy"
bytes = "${c}MiB"
repeat = 8
EOF
    stamp "plan gemm $g, copies of $c MiB"
    $B/flashoverlap run --plan "$p" --hardware "$HW" --warmup 3 --repeats 10 \
      --out "$R/adm-$g-copy-${c}MiB" --force | tail -n 2
  done
done
$B/flashoverlap validate "$R"/adm-* --hardware "$HW" --out "$R/validate-adm.json" --force \
  | tail -n 2
stamp done
