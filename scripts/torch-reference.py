"""The outside reference for the several-GPU runs: the same TPSP shapes through PyTorch's
own ops, timed the way `flashoverlap run` times its schedules (CUDA events around each
repetition, after warm-up; the median over repetitions of the slowest rank).

Variants per workload:
  ag-gemm  - `nccl`:  all_gather_into_tensor, then one matmul
           - `fused`: torch.ops.symm_mem.fused_all_gather_matmul (symmetric memory)
  gemm-rs  - `nccl`:  one matmul, then reduce_scatter_tensor
           - `fused`: torch.ops.symm_mem.fused_matmul_reduce_scatter
  mlp      - both of the above around the activation, `nccl` and `fused`

Run with torchrun, one process per GPU (NVLink multicast stays off, as the device README
asks; scripts/device-common.sh exports the variables):
  torchrun --nproc-per-node N scripts/torch-reference.py --out DIR/torch-tpN.json
Writes one JSON file (rank 0): every case with its median, p10 and p90 in microseconds.
"""

import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="ag-gemm,gemm-rs,mlp")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=16384)
    ap.add_argument("--tokens", default="8192,32768,131072")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", required=True)
    return ap.parse_args()


def timed(fn, warmup, repeats, group):
    """Median / p10 / p90 over repetitions of the slowest rank's time (microseconds)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        dist.barrier(group=group)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        t = torch.tensor([start.elapsed_time(end) * 1e3], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        times.append(t.item())
    times.sort()
    q = lambda f: times[min(len(times) - 1, round(f * (len(times) - 1)))]
    return {"median_us": statistics.median(times), "p10_us": q(0.1), "p90_us": q(0.9)}


def main():
    a = parse()
    dist.init_process_group("nccl")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    group = dist.group.WORLD
    world, rank = dist.get_world_size(), dist.get_rank()
    name = group.group_name
    fused_ok = True
    try:
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group

        enable_symm_mem_for_group(name)
    except Exception as e:  # an old PyTorch: the NCCL variants still run
        fused_ok = False
        print(f"symmetric memory unavailable: {e}", file=sys.stderr)
    sm = torch.ops.symm_mem
    h, ffn = a.hidden, a.ffn
    if ffn % world or h % world:
        sys.exit(f"hidden {h} and ffn {ffn} must divide by the {world} ranks")
    bf = torch.bfloat16
    cases = []
    for tokens in [int(t) for t in a.tokens.split(",")]:
        if tokens % world:
            sys.exit(f"tokens {tokens} must divide by the {world} ranks")
        shard = tokens // world
        x = torch.randn(shard, h, device="cuda", dtype=bf)
        w1 = torch.randn(h, ffn // world, device="cuda", dtype=bf) / h**0.5
        w2 = torch.randn(ffn // world, h, device="cuda", dtype=bf) / (ffn // world) ** 0.5
        a_in = torch.randn(tokens, ffn // world, device="cuda", dtype=bf)
        gathered = torch.empty(tokens, h, device="cuda", dtype=bf)
        out_shard = torch.empty(shard, h, device="cuda", dtype=bf)

        def ag_nccl():
            dist.all_gather_into_tensor(gathered, x, group=group)
            return gathered @ w1

        def rs_nccl(inp=a_in):
            dist.reduce_scatter_tensor(out_shard, inp @ w2, group=group)
            return out_shard

        def ag_fused():
            return sm.fused_all_gather_matmul(x, [w1], 0, name)[1][0]

        def rs_fused(inp=a_in):
            return sm.fused_matmul_reduce_scatter(inp, w2, "sum", 0, name)

        variants = {
            "ag-gemm": {"nccl": ag_nccl, "fused": ag_fused},
            "gemm-rs": {"nccl": rs_nccl, "fused": rs_fused},
            "mlp": {
                "nccl": lambda: rs_nccl(torch.nn.functional.gelu(ag_nccl())),
                "fused": lambda: rs_fused(torch.nn.functional.gelu(ag_fused())),
            },
        }
        for w in a.workloads.split(","):
            for v, fn in variants[w].items():
                if v == "fused" and not fused_ok:
                    continue
                try:
                    r = timed(fn, a.warmup, a.repeats, group)
                except Exception as e:
                    r = {"error": str(e).splitlines()[0]}
                r.update(workload=w, variant=v, tokens=tokens, tp=world, hidden=h, ffn=ffn)
                cases.append(r)
                if rank == 0:
                    print(json.dumps(r), flush=True)
    if rank == 0:
        meta = {
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "device": torch.cuda.get_device_name(),
            "world": world,
        }
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "cases": cases}, f, indent=1)
            f.write("\n")
    dist.barrier(group=group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
