#!/usr/bin/env bash
# One call on a lent several-H200 machine (nvidia-h200-x2, -x4 or -x8): GPU unit tests,
# calibration (with GPU-to-GPU bandwidth, latency and NCCL interference), then every
# workload at tp = 2, 4, 8 (as many as the GPUs allow), 8k to 128k tokens, every strategy,
# over the copy-engine and the NCCL transport, one GPU per rank, each checked against the
# reference; the same shapes through PyTorch's own ops (scripts/torch-reference.py: NCCL
# collectives + matmul, and the symmetric-memory fused all-gather-matmul and
# matmul-reduce-scatter); finally `validate` of every case against the calibrated profile.
#   Build here:  cargo build --release --features cuda && \
#     cargo test --release -p flashoverlap-cuda --no-run && scripts/stage-cuda.sh
#   Run through the device tool (kind nvidia-h200-x8, say) with carry [".build-cuda"]:
#     bash scripts/device-h200-multi.sh
# Results come back as $OUT/all.tar.gz (and $OUT/log.txt).
set -uo pipefail
R=/tmp/flashoverlap-multi
FO_DEFAULT_LIMIT_S=540
. "$(dirname "$0")/device-common.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
nvidia-smi topo -m
NG=$(nvidia-smi -L | wc -l)
echo "== GPU unit tests"
REQUIRE_GPU=1 $B/cuda-tests --include-ignored --test-threads 1
echo "== calibrate ($NG GPUs)"
$B/flashoverlap calibrate --base h200-sxm-8 --name h200-x$NG-measured \
  --out "$R/h200-x$NG-measured.toml" --force
HW="$R/h200-x$NG-measured.toml"
[ -f "$HW" ] || HW=h200-sxm-8
S=sequential,chunked:2,chunked:4,chunked:8,flash,direct,permute-loop,permute-loop-bidir
for tp in 2 4 8; do
  [ "$tp" -le "$NG" ] || continue
  for w in mlp ag-gemm gemm-rs; do for b in 2 8 32; do for t in copy nccl; do
    echo "== $w tp=$tp tokens=$((b * 4096)) transport=$t"
    $B/flashoverlap run --hardware "$HW" --workload $w --tp $tp --batch $b --seq 4096 \
      --strategy $S --transport $t --warmup 3 --repeats 10 \
      --out "$R/$w-tp$tp-t$((b * 4))k-$t" --force
  done; done; done
done
for tp in 2 4 8; do
  [ "$tp" -le "$NG" ] || continue
  echo "== PyTorch reference, tp=$tp"
  /opt/torch/.venv/bin/python -m torch.distributed.run --nproc-per-node "$tp" \
    scripts/torch-reference.py --tokens 8192,32768,131072 --out "$R/torch-tp$tp.json"
done
echo "== validate (calibrated profile)"
$B/flashoverlap validate "$R"/*-tp*-t*k-* --hardware "$HW" --out "$R/validate.json" --force
echo done
