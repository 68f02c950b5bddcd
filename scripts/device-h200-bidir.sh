#!/usr/bin/env bash
# A short call on the lent single-H200 machine: correctness of permute-loop-bidir against
# the reference (all ranks on the one GPU, copy-engine transport) and its single-rank
# schedules for validation, with the permute loop and flash beside it. Build as for
# scripts/device-h200.sh; carry [".build-cuda"]. Results in $OUT/all.tar.gz.
set -uo pipefail
R=/tmp/flashoverlap-r
if [ -z "${FO_INNER:-}" ]; then
  rm -rf "$R"; mkdir -p "$R"
  FO_INNER=1 timeout "${FO_LIMIT_S:-300}" bash "$0" "$@"
  echo "body exit $?"
  mkdir -p "${OUT:-/tmp/out}"
  cp "$R/log.txt" "${OUT:-/tmp/out}/log.txt"
  tar czf "${OUT:-/tmp/out}/all.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
  exit 0
fi
SP=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
NL=$(mktemp -d)
ln -s "$SP/nccl/lib/libnccl.so.2" "$NL/libnccl.so"
export LD_LIBRARY_PATH=$SP/cu13/lib:$SP/nccl/lib:$NL:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=.build-cuda
HW=hardware-profiles/measured/h200-measured.toml
exec > >(tee "$R/log.txt") 2>&1
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
