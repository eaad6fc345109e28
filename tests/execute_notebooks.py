"""Re-execute course notebooks in place and store them clean.

Usage: ``python tests/execute_notebooks.py [notebooks/NN_name.ipynb ...]`` (default: all of
them). ``make notebooks`` runs this inside the project's venv, so the stored outputs are made
with the pinned versions of ``constraints.txt`` and match what ``make test`` (nbval) produces.
It lives with the tests, not in notebooks/, so the folder a learner opens holds only the course.

Each notebook runs top to bottom in a fresh kernel (``python3``, the venv's), with the
notebooks folder as working directory, exactly as nbval runs it. Afterwards the notebook is
stripped of everything that is not course content or that differs between machines: the
kernel and language stay, but not the Python version the kernel ran (``language_info.version``,
a patch release that changes from laptop to laptop); widget state, execution timings and any
cell metadata other than ``nbgrader``, ``tags`` (nbval's ``nbval-ignore-output``, the README
figure's ``readme-figure``, ``claim-check``) and ``jupyter.source_hidden`` (a collapsed solution
or claim-check cell; JupyterLab's other view state is dropped) go.

The first picture drawn by the cell tagged ``readme-figure`` is saved as a thumbnail in
``notebooks/figures/NN_name.png`` for the course overview in the README.
"""

from __future__ import annotations

import argparse
import base64
import io
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from PIL import Image

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
KEPT_CELL_METADATA = ("nbgrader", "tags")
KEPT_NOTEBOOK_METADATA = ("kernelspec", "language_info")
# The kernel every notebook runs in, as JupyterLab writes it when it opens one with the venv's
# python3 kernel: stored exactly so, opening a notebook does not change it.
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
# Keys of the kept metadata whose value depends on the machine that executed the notebook.
MACHINE_METADATA = {"language_info": ("version",)}
CELL_TIMEOUT_S = 600
FIGURES = NOTEBOOKS_DIR / "figures"
README_FIGURE_TAG = "readme-figure"
THUMBNAIL_WIDTH = 360


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop volatile metadata (in place) and return the notebook."""
    nb.metadata = nbformat.NotebookNode(
        {key: nb.metadata[key] for key in KEPT_NOTEBOOK_METADATA if key in nb.metadata}
    )
    nb.metadata.kernelspec = nbformat.NotebookNode(KERNELSPEC)
    for key, machine_keys in MACHINE_METADATA.items():
        for machine_key in machine_keys:
            nb.metadata.get(key, {}).pop(machine_key, None)
    for index, cell in enumerate(nb.cells):
        kept = {key: cell.metadata[key] for key in KEPT_CELL_METADATA if key in cell.metadata}
        if cell.metadata.get("jupyter", {}).get("source_hidden"):
            kept["jupyter"] = {"source_hidden": True}
        cell.metadata = nbformat.NotebookNode(kept)
        # Stable cell ids keep diffs small when a notebook is re-executed.
        cell.id = f"cell-{index:03d}"
    return nb


def save_thumbnail(nb: nbformat.NotebookNode, path: Path) -> None:
    """Save the README thumbnail of ``nb`` (if a cell is tagged for it) next to the notebooks."""
    for cell in nb.cells:
        if README_FIGURE_TAG not in cell.metadata.get("tags", []):
            continue
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                image = Image.open(io.BytesIO(base64.b64decode(png)))
                height = round(image.height * THUMBNAIL_WIDTH / image.width)
                FIGURES.mkdir(exist_ok=True)
                image.resize((THUMBNAIL_WIDTH, height), Image.LANCZOS).save(
                    FIGURES / f"{path.stem}.png", optimize=True
                )
                return


def execute(path: Path) -> float:
    """Execute one notebook in place; return its wall-clock run time in seconds."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        allow_errors=False,
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    nbformat.validate(nb)
    nbformat.write(clean(nb), path)
    save_thumbnail(nb, path)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    total = 0.0
    for path in paths:
        print(f"{path.name:<40}", end="", flush=True)
        elapsed = execute(path)
        total += elapsed
        print(f"{elapsed:6.1f} s")
    print(f"{'total':<40}{total:6.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
