"""Committed notebooks are executed, clean and gradeable.

nbval checks that every stored output is reproduced; this file checks what nbval cannot:
that the stored notebooks are the course (the ten, then the three extra ones, in order) and
the only thing in the folder a learner's Lab opens besides their figures and README, carry no
stray metadata, widget state or metadata that differs between machines, keep nbval's markers
as cell tags rather than comments in the code, show no errors, warnings or machine-specific
paths, read well without a kernel (finished progress bars, every widget carrying its static
view in its own output, no widget left in an error state), and that their "Your turn"
exercises are in nbgrader's format so `make assignments` can make student versions.
"""

from __future__ import annotations

import importlib
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
    "11_bpe_tokenizer.ipynb",
    "12_rotary_positions.ipynb",
    "13_tiled_attention.ipynb",
]
NOTEBOOK_METADATA = {"kernelspec", "language_info"}
# What ipykernel reports about any Python 3 kernel: the same on every machine. Its `version`
# (the patch release, e.g. 3.11.7) is not stored: tests/execute_notebooks.py drops it.
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
LANGUAGE_INFO = {
    "name": "python",
    "mimetype": "text/x-python",
    "file_extension": ".py",
    "codemirror_mode": {"name": "ipython", "version": 3},
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
CELL_METADATA = {"nbgrader", "tags", "jupyter"}
# Cell tags the course uses: nbval's markers (tags, not `# NBVAL_...` comments in the code a
# learner reads), the README thumbnail's cell, and a cell that only guards the prose's claims.
NBVAL_TAGS = {"nbval-ignore-output", "nbval-skip", "nbval-check-output", "raises-exception"}
CELL_TAGS = NBVAL_TAGS | {"readme-figure", "claim-check"}
NBVAL_COMMENT = re.compile(r"^\s*#\s*NBVAL_", re.MULTILINE)
# What the notebooks/ folder (the one `make lab` opens) may hold: the course, its pictures and
# a README. Names JupyterLab hides (dot files, __pycache__) do not count.
COURSE_FOLDER = {"README.md", "figures"}
HIDDEN_IN_LAB = re.compile(r"^(\..*|__pycache__|.*\.pyc)$")
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


def test_the_course_is_the_thirteen_notebooks_of_the_plan():
    assert [path.name for path in PATHS] == COURSE


def test_the_notebooks_folder_holds_only_the_course():
    """A learner's Lab opens notebooks/: no test runner, conftest or sanitize file beside the
    notebooks (they live in tests/), only the notebooks, their figures and a README."""
    shown = {path.name for path in NOTEBOOKS_DIR.iterdir() if not HIDDEN_IN_LAB.match(path.name)}
    assert shown == set(COURSE) | COURSE_FOLDER, sorted(shown - set(COURSE) - COURSE_FOLDER)
    assert {path.name for path in (NOTEBOOKS_DIR / "figures").iterdir()} == {
        name.replace(".ipynb", ".png") for name in COURSE
    }


@pytest.fixture(params=PATHS, ids=lambda path: path.stem)
def notebook(request):
    return read(request.param)


def test_notebook_is_valid_nbformat(notebook):
    nbformat.validate(notebook)


def test_notebook_keeps_only_kernel_and_language_metadata(notebook):
    assert set(notebook.metadata) <= NOTEBOOK_METADATA
    assert "widgets" not in notebook.metadata
    assert notebook.metadata["kernelspec"]["name"] == "python3"


def test_notebook_metadata_is_the_same_on_every_machine(notebook):
    """No Python patch version (or anything else of the machine that ran it): the learner's
    Lab fills in the version of its own kernel when it opens a notebook, and saves without it
    (jupyter/learner/jupyter_server_config.py), so opening a notebook does not change it."""
    assert notebook.metadata["kernelspec"] == KERNELSPEC
    assert notebook.metadata["language_info"] == LANGUAGE_INFO


def test_nbval_markers_are_cell_tags_not_comments_in_the_code(notebook):
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert not NBVAL_COMMENT.search(cell.source), (
                f"cell {index} has an nbval comment marker: use the cell tag instead "
                f"(e.g. nbval-ignore-output), which a learner does not read in the code"
            )
        tags = cell.metadata.get("tags", [])
        assert set(tags) <= CELL_TAGS, f"cell {index} has unknown tags {set(tags) - CELL_TAGS}"
        assert len(tags) == len(set(tags)), f"cell {index} repeats a tag: {tags}"


def test_outputs_of_long_floating_point_chains_are_left_out_by_tag():
    """The tags are what nbval reads: the training notebook's cells are tagged, not marked."""
    tagged = [
        cell
        for cell in read(NOTEBOOKS_DIR / "07_training.ipynb").cells
        if "nbval-ignore-output" in cell.metadata.get("tags", [])
    ]
    assert tagged and all(cell.cell_type == "code" for cell in tagged)


def test_the_notebook_runner_keeps_tags_and_drops_machine_metadata():
    runner = importlib.import_module("tests.execute_notebooks")
    nb = nbformat.v4.new_notebook(
        metadata={
            "kernelspec": {**KERNELSPEC, "display_name": "Python 3"},
            "language_info": {**LANGUAGE_INFO, "version": "3.11.7"},
            "widgets": {"application/vnd.jupyter.widget-state+json": {}},
        }
    )
    nb.cells = [
        nbformat.v4.new_code_cell(
            "1 + 1", metadata={"tags": ["nbval-ignore-output"], "scrolled": True}
        ),
        nbformat.v4.new_code_cell(
            "assert True",
            metadata={"tags": ["claim-check"], "jupyter": {"source_hidden": True, "x": 1}},
        ),
        nbformat.v4.new_code_cell("2 + 2", metadata={"jupyter": {"outputs_hidden": True}}),
    ]
    runner.clean(nb)
    assert nb.metadata == {"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO}
    assert nb.cells[0].metadata == {"tags": ["nbval-ignore-output"]}
    # A collapsed input stays collapsed; nothing else of JupyterLab's view state is kept.
    assert nb.cells[1].metadata == {"tags": ["claim-check"], "jupyter": {"source_hidden": True}}
    assert nb.cells[2].metadata == {}


def test_cells_keep_only_nbgrader_and_tags_metadata(notebook):
    stray = {
        index: sorted(set(cell.metadata) - CELL_METADATA)
        for index, cell in enumerate(notebook.cells)
        if set(cell.metadata) - CELL_METADATA
    }
    assert not stray, f"cells with stray metadata: {stray}"
    # JupyterLab's view state: only a collapsed input (a solution or a claim-check cell).
    view_state = {
        index: cell.metadata["jupyter"]
        for index, cell in enumerate(notebook.cells)
        if cell.metadata.get("jupyter", {"source_hidden": True}) != {"source_hidden": True}
    }
    assert not view_state, f"cells with JupyterLab view state other than source_hidden: {view_state}"


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
    the finished bar, not the first frame (tfscratch.progress re-sends the bar when it ends)."""
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


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# Mime types a page without a kernel renders as a picture of state (GitHub, nbviewer).
STATIC_MIMES = ("text/html", "image/png")


def is_widget(output) -> bool:
    return WIDGET_VIEW in output.get("data", {})


def static_view(output) -> str | None:
    """What a reader without a kernel sees of a stored widget output, or None.

    Without a kernel (GitHub, nbviewer) a widget output shows at best its ``text/plain``; for
    an ipywidgets box that is its repr, ``SamplingPlayground(children=(HBox(...`` cut after
    110 characters, which shows nothing of its state. A widget output has a static view when

    * its own text is a progress-bar frame: tqdm's widget stores the text of its bar
      (``names: 100%|##########| 2400/2400 [00:27<00:00, loss=2.1]``), a complete rendering
      of its state (``test_stored_progress_bars_are_finished`` requires it to be finished); or
    * its mimebundle holds, beside the widget view, HTML or a PNG: the fallback that
      tfscratch.widgets puts in the widget's own output (the settings and names, the heatmap)
      and refreshes when the widget's state changes. JupyterLab renders the widget view and
      only it; GitHub and nbviewer, which cannot, render the fallback.
    """
    data = output.get("data", {})
    text = str(data.get("text/plain", ""))
    if PROGRESS_FRAME.search(text):
        return text
    if any(mime in data for mime in STATIC_MIMES):
        return text
    return None


def test_every_stored_widget_carries_its_static_view(notebook):
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if is_widget(output):
                text = str(output.data.get("text/plain", ""))[:80]
                assert static_view(output) is not None, (
                    f"cell {index} stores a widget with no static view (its text: {text!r}); "
                    "put HTML or a PNG of its state in its own mimebundle "
                    "(tfscratch.widgets.StaticViewBox does this for its widgets)"
                )


def test_every_widget_shows_once(notebook):
    """In JupyterLab a widget shows once: no second output that repeats its state below it
    (the static view travels in the widget's own output, where only pages without a kernel
    show it)."""
    for index, cell in enumerate(notebook.cells):
        for k, output in enumerate(cell.get("outputs", [])):
            marker = output.get("metadata", {}).get("tfscratch", {})
            if "static_view_of" in marker:
                assert is_widget(output), (
                    f"cell {index} output {k} is a separate static view of its "
                    f"{marker['static_view_of']}: re-execute with `make notebooks`"
                )


def test_stored_static_views_show_no_error(notebook):
    """tfscratch.widgets marks each widget output with the widget's error (None when its
    settings are valid): a notebook must not leave a widget showing an error message."""
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            marker = output.get("metadata", {}).get("tfscratch", {})
            if "static_view_of" in marker:
                assert marker["error"] is None, (
                    f"cell {index} leaves its {marker['static_view_of']} in an error state: "
                    f"{marker['error']!r}; restore valid settings before the notebook ends"
                )


def test_static_view_rule_on_made_up_outputs():
    def display(data, metadata=None):
        return nbformat.v4.new_output("display_data", data=data, metadata=metadata or {})

    widget = {WIDGET_VIEW: {"model_id": "0", "version_major": 2, "version_minor": 0}}
    bare = display({**widget, "text/plain": "SamplingPlayground(children=(HBox(children=…"})
    bar = display({**widget, "text/plain": "names: 100%|##########| 2400/2400 [00:27<00:00]"})
    names = display({**widget, "text/plain": "1. emma", "text/html": "<ol><li>emma</li></ol>"})
    figure = display({**widget, "text/plain": "<Figure>", "image/png": "iVBORw0KGgo="})
    plain = display({**widget, "text/plain": "ok"})
    assert static_view(bare) is None
    assert static_view(plain) is None  # plain text alone: a repr, perhaps
    assert static_view(names) == "1. emma"
    assert static_view(figure) == "<Figure>"
    assert static_view(bar).startswith("names: 100%")


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
