"""What the three benchmark scripts share: machine facts, BLAS threads, markdown tables.

Only the benchmarks import this file. PyTorch is optional: :func:`load_torch` returns None
when it is not installed, and the scripts then print the NumPy rows only.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

import tfscratch


def load_torch():
    """The ``torch`` module, or None when PyTorch is not installed (it is optional)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _loaded_openblas() -> Path | None:
    """The OpenBLAS shared library NumPy loaded, read from this process's memory map."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux
        return None
    for line in maps.splitlines():
        path = line.rsplit(" ", 1)[-1]
        if "openblas" in Path(path).name.lower() and ".so" in path:
            return Path(path)
    return None


def _openblas_call(names: tuple[str, ...], restype):
    """Call the first of ``names`` the loaded OpenBLAS exports (no arguments), or None."""
    library = _loaded_openblas()
    if library is None:
        return None
    blas = ctypes.CDLL(str(library))
    for symbol in names:
        function = getattr(blas, symbol, None)
        if function is not None:
            function.restype = restype
            return function()
    return None


def blas_kernel() -> str:
    """The CPU kernel OpenBLAS picked (e.g. ``Haswell``, ``Zen``), and OPENBLAS_CORETYPE if set."""
    core = _openblas_call(
        ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"),
        ctypes.c_char_p,
    )
    name = core.decode() if core else "?"
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return f"{name} (OPENBLAS_CORETYPE={forced})" if forced else name


def load_package_copy(folder: Path, name: str = "tfscratch_before"):
    """Import the ``tfscratch`` package inside ``folder`` (for example a git worktree of an
    earlier commit: ``git worktree add /tmp/before HEAD~1``) under the name ``name``, so one
    run can time the two versions side by side, round by round."""
    init = Path(folder) / "tfscratch" / "__init__.py"
    if not init.is_file():
        raise SystemExit(f"--before {folder}: no tfscratch/__init__.py there")
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(init.parent)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def describe_checkout(folder: Path) -> str:
    """``folder``'s git commit (short hash and subject's start), or the folder's name."""
    try:
        line = subprocess.run(
            ["git", "-C", str(folder), "log", "-1", "--format=%h %s"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return Path(folder).name
    return line[:60]


def numpy_blas_threads() -> int:
    """How many threads NumPy's BLAS (OpenBLAS) runs a matmul on.

    Asks the loaded OpenBLAS itself (its ``*get_num_threads*`` symbol, named with a
    ``scipy_`` prefix and a ``64_`` suffix in NumPy's wheels); falls back to the variables
    OpenBLAS reads, then to the number of cores this process may use.
    """
    library = _loaded_openblas()
    if library is not None:
        blas = ctypes.CDLL(str(library))
        for symbol in (
            "scipy_openblas_get_num_threads64_",
            "openblas_get_num_threads64_",
            "openblas_get_num_threads",
        ):
            getter = getattr(blas, symbol, None)
            if getter is not None:
                getter.restype = ctypes.c_int
                return int(getter())
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(variable, "").isdigit():
            return int(os.environ[variable])
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas_name() -> str:
    blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {})
    return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()


def machine_rows(torch=None, compares_torch: bool = True) -> list[tuple[str, str]]:
    """``(what, value)`` rows describing the machine and the libraries, for the table header.

    ``compares_torch=False``: a script that never runs PyTorch lists no PyTorch row.
    """
    rows = [
        ("CPU", _cpu_model()),
        ("os.cpu_count()", str(os.cpu_count())),
        ("Python", platform.python_version()),
        ("NumPy", f"{np.__version__} ({_blas_name()})"),
        ("NumPy BLAS threads", str(numpy_blas_threads())),
        ("OpenBLAS kernel", blas_kernel()),
        ("tfscratch", tfscratch.__version__),
    ]
    if not compares_torch:
        return rows
    if torch is None:
        rows.append(("PyTorch", "not installed (pip install torch==2.13.0 to compare)"))
    else:
        rows.append(("PyTorch", torch.__version__))
        rows.append(("PyTorch threads", str(torch.get_num_threads())))
    return rows


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    """A GitHub markdown table; numbers are right-aligned, text left-aligned."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(header[i]), *(len(row[i]) for row in cells)) for i in range(len(header))]
    numeric = [
        all(_looks_numeric(row[i]) for row in cells) if cells else False for i in range(len(header))
    ]

    def line(values):
        padded = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if num else ("-" * (w + 2)) for w, num in zip(widths, numeric)
        )
        + "|"
    )
    return "\n".join([line(header), rule, *(line(row) for row in cells)])


def _looks_numeric(text: str) -> bool:
    if text in ("", "-"):  # an empty cell in a column of numbers
        return True
    stripped = text.replace(",", "").replace("x", "").replace("%", "").strip()
    try:
        float(stripped)
    except ValueError:
        return False
    return True


def print_header(title: str, torch=None, compares_torch: bool = True) -> None:
    """The script's title and the machine table."""
    print(f"## {title}\n")
    rows = machine_rows(torch, compares_torch=compares_torch)
    print(markdown_table(["machine", "value"], [list(row) for row in rows]))
    print()


def median(values) -> float:
    """The median of a sequence of numbers, as a float."""
    return float(statistics.median(values))


def milliseconds(seconds: float) -> str:
    """Seconds as a string of milliseconds with two decimals."""
    return f"{seconds * 1e3:.2f}"


def write_runs(table, out: Path, **to_csv_options):
    """Write a table of runs (a ``pandas.DataFrame``) to the CSV ``out`` (its folder made if
    needed), say so, and return the table: the runs scripts' last step."""
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False, **to_csv_options)
    print(f"\nwrote {out}\n")
    return table
