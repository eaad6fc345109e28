"""The course's nbval settings (tests/nbval_plugin.py) as `make test` uses them."""

import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent


def test_a_cell_that_sends_thousands_of_messages_passes(tmp_path):
    # A training cell's progress bar, redrawn for minutes on a busy machine, sends thousands
    # of messages before nbval reads the first; ZeroMQ's default limit (1,000 queued) dropped
    # the last ones and nbval failed a cell that had run fine (notebook 11 under load). Without
    # the plugin's fix this cell fails with "Timeout of 60 seconds exceeded waiting for output".
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "from tfscratch.progress import progress_bar\n"
            "with progress_bar(30000, 'steps') as bar:\n"
            "    for _ in range(30000):\n"
            "        bar.update(1)\n"
            "        bar.refresh()  # one redraw per step: as many messages as a slow run sends\n"
        ),
        nbformat.v4.new_code_cell("print(bar.n)"),
    ]
    notebook.cells[0].metadata["tags"] = ["nbval-ignore-output"]  # a widget: not compared
    notebook.cells[1].outputs = [nbformat.v4.new_output("stream", text="30000\n")]
    for count, cell in enumerate(notebook.cells, start=1):
        cell.execution_count = count
    path = tmp_path / "many_messages.ipynb"
    nbformat.write(notebook, path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval",
            "--nbval-current-env",
            "-p",
            "tests.nbval_plugin",
            "-q",
            "-p",
            "no:cacheprovider",
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout
