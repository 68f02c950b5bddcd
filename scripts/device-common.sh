# Sourced by the device-*.sh scripts after they set R (where results collect) and
# FO_DEFAULT_LIMIT_S. The outer run re-runs the calling script under a time limit so the
# results are always packed: they are kept outside $OUT (which returns a limited number of
# files) and come back as $OUT/all.tar.gz with $OUT/log.txt. The inner run gets the CUDA
# and NCCL libraries of the lent machine's Python wheels, NVLink multicast off (the device
# README says why), B (the staged binaries) and its output teed to $R/log.txt.
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
