"""Committed notebooks are executed, clean and gradeable.

nbval checks that every stored output is reproduced; this file checks what nbval cannot:
that the stored notebooks are the course (all ten, in order), carry no stray metadata or
widget state, show no errors, warnings or machine-specific paths, and that their "Your
turn" exercises are in nbgrader's format so `make assignments` can make student versions.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
COURSE = [
    "01_tokenizer.ipynb",
    "02_softmax_and_loss.ipynb",
    "03_layernorm_dropout_gelu.ipynb",
    "04_attention.ipynb",
    "05_multi_head_attention.ipynb",
    "06_transformer_blocks.ipynb",
    "07_training.ipynb",
    "08_kv_cache_generation.ipynb",
    "09_seq2seq_translation.ipynb",
    "10_majority_classification.ipynb",
]
NOTEBOOK_METADATA = {"kernelspec", "language_info"}
CELL_METADATA = {"nbgrader", "tags"}
# An absolute path in an output means the notebook printed where it ran.
ABSOLUTE_PATH = re.compile(r"(/home/|/root/|/tmp/|/work/|/Users/|[A-Z]:\\\\)")
SOLUTION = {"solution": True, "grade": False, "locked": False, "schema_version": 3}
CHECK = {"solution": False, "grade": True, "locked": True, "schema_version": 3}

PATHS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def output_text(output) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join(output.traceback)
    data = output.get("data", {})
    return "\n".join(str(data[key]) for key in ("text/plain", "text/html") if key in data)


def test_the_course_is_the_ten_notebooks_of_the_plan():
    assert [path.name for path in PATHS] == COURSE


@pytest.fixture(params=PATHS, ids=lambda path: path.stem)
def notebook(request):
    return read(request.param)


def test_notebook_is_valid_nbformat(notebook):
    nbformat.validate(notebook)


def test_notebook_keeps_only_kernel_and_language_metadata(notebook):
    assert set(notebook.metadata) <= NOTEBOOK_METADATA
    assert "widgets" not in notebook.metadata
    assert notebook.metadata["kernelspec"]["name"] == "python3"


def test_cells_keep_only_nbgrader_and_tags_metadata(notebook):
    stray = {
        index: sorted(set(cell.metadata) - CELL_METADATA)
        for index, cell in enumerate(notebook.cells)
        if set(cell.metadata) - CELL_METADATA
    }
    assert not stray, f"cells with stray metadata: {stray}"


def test_every_code_cell_was_executed_once_top_to_bottom(notebook):
    counts = [cell.execution_count for cell in notebook.cells if cell.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), "re-execute with `make notebooks`"


def test_outputs_hold_no_errors_warnings_or_absolute_paths(notebook):
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"cell {index} stored an error"
            assert not (output.output_type == "stream" and output.name == "stderr"), (
                f"cell {index} printed to stderr (a warning a learner would see): "
                f"{output.text[:200]!r}"
            )
            match = ABSOLUTE_PATH.search(output_text(output))
            assert match is None, f"cell {index} shows an absolute path: {match.group(0)!r}"
            if output.output_type == "display_data":
                assert "application/vnd.jupyter.widget-state+json" not in output.get("data", {})


# tqdm's text frame, e.g. "names: 100%|##########| 2400/2400 [01:56<00:00, ...]"
PROGRESS_FRAME = re.compile(r"(\d+)%\|.*?\| *(\d+)/(\d+)")


def test_stored_progress_bars_are_finished(notebook):
    """A reader on GitHub or nbviewer sees the text a progress bar was stored with: it must be
    the finished bar, not the first frame (tfscratch.train re-sends the bar when it ends)."""
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            for frame in PROGRESS_FRAME.finditer(output_text(output)):
                percent, done, total = (int(group) for group in frame.groups())
                assert percent == 100 and done == total, (
                    f"cell {index} stores an unfinished progress bar: {frame.group(0)!r}"
                )


def test_progress_frame_pattern_reads_a_tqdm_bar():
    first = PROGRESS_FRAME.search("names:   0%|          | 0/2400 [00:00<?, ?it/s]")
    last = PROGRESS_FRAME.search("names: 100%|##########| 2400/2400 [01:56<00:00, 20.6it/s]")
    assert first.groups() == ("0", "0", "2400") and last.groups() == ("100", "2400", "2400")


def test_exercises_are_in_nbgrader_format(notebook):
    """At least two exercises: a solution cell, then a locked checking cell that asserts."""
    cells = notebook.cells
    solutions = [
        i for i, cell in enumerate(cells) if cell.metadata.get("nbgrader", {}).get("solution")
    ]
    assert len(solutions) >= 2
    for index in solutions:
        answer, check = cells[index], cells[index + 1]
        assert {key: answer.metadata.nbgrader[key] for key in SOLUTION} == SOLUTION
        assert "### BEGIN SOLUTION" in answer.source and "### END SOLUTION" in answer.source
        assert {key: check.metadata.nbgrader[key] for key in CHECK} == CHECK
        assert check.metadata.nbgrader["points"] > 0
        assert "assert" in check.source


def test_exercise_ids_are_unique_across_the_course():
    ids = [
        cell.metadata["nbgrader"]["grade_id"]
        for path in PATHS
        for cell in read(path).cells
        if "nbgrader" in cell.metadata
    ]
    duplicates = sorted({grade_id for grade_id in ids if ids.count(grade_id) > 1})
    assert not duplicates
