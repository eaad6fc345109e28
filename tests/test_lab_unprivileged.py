"""A learner's first `make lab`, as an ordinary user, on a copy of this working tree.

`make lab` passes --allow-root only when it runs as root (containers, CI). This test runs the
same command as a user without privileges: as root it creates one (`useradd`) and runs
`make lab` through `runuser`; as anyone else it is already such a user. The user gets a copy
of the working tree without .venv, so `make lab` does what it does on a learner's first run:
creates the venv with the system's Python, installs the learner's packages (showing what it
does), then starts JupyterLab, which must answer. The learner's venv must not hold nbgrader.

Before that, the learner's very first attempt runs on a Python without ensurepip (as Debian's
and Ubuntu's python3 without the python3-venv package; here a stand-in module on PYTHONPATH
that cannot be imported): `make lab` must say in one sentence what to install and leave no
.venv behind, so that the next `make lab`, the real first install above, just works.

Marked `lab`: `make test-browser` runs it (a few minutes: the install downloads ~100
packages).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from .lab_server import ROOT, LabServer

pytestmark = pytest.mark.lab

LEARNER = "tfscratch-learner"
# A Python every user can run (a pyenv Python under /root is not one).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
NOT_COPIED = (".venv", "build", ".git", "*.egg-info", "__pycache__", ".pytest_cache")


def ensure_learner_account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(LEARNER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", LEARNER], check=True)
        return pwd.getpwnam(LEARNER)


@pytest.fixture
def learner_lab():
    assert SYSTEM_PYTHON, "no python3 in /usr/local/bin, /usr/bin or /bin"
    scratch = Path(tempfile.mkdtemp(prefix="tfscratch-learner-"))
    os.chmod(scratch, 0o755)
    repo = scratch / "tfscratch"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(*NOT_COPIED))
    # Python without ensurepip, as Debian's python3 without python3-venv.
    no_ensurepip = scratch / "no-ensurepip" / "ensurepip"
    no_ensurepip.mkdir(parents=True)
    (no_ensurepip / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'ensurepip\'", name="ensurepip")\n'
    )
    command = None
    if os.geteuid() == 0:
        account = ensure_learner_account()
        for path in [scratch, *scratch.rglob("*")]:
            os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)

        def command(argv):
            return ["runuser", "-u", LEARNER, "--", "env", f"HOME={account.pw_dir}", *argv]

    server = LabServer(
        repo / "notebooks", scratch, command=command, root=repo, python=SYSTEM_PYTHON
    )
    server.no_ensurepip = no_ensurepip.parent
    yield server
    server.stop()
    shutil.rmtree(scratch, ignore_errors=True)


def test_first_make_lab_as_an_unprivileged_user_installs_and_serves(learner_lab):
    # A first attempt on a Python without ensurepip: one sentence of advice, no .venv left.
    without_venv_module = subprocess.run(
        learner_lab.command,
        env={**learner_lab.env, "PYTHONPATH": str(learner_lab.no_ensurepip)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    advice = without_venv_module.stdout
    assert without_venv_module.returncode != 0, advice
    assert "cannot create a virtual environment with pip" in advice, advice
    assert "sudo apt install python3." in advice and "-venv" in advice, advice
    assert not (learner_lab.root / ".venv").exists()
    # The next run (the venv module is there): the venv is made, filled and served.
    server = learner_lab.start()
    status, body = server.api("/api/contents")
    assert status == 200
    assert b"01_tokenizer.ipynb" in body
    log = server.log()
    # It said what it was doing, and pip showed its progress.
    assert "==> Creating a virtual environment" in log
    assert "==> Installing tfscratch, JupyterLab" in log
    assert "Successfully installed" in log and "--quiet" not in log
    assert "--allow-root" not in log and "Running as root" not in log
    # The server process belongs to the unprivileged user.
    user = LEARNER if os.geteuid() == 0 else str(os.geteuid())
    jupyter = subprocess.run(
        ["pgrep", "-u", user, "-f", "jupyter-lab"], capture_output=True, text=True, check=False
    )
    assert jupyter.stdout.strip(), log
    # A learner's install has no instructor tools.
    venv_python = server.root / ".venv" / "bin" / "python"
    probe = subprocess.run(
        [str(venv_python), "-c", "import importlib.util as u; print(u.find_spec('nbgrader'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "None"
