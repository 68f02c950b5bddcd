"""Execute every notebook in this folder headlessly (nbclient); exit non-zero on the first
failure. Used by the test suite (tests/it/notebooks.rs); outputs are not written back, so
the checked-in notebooks stay stripped."""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

here = Path(__file__).resolve().parent
books = sorted(here.glob("*.ipynb")) if len(sys.argv) < 2 else [Path(p) for p in sys.argv[1:]]
if not books:
    sys.exit("no notebooks found")
for nb_path in books:
    nb = nbformat.read(nb_path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(here)}})
    try:
        client.execute()
    except Exception as e:  # report which notebook and cell, then fail
        sys.exit(f"{nb_path.name}: {e}")
    print(f"{nb_path.name}: ok ({len(nb.cells)} cells)")
