# Sourced by the device-*.sh scripts after they set R (where results collect) and
# FO_DEFAULT_LIMIT_S. The outer run re-runs the calling script under a time limit so the
# results are always packed: they are kept outside $OUT (which returns a limited number of
# files) and come back as $OUT/all.tar.gz with $OUT/log.txt. The inner run gets the CUDA
# and NCCL libraries of the lent machine's Python wheels, NVLink multicast off (the device
# README says why), B (the staged binaries) and its output teed to $R/log.txt.
# The device scripts read scripts/, models/, plans/ and hardware-profiles/ only: with
# results/ (about 50 MB of checked-in runs) and .build-cuda the working tree passes the
# lent machine's 64 MiB transfer limit, so move results/ aside for the call and back
# after it.
if [ -z "${FO_INNER:-}" ]; then
  rm -rf "$R"; mkdir -p "$R"
  FO_INNER=1 timeout "${FO_LIMIT_S:-$FO_DEFAULT_LIMIT_S}" bash "$0" "$@"
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
stamp() { echo "== [$(date +%T)] $*"; }
# The lent GPUs, their clocks, driver and power limit, at the top of every log.
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version,power.limit --format=csv

# The single-GPU validation sets (rank 0's schedule of six strategies; shapes of models
# whose widths are not calibration widths: llama-3-8b and mistral-7b ffn 14336,
# qwen2.5-7b hidden 3584 and ffn 18944, at 3072·b tokens). Each run's standard output
# goes through $EMU_FILTER (default: its last 7 lines, the table); its standard error (a
# line per strategy) goes to the log as it is. Arguments after the first are added to
# every `run`.
S=sequential,chunked:2,chunked:4,flash,direct,permute-loop
EMU_FILTER=${EMU_FILTER:-"tail -n 7"}
# compute_side DIR [ARGS]: stand-in none (the compute side), llama tp 2/4/8 × b 3/10 and
# qwen tp 2/4 × b 2/6, into DIR/emu-none-{llama,qwen}-WORKLOAD-tpTP-bB.
compute_side() {
  local dir=$1; shift
  for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do for b in 3 10; do
    $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch $b \
      --seq 3072 --strategy $S --emulate-rank 0 --stand-in none --warmup 3 --repeats 10 \
      --out "$dir/emu-none-llama-$w-tp$tp-b$b" --force "$@" | $EMU_FILTER
  done; done; done
  for w in ag-gemm gemm-rs mlp; do for tp in 2 4; do for b in 2 6; do
    $B/flashoverlap run --hardware "$HW" --model models/hf/qwen2.5-7b.json --workload $w \
      --tp $tp --batch $b --seq 3072 --strategy $S --emulate-rank 0 --stand-in none \
      --warmup 3 --repeats 10 --out "$dir/emu-none-qwen-$w-tp$tp-b$b" --force "$@" \
      | $EMU_FILTER
  done; done; done
}
# copy_side DIR TRANSPORT [ARGS]: stand-in copy through TRANSPORT (copy: copy engine,
# nccl: sends to self), llama tp 2/4/8, b 10, into DIR/emu-TRANSPORT-llama-WORKLOAD-tpTP-b10.
copy_side() {
  local dir=$1 t=$2; shift 2
  for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
    $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch 10 \
      --seq 3072 --strategy $S --emulate-rank 0 --stand-in copy --transport $t --warmup 3 \
      --repeats 10 --out "$dir/emu-$t-llama-$w-tp$tp-b10" --force "$@" | $EMU_FILTER
  done; done
}
# correctness DIR: every strategy, all ranks on the one GPU (copy-engine transport),
# checked against the reference, into DIR/check-llama-WORKLOAD-tpTP.
correctness() {
  local dir=$1
  for w in ag-gemm gemm-rs mlp; do for tp in 2 4 8; do
    $B/flashoverlap run --hardware "$HW" --model llama-3-8b --workload $w --tp $tp --batch 1 \
      --seq 3072 --strategy $S --warmup 1 --repeats 2 --out "$dir/check-llama-$w-tp$tp" \
      --force | tail -n 7
  done; done
}
