#!/usr/bin/env bash
# Copy the cuda-feature binary and the GPU unit-test binary into .build-cuda/ (ignored by
# git, carried to the device machine).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .build-cuda
cp target/release/flashoverlap .build-cuda/flashoverlap
t=$(ls -t target/release/deps/flashoverlap_cuda-* | grep -v '\.d$' | head -1)
cp "$t" .build-cuda/cuda-tests
strip .build-cuda/flashoverlap .build-cuda/cuda-tests
ls -la .build-cuda
