"""How much memory each notebook's kernel holds: peak and after the last cell.

Binder gives a learner about 2 GB for every kernel they have open, and JupyterLab keeps a
kernel alive until it is shut down, so what a notebook costs is what its kernel holds. This
script runs each notebook top to bottom in a fresh kernel under nbclient (as nbval and
``make notebooks`` do, working directory ``notebooks/``) and reads the kernel process's
``/proc/<pid>/status``:

* **peak**: ``VmHWM``, the largest resident set the kernel reached (the number Binder's
  memory limit is about);
* **after the last cell**: ``VmRSS`` once every cell has run, what an idle kernel keeps
  holding while the learner moves on to the next notebook.

Linux only (``/proc``). Not part of ``make test``: ``make bench-memory`` runs it.

Usage::

    python benchmarks/bench_memory.py                      # every notebook
    python benchmarks/bench_memory.py notebooks/01_tokenizer.ipynb --limit-mb 350
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT_S = 600


def kernel_memory_mb(pid: int) -> tuple[float, float]:
    """(peak, current) resident memory of process ``pid`` in MB (10^6 bytes)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = int(value.split()[0]) * 1024 / 1e6  # the kernel reports kB
    return fields["VmHWM"], fields["VmRSS"]


def measure(path: Path) -> dict:
    """Run ``path`` in a fresh kernel; its peak and final RSS (MB) and run time (s)."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    with client.setup_kernel():
        pid = client.km.provisioner.process.pid
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        peak, after = kernel_memory_mb(pid)
    return {"peak": peak, "after": after, "seconds": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: all ten")
    parser.add_argument(
        "--limit-mb", type=float, help="exit 1 if a kernel's peak exceeds this (MB)"
    )
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    print("| notebook | kernel peak (MB) | after the last cell (MB) | run time (s) |")
    print("|---|---:|---:|---:|")
    worst = 0.0
    for path in paths:
        result = measure(path.resolve())
        worst = max(worst, result["peak"])
        print(
            f"| {path.stem} | {result['peak']:.0f} | {result['after']:.0f} "
            f"| {result['seconds']:.0f} |",
            flush=True,
        )
    if args.limit_mb is not None and worst > args.limit_mb:
        print(f"largest kernel peak {worst:.0f} MB exceeds --limit-mb {args.limit_mb:.0f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
