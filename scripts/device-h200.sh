#!/usr/bin/env bash
# One call on the lent single-H200 machine: GPU unit tests, calibration, correctness of
# every strategy (all ranks on the one GPU, copy-engine transport), and single-rank
# schedules for validation. Everything lands in $OUT/all.tar.gz.
#   Build here first:  cargo build --release --features cuda && \
#     cargo test --release -p flashoverlap-cuda --no-run && scripts/stage-cuda.sh
#   Then run through the device tool with carry [".build-cuda"].
set -uo pipefail
# The body runs under a time limit so the results are always packed; they are kept
# outside $OUT (which returns a limited number of files) and come back as one tarball.
R=/tmp/flashoverlap-r
if [ -z "${FO_INNER:-}" ]; then
  rm -rf "$R"; mkdir -p "$R"
  FO_INNER=1 timeout "${FO_LIMIT_S:-420}" bash "$0" "$@"
  echo "body exit $?"
  mkdir -p "${OUT:-/tmp/out}"
  cp "$R/log.txt" "${OUT:-/tmp/out}/log.txt"
  tar czf "${OUT:-/tmp/out}/all.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
  exit 0
fi
SP=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
# cudarc opens NCCL as libnccl.so; the wheel ships libnccl.so.2 only.
NL=$(mktemp -d)
ln -s "$SP/nccl/lib/libnccl.so.2" "$NL/libnccl.so"
export LD_LIBRARY_PATH=$SP/cu13/lib:$SP/nccl/lib:$NL:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=.build-cuda
exec > >(tee "$R/log.txt") 2>&1
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv
ls $SP/cu13/lib | grep -E 'nvrtc|cublas' | head
echo "== GPU unit tests"
REQUIRE_GPU=1 $B/cuda-tests --test-threads 1
echo "== calibrate"
$B/flashoverlap calibrate --base h200-sxm-8 --name h200-measured --out "$R/h200-measured.toml" --force
HW="$R/h200-measured.toml"
[ -f "$HW" ] || HW=h200-sxm-8
echo "== correctness: every strategy, all ranks on one GPU"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
  $B/flashoverlap run --hardware "$HW" --workload $w --tp $tp --batch 2 --seq 4096 \
    --strategy sequential,chunked:2,chunked:4,flash --warmup 1 --repeats 3 \
    --out "$R/check-$w-tp$tp" --force
done; done
echo "== correctness of a gated MLP (SwiGLU, llama-3-8b shapes)"
$B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload mlp --tp 4 --batch 1 \
  --seq 3072 --strategy sequential,chunked:2,chunked:4,flash --warmup 1 --repeats 3 \
  --out "$R/check-llama-mlp-tp4" --force
echo "== single-rank schedules off the calibration grid (llama-3-8b: ffn 14336; 9k and 30k tokens)"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do for b in 3 10; do
  $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch $b \
    --seq 3072 --strategy sequential,chunked:2,chunked:4,flash --emulate-rank 0 \
    --stand-in none --warmup 3 --repeats 10 --out "$R/emu-none-llama-$w-tp$tp-b$b" --force
done; done; done
echo "== single-rank schedules"
for si in none copy; do for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do for b in 4 16; do
  [ $si = copy ] && [ $b = 4 ] && continue
  $B/flashoverlap run --hardware "$HW" --workload $w --tp $tp --batch $b --seq 4096 \
    --strategy sequential,chunked:2,chunked:4,flash --emulate-rank 0 --stand-in $si \
    --warmup 3 --repeats 10 --out "$R/emu-$si-$w-tp$tp-b$b" --force
done; done; done; done
echo "== single-rank schedules, stand-in copies through NCCL (sends to self: SM kernels)"
for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
  $B/flashoverlap run --hardware "$HW" --workload $w --tp $tp --batch 16 --seq 4096 \
    --strategy sequential,chunked:2,chunked:4,flash --emulate-rank 0 --stand-in copy \
    --transport nccl --warmup 3 --repeats 10 --out "$R/emu-nccl-$w-tp$tp-b16" --force
done; done
echo "== NCCL transport with two ranks on one GPU: must be refused"
$B/flashoverlap run --workload mlp --tp 2 --batch 1 --seq 1024 --transport nccl --no-check \
  --strategy flash --repeats 1 --warmup 0; echo "exit $?"
echo "== multi-process mode, world 1 (bootstrap through an id file)"
$B/flashoverlap run --workload mlp --tp 1 --batch 2 --seq 4096 --transport nccl --world 1 \
  --rank 0 --nccl-id-file "$R/nccl-id" --strategy sequential,flash --warmup 1 --repeats 3 \
  --out "$R/mp-world1" --force; echo "exit $?"
echo "== multi-process mode, two ranks on one GPU: NCCL must refuse, not hang"
rm -f "$R/nccl-id2"
pids=""
for r in 0 1; do
  timeout 120 $B/flashoverlap run --workload mlp --tp 2 --batch 1 --seq 1024 --transport nccl \
    --world 2 --rank $r --nccl-id-file "$R/nccl-id2" --strategy flash --warmup 0 --repeats 1 \
    --watchdog-s 30 > "$R/mp-dup-$r.txt" 2>&1 &
  pids="$pids $!"
done
# (a bare `wait` would also wait for the tee behind this script's output, forever)
wait $pids; tail -n 3 "$R"/mp-dup-*.txt
echo "== validate (calibrated profile)"
$B/flashoverlap validate "$R"/emu-* --hardware "$HW" --out "$R/validate.json" --force | tail -3
echo done
