"""A newcomer's first run, outside the notebooks: the venv `make` creates, and the learner's Lab.

`make lab` and `make test` start by creating .venv with the Python they find. Debian and
Ubuntu ship Python's ensurepip (which puts pip into a new venv) apart, in python3-venv; without
it `python3 -m venv` used to stop half-way and leave a .venv with no pip, and every later run
failed with "No module named pip" until the learner deleted .venv by hand. These tests run the
Makefile on a copy of its three files with ensurepip made unavailable (a stand-in module on
PYTHONPATH that cannot be imported, as on Debian), then check the one-sentence advice, that no
.venv is left, and that the next run recovers. The next run's pip install is cut off from
every package index (the test must not download); reaching it shows the venv is whole again.
tests/test_lab_unprivileged.py makes the same failed start, then a full first `make lab`.

The learner's Jupyter server (jupyter/learner/jupyter_server_config.py) hands a notebook out
with the Python version of the kernel that will run it, so JupyterLab has nothing to change
when it opens one, and saves it without that version: opening a notebook leaves it byte for
byte the same. tests/test_browser.py checks the same in JupyterLab itself.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ipykernel.ipkernel import IPythonKernel
from jupyter_client.kernelspec import KernelSpecManager
from traitlets.config.loader import PyFileConfigLoader

ROOT = Path(__file__).resolve().parent.parent
LEARNER_CONFIG = ROOT / "jupyter" / "learner"
MAKEFILE_INPUTS = ("Makefile", "pyproject.toml", "constraints.txt")
NO_ENSUREPIP = 'raise ModuleNotFoundError("No module named \'ensurepip\'", name="ensurepip")\n'
NO_PIP = "No module named pip"


@pytest.fixture
def project(tmp_path):
    """A directory with the Makefile and the files its install rules depend on."""
    for name in MAKEFILE_INPUTS:
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def make(project: Path, target: str, without_ensurepip: bool = False, python=sys.executable):
    """Run ``make target`` with ``python``, offline; return (exit status, all output)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    # pip reads no configuration and no index: an install stops at its first download.
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    if without_ensurepip:
        shim = project.parent / f"{project.name}-no-ensurepip" / "ensurepip"
        shim.mkdir(parents=True, exist_ok=True)
        (shim / "__init__.py").write_text(NO_ENSUREPIP)
        env["PYTHONPATH"] = str(shim.parent)
    result = subprocess.run(
        ["make", "--no-print-directory", "-C", str(project), target, f"PYTHON={python}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )
    return result.returncode, result.stdout


def advice_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "cannot create a virtual environment" in line]


@pytest.mark.parametrize("target", ["lab", "test"])
def test_without_ensurepip_make_says_what_to_install_and_leaves_no_venv(project, target):
    status, output = make(project, target, without_ensurepip=True)
    assert status != 0
    minor = "{}.{}".format(*sys.version_info[:2])
    (advice,) = advice_lines(output)  # one sentence, on one line
    assert f"sudo apt install python{minor}-venv" in advice, output
    assert f"run 'make {target}' again" in advice, output
    assert NO_PIP not in output and "Traceback" not in output, output
    assert not (project / ".venv").exists()


def test_the_run_after_installing_the_venv_module_recovers(project):
    make(project, "lab", without_ensurepip=True)
    status, output = make(project, "lab")  # python3-venv is there now
    assert "==> Creating a virtual environment in .venv/" in output, output
    assert NO_PIP not in output and not advice_lines(output), output
    assert "==> Installing tfscratch, JupyterLab" in output  # pip runs: only the index is cut
    assert status != 0  # no package index in this test: the install itself stops
    pip = subprocess.run(
        [str(project / ".venv" / "bin" / "python"), "-m", "pip", "--version"], check=False
    )
    assert pip.returncode == 0


def test_a_venv_that_python_leaves_half_made_is_removed(project, tmp_path):
    """If venv itself stops after making .venv (as Debian's did before it had the check
    above), the rule removes what it left and gives the same advice."""
    python = tmp_path / "python-half-venv"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1 $2" = "-m venv" ]; then\n'
        f'    {sys.executable} -m venv --without-pip "$3"\n'
        '    echo "Error: ensurepip is not available" >&2; exit 1\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    status, output = make(project, "lab", python=python)
    assert status != 0 and len(advice_lines(output)) == 1, output
    assert not (project / ".venv").exists()


def test_a_venv_left_without_pip_is_made_again(project):
    """A .venv an older Makefile (or an interrupted run) left without pip is not a dead end."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", project / ".venv"], check=True)
    _, output = make(project, "test")
    assert ".venv/ has no pip (an earlier run stopped half-way): making it again" in output
    assert NO_PIP not in output, output
    assert (project / ".venv" / "bin" / "pip").exists()


def test_a_whole_venv_is_left_alone(project):
    """The check costs nothing once the venv is there: no second venv, no message."""
    subprocess.run([sys.executable, "-m", "venv", project / ".venv"], check=True)
    marker = project / ".venv" / "kept"
    marker.touch()
    _, output = make(project, "lab")
    assert "Creating a virtual environment" not in output and marker.exists()


# --------------------------------------------------------------------------- learner's server


def learner_contents_manager(root_dir: Path):
    config = PyFileConfigLoader("jupyter_server_config.py", path=str(LEARNER_CONFIG)).load_config()
    return config.ServerApp.contents_manager_class(root_dir=str(root_dir))


def test_the_learner_server_hands_notebooks_out_as_jupyterlab_will_write_them(tmp_path):
    """JupyterLab writes the kernel's language_info and kernelspec into a notebook it opens,
    and marks it modified unless they are equal to what it holds: they are."""
    name = "08_kv_cache_generation.ipynb"
    shutil.copy(ROOT / "notebooks" / name, tmp_path / name)
    model = asyncio.run(learner_contents_manager(tmp_path).get(name))
    metadata = model["content"]["metadata"]
    assert metadata["language_info"] == IPythonKernel.language_info  # with the version
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert metadata["kernelspec"] == {
        "name": "python3",
        "display_name": spec.display_name,
        "language": spec.language,
    }


def test_a_notebook_opened_and_saved_by_the_learner_server_is_unchanged(tmp_path):
    name = "01_tokenizer.ipynb"
    stored = (ROOT / "notebooks" / name).read_bytes()
    (tmp_path / name).write_bytes(stored)
    manager = learner_contents_manager(tmp_path)
    model = asyncio.run(manager.get(name))
    asyncio.run(manager.save(model, name))
    assert (tmp_path / name).read_bytes() == stored
