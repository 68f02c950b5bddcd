"""How long an H200's clocks take to settle under a steady GEMM load, and how much slower
GEMMs run once they have (the sustained regime of METHOD.md), measured with PyTorch on the
lent machine while nvidia-smi samples clocks, power and temperature every 100 ms.

Phases (rested 15 s between): a steady loop of 8192^3 bf16 GEMMs for 60 s, timed in
batches of 10 with CUDA events; then, per GEMM shape of a llama-3-8b layer at tp 8 (8192
tokens: the forward and backward GEMMs of one rank), a short burst on the rested GPU
(3 GEMMs after 2 warm-up) and the same shape inside a 25 s loop of the whole layer's
GEMMs, whose last 10 s are its steady state. Writes OUT/clocks.json and OUT/smi.csv.

Usage: python device-h200-clocks.py OUTDIR
"""

import json
import os
import subprocess
import sys
import time

import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
smi = subprocess.Popen(
    ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu",
     "--format=csv,noheader,nounits", "-lms", "100"],
    stdout=open(os.path.join(out, "smi.csv"), "w"), stderr=subprocess.STDOUT)
# Why clocks drop (power cap, thermal), sampled apart: an unknown field must not cost the
# clock samples.
why = subprocess.Popen(
    ["nvidia-smi", "--query-gpu=timestamp,clocks_event_reasons.active",
     "--format=csv,noheader", "-lms", "500"],
    stdout=open(os.path.join(out, "reasons.csv"), "w"), stderr=subprocess.STDOUT)
t0 = time.time()
dev = torch.device("cuda")
res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "phases": {}}


def mm(m, n, k):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    return a, b


def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / reps  # ms


def rest(sec):
    torch.cuda.synchronize()
    time.sleep(sec)


# Phase 1: rested 15 s, then 8192^3 back to back for 60 s.
a, b = mm(8192, 8192, 8192)
timed(lambda: a @ b, 2)
rest(15)
series = []
start = time.time()
while time.time() - start < 60:
    ms = timed(lambda: a @ b, 10)
    series.append((round(time.time() - t0, 3), ms))
res["phases"]["steady_8192"] = {"start_s": round(start - t0, 3), "series": series}
del a, b

# Phase 2: a llama-3-8b layer's GEMMs at tp 8, 8192 tokens (m x n x k).
T, H, F, QKV = 8192, 4096, 14336, 4096 + 2 * 1024
tp = 8
shapes = {
    "qkv": (T, QKV // tp, H), "proj": (T, H, H // tp),
    "fc1": (T, 2 * F // tp, H), "fc2": (T, H, F // tp),
    "fc2.dgrad": (T, F // tp, H), "fc2.wgrad": (F // tp, H, T),
    "fc1.dgrad": (T, H, 2 * F // tp), "fc1.wgrad": (2 * F // tp, H, T),
    "proj.dgrad": (T, H // tp, H), "proj.wgrad": (H // tp, H, T),
    "qkv.dgrad": (T, H, QKV // tp), "qkv.wgrad": (QKV // tp, H, T),
}
ops = {name: mm(*s) for name, s in shapes.items()}
burst = {}
for name, (x, y) in ops.items():
    rest(2)
    timed(lambda: x @ y, 2)
    burst[name] = timed(lambda: x @ y, 3)
rest(15)
layer = []
start = time.time()
while time.time() - start < 25:
    per = {name: timed(lambda: x @ y, 1) for name, (x, y) in ops.items()}
    layer.append((round(time.time() - t0, 3), per))
res["phases"]["layer_burst_ms"] = burst
res["phases"]["layer_loop"] = {"start_s": round(start - t0, 3), "series": layer}
res["shapes"] = shapes
rest(3)
smi.terminate()
why.terminate()
res["t0_unix"] = t0
json.dump(res, open(os.path.join(out, "clocks.json"), "w"))
print("done", round(time.time() - t0, 1), "s")
