"""Execute every notebook in this folder headlessly (nbclient); exit non-zero on the first
failure. Used by the test suite (tests/it/notebooks.rs); outputs are not written back, so
the checked-in notebooks stay stripped.

Every code cell that begins with `# figure` must show a picture inline (an image/png
output, as Jupyter shows it). `--figures DIR` also writes each one to DIR, named
<notebook>-<cell>.png, to look at.
"""

import argparse
import base64
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

here = Path(__file__).resolve().parent
ap = argparse.ArgumentParser()
ap.add_argument("notebooks", nargs="*", type=Path)
ap.add_argument("--figures", type=Path, help="write every inline figure here")
args = ap.parse_args()
books = args.notebooks or sorted(here.glob("*.ipynb"))
if not books:
    sys.exit("no notebooks found")
if args.figures:
    args.figures.mkdir(parents=True, exist_ok=True)
for nb_path in books:
    nb = nbformat.read(nb_path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(here)}})
    try:
        client.execute()
    except Exception as e:  # report which notebook and cell, then fail
        sys.exit(f"{nb_path.name}: {e}")
    shown = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.startswith("# figure"):
            continue
        images = [o["data"]["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
        if not images:
            sys.exit(f"{nb_path.name}: cell {i} is marked `# figure` but shows no picture inline")
        shown += len(images)
        if args.figures:
            for k, img in enumerate(images):
                (args.figures / f"{nb_path.stem}-{i}-{k}.png").write_bytes(base64.b64decode(img))
    print(f"{nb_path.name}: ok ({len(nb.cells)} cells, {shown} figures inline)")
