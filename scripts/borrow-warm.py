"""Give a calibrated profile warm GEMM times borrowed from another card's calibration.

A partial GEMM that follows one over the same weight finds B in L2 and runs faster than
its cold time (`warm_us` beside `us` in `[[gpu.gemm.measured]]`, which `calibrate` has
timed since 2026-12-07). A profile calibrated before that has none, so such partials are
predicted at their cold time. This writes a copy of PROFILE in which every measured shape
that DONOR also measured warm gets

    warm_us = us * (1 - kappa * (1 - min(1, donor_warm_us / donor_us)))

that is, the donor's saving scaled by kappa. kappa = the donor's HBM bandwidth over this
card's (an L2 hit saves HBM time, a smaller share of a GEMM on faster HBM); pass it, or
let the script take it from the two profiles' `hbm_gbps`. The written profile's header
says where its warm times came from: they are borrowed, not measured on this card.

    python3 scripts/borrow-warm.py PROFILE DONOR OUT [KAPPA]

results/h200-2026-12-08/README.md checks it: the H100 calibration of
results/h100-2026-12-07f lent to H200 profiles, against an H200 held-out set.
Standard library only (Python 3.11+ for tomllib).
"""

import re
import sys
import tomllib


def main() -> int:
    if len(sys.argv) not in (4, 5):
        print("usage: borrow-warm.py PROFILE DONOR OUT [KAPPA]", file=sys.stderr)
        return 2
    src, donor, out = sys.argv[1:4]
    with open(donor, "rb") as f:
        d = tomllib.load(f)
    with open(src, "rb") as f:
        s = tomllib.load(f)
    if len(sys.argv) == 5:
        kappa = float(sys.argv[4])
    else:
        kappa = d["gpu"]["hbm_gbps"] / s["gpu"]["hbm_gbps"]
    saving = {}
    for p in d["gpu"]["gemm"].get("measured", []):
        if "warm_us" in p and p["us"] > 0:
            saving[(p["dtype"], p["m"], p["n"], p["k"])] = 1.0 - min(1.0, p["warm_us"] / p["us"])
    if not saving:
        print(f"{donor}: no measured shape has warm_us", file=sys.stderr)
        return 1
    text = open(src).read()
    sep = "\n[[gpu.gemm.measured]]\n"
    blocks = text.split(sep)
    added = 0
    for i in range(1, len(blocks)):
        b = blocks[i]
        if re.search(r"^warm_us = ", b, re.M):
            continue
        key = tuple(
            re.search(rf"^{k} = (.+)$", b, re.M).group(1).strip().strip('"')
            for k in ("dtype", "m", "n", "k")
        )
        key = (key[0], int(key[1]), int(key[2]), int(key[3]))
        if key not in saving:
            continue
        us = float(re.search(r"^us = (.+)$", b, re.M).group(1))
        warm = us * (1.0 - kappa * saving[key])
        blocks[i] = re.sub(r"^(us = .+)$", lambda m: f"{m.group(1)}\nwarm_us = {warm!r}", b, count=1, flags=re.M)
        added += 1
    header = (
        f"# Warm GEMM times (warm_us) BORROWED by scripts/borrow-warm.py, not measured on this card:\n"
        f"#   this card's us times (1 - {kappa:.3f} x the saving that {donor} measured\n"
        f"#   for the same shape); {added} of {len(blocks) - 1} shapes.\n"
    )
    with open(out, "w") as f:
        f.write(header + sep.join(blocks))
    print(f"wrote {out}: warm_us on {added} of {len(blocks) - 1} shapes, kappa {kappa:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
