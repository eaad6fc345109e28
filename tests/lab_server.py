"""Start `make lab` (or `make formgrader`) on a free port and wait until JupyterLab answers.

The server runs the Makefile's own command, so what is tested is what a learner starts.
Everything the server writes outside the notebooks' folder (runtime files, workspaces,
settings) goes to a temporary directory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 600  # `make lab` may first create the venv and install the packages


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET; errors such as 404 are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class LabServer:
    """`make lab` serving ``lab_dir`` on 127.0.0.1, with a known token."""

    def __init__(
        self,
        lab_dir: Path,
        scratch: Path,
        extra_args: str = "",
        command=None,
        root: Path = ROOT,
        python: str | None = None,
        target: str = "lab",
        make_vars: tuple[str, ...] = (),
    ):
        """``command`` wraps the make command line (e.g. to run it as another user);
        ``root`` is the repository whose Makefile runs; ``python`` the one that makes its
        venv when there is none yet; ``target`` the make target (``lab``, ``formgrader``)
        and ``make_vars`` more ``NAME=value`` settings for it."""
        self.root = root
        self.port = free_port()
        self.token = os.urandom(16).hex()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = scratch / "lab.log"
        lab_args = (
            f"--no-browser --ip=127.0.0.1 --port={self.port} "
            f"--IdentityProvider.token={self.token} {extra_args}"
        )
        make = ["make", "--no-print-directory", "-C", str(root), target]
        make += [f"LAB_DIR={lab_dir}", f"LAB_ARGS={lab_args}", *make_vars]
        if python:
            make.append(f"PYTHON={python}")
        self.command = (command or (lambda argv: argv))(make)
        self.env = {
            **os.environ,
            "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
            "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "workspaces"),
            "JUPYTERLAB_SETTINGS_DIR": str(scratch / "settings"),
        }
        self.process: subprocess.Popen | None = None

    def api(self, path: str) -> tuple[int, bytes]:
        return get(f"{self.url}{path}?token={self.token}")

    def start(self) -> LabServer:
        log = self.log_path.open("wb")
        # A session of its own, so stopping the server also stops make's child processes.
        self.process = subprocess.Popen(
            self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"`make lab` exited early:\n{self.log()}")
            try:
                status, body = self.api("/api/status")
                if status == 200 and "started" in json.loads(body):
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer in {START_TIMEOUT_S} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
