"""Helpers the notebooks share: find the flashoverlap binary and run it (for what the
Python package does not cover yet: sweep, plot, validate), and read timelines through the
package.

The binary is $FLASHOVERLAP_BIN when set (the test suite sets it), else the repository's
target/release or target/debug build, else `cargo run --release --`.
"""

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(os.environ.get("FLASHOVERLAP_ROOT", Path(__file__).resolve().parent.parent))


def binary():
    env = os.environ.get("FLASHOVERLAP_BIN")
    if env:
        return [env]
    for kind in ("release", "debug"):
        p = ROOT / "target" / kind / "flashoverlap"
        if p.exists():
            return [str(p)]
    if shutil.which("cargo"):
        return ["cargo", "run", "--quiet", "--release", "--manifest-path", str(ROOT / "Cargo.toml"), "--"]
    raise RuntimeError("no flashoverlap binary: build it with `cargo build --release` or set FLASHOVERLAP_BIN")


def run(*args, check=True):
    """Run `flashoverlap ARGS...` and return its stdout (raises with stderr on failure)."""
    p = subprocess.run(binary() + [str(a) for a in args], capture_output=True, text=True, cwd=ROOT)
    if check and p.returncode != 0:
        raise RuntimeError(f"flashoverlap {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p.stdout


def workdir(name):
    """A fresh directory for a notebook's outputs (pictures, sweeps): notebooks/out/NAME,
    which git ignores, or under $FLASHOVERLAP_WORK when set (the tests set it)."""
    base = os.environ.get("FLASHOVERLAP_WORK") or ROOT / "notebooks" / "out"
    d = Path(base) / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def load_timeline(path):
    """A timeline JSON file (simulate --out, run --out) as (header dict, spans DataFrame),
    read and validated by the flashoverlap package."""
    import flashoverlap

    t = flashoverlap.load_timeline(path)
    header = {k: v for k, v in t.document.items() if k != "spans"}
    return header, t.to_pandas()
