"""Binder's build, replayed: binder/requirements.txt into a fresh venv, then binder/postBuild.

repo2docker (what mybinder.org builds images with) sees binder/requirements.txt and
binder/runtime.txt, installs the requirements with
``${KERNEL_PYTHON_PREFIX}/bin/pip install --no-cache-dir -r "binder/requirements.txt"`` from
the repository's root, then runs ``binder/postBuild`` there. This test does the same in a
fresh venv of this Python and then imports every module the notebooks import, so a
requirement missing from Binder's file fails here and not on a learner's Binder.

It downloads and installs about 115 packages (a few minutes), so it is marked `binder`:
`make test` leaves it out, `make test-binder` (and .ci/run) runs it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.binder

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def notebook_imports() -> set[str]:
    """Top-level names of every module imported in a code cell of the course notebooks."""
    modules = set()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            # IPython magics and shell lines are not Python.
            lines = [
                line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))
            ]
            for node in ast.walk(ast.parse("\n".join(lines))):
                if isinstance(node, ast.Import):
                    modules.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules.add(node.module.split(".")[0])
    return modules


@pytest.fixture(scope="module")
def binder_venv(tmp_path_factory) -> Path:
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime == f"python-{sys.version_info.major}.{sys.version_info.minor}", (
        f"binder/runtime.txt asks for {runtime}; run this test with that Python"
    )
    venv = tmp_path_factory.mktemp("binder") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    install = [str(venv / "bin" / "pip"), "install", "--no-cache-dir", "-r"]
    install.append("binder/requirements.txt")
    subprocess.run(install, cwd=ROOT, env=env, check=True)
    subprocess.run(["binder/postBuild"], cwd=ROOT, env=env, check=True)
    return venv


def test_binder_image_imports_everything_the_notebooks_import(binder_venv):
    modules = sorted(notebook_imports())
    assert {"numpy", "matplotlib", "pandas", "tfscratch"} <= set(modules)
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    result = subprocess.run(
        [str(binder_venv / "bin" / "python"), "-c", code, *modules],
        cwd=ROOT / "notebooks",
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_binder_image_runs_jupyterlab_and_the_widgets(binder_venv):
    python = str(binder_venv / "bin" / "python")
    code = "import jupyterlab, ipywidgets, ipykernel, tqdm.auto; print(jupyterlab.__version__)"
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_binder_image_holds_exactly_the_pinned_packages(binder_venv):
    pip = str(binder_venv / "bin" / "pip")
    check = subprocess.run([pip, "check"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    freeze = subprocess.run(
        [pip, "freeze", "--exclude-editable"], capture_output=True, text=True, check=True
    ).stdout
    installed = {canonical(line.split("==")[0]): line.split("==")[1] for line in freeze.split()}
    pinned = {}
    for line in (BINDER / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pinned[canonical(name)] = version
    # Nothing unpinned came in as a dependency of a pinned package.
    assert installed == pinned
    editable = subprocess.run(
        [str(binder_venv / "bin" / "python"), "-c", "import tfscratch; print(tfscratch.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(editable).resolve().parent == (ROOT / "tfscratch").resolve()
