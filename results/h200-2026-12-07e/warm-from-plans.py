"""Section 3's diagnostic profile: own/own.toml with warm_us = us x (warm / cold) of the
section-1 plans for the shapes they timed. Writes the profile to the path given (default
/tmp/own-warm-exact.toml). Run from the repository root:
    python3 results/h200-2026-12-07e/warm-from-plans.py /tmp/own-warm-exact.toml
"""
import glob
import json
import re
import statistics
import sys

D = "results/h200-2026-12-07e"
out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/own-warm-exact.toml"
ratio = {}
for warm in glob.glob(f"{D}/l2-warm-*"):
    shape = warm.rsplit("-", 1)[1]
    med = {}
    for t in ("warm", "cold"):
        (f,) = glob.glob(f"{D}/l2-{t}-{shape}/measured-*.json")
        spans = json.load(open(f))["spans"]
        med[t] = statistics.median(s["end_us"] - s["start_us"] for s in spans if s["kind"] == "gemm")
    ratio[tuple(map(int, shape.split("x")))] = med["warm"] / med["cold"]
sep = "\n[[gpu.gemm.measured]]\n"
blocks = open(f"{D}/own/own.toml").read().split(sep)
hits = 0
for i, b in enumerate(blocks[1:], 1):
    g = lambda key: re.search(r"(?m)^%s = ([0-9.e+-]+)" % key, b).group(1)
    shape = (int(g("m")), int(g("n")), int(g("k")))
    if shape in ratio:
        w = float(g("us")) * ratio[shape]
        blocks[i] = re.sub(r"(?m)^us = ", "warm_us = %r\nus = " % w, b, count=1)
        hits += 1
open(out, "w").write(sep.join(blocks))
print(f"{out}: warm_us on {hits} shapes")
