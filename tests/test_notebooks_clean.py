"""Committed notebooks are executed, clean and gradeable.

nbval checks that every stored output is reproduced; this file checks what nbval cannot:
that the stored notebooks are the course (the ten, then the five extra ones, in order) and
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
    "14_gpt_in_one_page.ipynb",
    "15_inside_the_model.ipynb",
    "16_when_it_goes_wrong.ipynb",
    "17_finetuning_and_lora.ipynb",
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


def test_the_course_is_the_fifteen_notebooks_of_the_plan():
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
def notebook_path(request):
    return request.param


@pytest.fixture
def notebook(notebook_path):
    return read(notebook_path)


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
    assert not view_state, (
        f"cells with JupyterLab view state other than source_hidden: {view_state}"
    )


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


# -- the exercises (issue 23): what a learner and nbgrader's student version need -----------
#
# An exercise is [markdown] [scaffold code cells without nbgrader metadata, optional]
# [solution cell] [check cell]. The markdown cell starts with `### Exercise N: title`
# (N = 1, 2, ... in order), says how hard and how long, and ends with the "try it first" line;
# the solution cell is committed collapsed. Scaffold outside the markers: every
# `### BEGIN SOLUTION` sits inside a function whose `def` line and docstring stay in the
# student version, so a learner meets the name, the arguments and what to return, and the
# stub `raise NotImplementedError()` has nothing after it in the function. Decision: an answer
# is never a bare top-level assignment, not even a number (`answer = ...` between markers
# leaves the student no name to fill in but the variable, and a placeholder before the markers
# is dead); a number is what a function returns (`def measured_ratio(): ...`).

EXERCISE_HEADING = re.compile(r"^### Exercise (\d+): \S")
DIFFICULTY = re.compile(r"^\*Difficulty: [123]/3 · about \d+ minutes\.\*$", re.MULTILINE)
TRY_IT_FIRST = (
    "*Try it first: the solution cell below is collapsed; click the bar at its left to open it.*"
)
GRADE_ID = re.compile(r"^nb(\d\d)-ex(\d+)-[a-z0-9]+(-[a-z0-9]+)*$")
# Markdown that speaks about the test machinery instead of the learner's material.
TEST_TALK = re.compile(
    r"nbval|stored run|\bCI\b|\bthe (notebook |package's (own )?)?tests\b|by the tests|"
    r"\bunit tests?\b|excluded from the (notebook )?tests",
    re.IGNORECASE,
)


def exercises(nb: nbformat.NotebookNode) -> list[tuple[int, int, int]]:
    """(markdown index, solution index, check index) of every exercise, in order.

    The markdown index is -1 when no markdown cell precedes the solution."""
    found = []
    for index, cell in enumerate(nb.cells):
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        before = index - 1
        while (
            before >= 0
            and nb.cells[before].cell_type == "code"
            and "nbgrader" not in nb.cells[before].metadata
        ):
            before -= 1
        if before >= 0 and nb.cells[before].cell_type != "markdown":
            before = -1
        found.append((before, index, index + 1))
    return found


def solution_problems(source: str) -> list[str]:
    """What keeps a solution cell's student version from being a scaffold (empty if fine)."""
    import ast

    lines = source.splitlines()
    begins = [n for n, line in enumerate(lines, 1) if line.strip() == "### BEGIN SOLUTION"]
    ends = [n for n, line in enumerate(lines, 1) if line.strip() == "### END SOLUTION"]
    if not begins or len(begins) != len(ends):
        return ["needs matching `### BEGIN SOLUTION` / `### END SOLUTION` lines"]
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [f"does not parse: {error}"]
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]
    problems = []
    for begin, end in zip(begins, ends, strict=True):
        indent = len(lines[begin - 1]) - len(lines[begin - 1].lstrip())
        inside = [f for f in functions if f.lineno < begin < f.end_lineno and f.col_offset < indent]
        if not inside:
            problems.append(
                f"the solution at line {begin} is not inside a function: keep the `def` line "
                "and its docstring above the markers (a number answer is what a function returns)"
            )
            continue
        function = min(inside, key=lambda f: f.end_lineno - f.lineno)  # the innermost
        if ast.get_docstring(function) is None:
            problems.append(
                f"`{function.name}` has no docstring: say the shapes and what to return there"
            )
        after = [
            line
            for line in lines[end : function.end_lineno]
            if line.strip() and not line.strip().startswith("#")
        ]
        if after:
            problems.append(
                f"`{function.name}` has code after `### END SOLUTION` that the student "
                f"version's `raise NotImplementedError()` leaves dead: {after[0].strip()!r}"
            )
    return problems


def check_problems(source: str) -> list[str]:
    """The check's first assert explains: it carries a message for the student."""
    import ast

    asserts = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Assert)]
    if not asserts:
        return ["has no `assert` statement"]
    first = min(asserts, key=lambda node: (node.lineno, node.col_offset))
    if first.msg is None:
        return [
            (
                f"its first assert (line {first.lineno}) has no message: assert the most "
                "explanatory fact first, with a message that tells the student what is wrong"
            )
        ]
    return []


def test_exercise_rules(notebook_path):
    """exercise_rules.md, cell by cell: heading, numbering, difficulty, try-it-first, grade
    ids, collapsed solution, scaffold outside the markers, no dead code, an explaining check."""
    nb = read(notebook_path)
    number = notebook_path.name[:2]
    problems = []
    found = exercises(nb)
    for n, (md_index, solution_index, check_index) in enumerate(found, start=1):
        where = f"solution cell {solution_index}"
        if md_index < 0:
            problems.append(f"{where}: no markdown cell right before it (scaffold cells aside)")
        else:
            text = nb.cells[md_index].source.strip()
            heading = EXERCISE_HEADING.match(text)
            if not heading:
                problems.append(
                    f"{where}: its markdown cell {md_index} must start with "
                    f"`### Exercise {n}: <title>`, starts {text.splitlines()[0][:60]!r}"
                )
            elif int(heading.group(1)) != n:
                problems.append(f"{where}: headed Exercise {heading.group(1)}, should be {n}")
            if not DIFFICULTY.search(text):
                problems.append(
                    f"{where}: markdown cell {md_index} lacks the line "
                    "`*Difficulty: D/3 · about M minutes.*`"
                )
            if text.splitlines()[-1].strip() != TRY_IT_FIRST:
                problems.append(f"{where}: markdown cell {md_index} must end with {TRY_IT_FIRST}")
        solution = nb.cells[solution_index]
        grade_id = solution.metadata["nbgrader"].get("grade_id", "")
        match = GRADE_ID.match(grade_id)
        if not match or match.group(1) != number or int(match.group(2)) != n:
            problems.append(
                f"{where}: grade id {grade_id!r} should look like nb{number}-ex{n}-slug"
            )
        if solution.metadata.get("jupyter") != {"source_hidden": True}:
            problems.append(f"{where}: not collapsed (metadata jupyter.source_hidden: true)")
        problems += [f"{where}: {p}" for p in solution_problems(solution.source)]
        if check_index >= len(nb.cells):
            problems.append(f"{where}: no check cell after it")
            continue
        check = nb.cells[check_index]
        check_meta = check.metadata.get("nbgrader", {})
        if not check_meta.get("grade"):
            problems.append(f"{where}: the next cell is not a graded check cell")
            continue
        if check_meta.get("grade_id") != f"{grade_id}-check":
            problems.append(
                f"check cell {check_index}: grade id {check_meta.get('grade_id')!r}, "
                f"should be {grade_id + '-check'!r}"
            )
        problems += [f"check cell {check_index}: {p}" for p in check_problems(check.source)]
    headings = [
        index
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        and re.search(r"^#+ *(Exercise|Your turn \d)", cell.source, re.MULTILINE)
    ]
    orphans = sorted(set(headings) - {md for md, _, _ in found})
    if orphans:
        problems.append(
            f"markdown cells {orphans} head an exercise that has no solution cell after them"
        )
    assert not problems, "\n".join(problems)


def test_markdown_does_not_speak_about_the_test_machinery(notebook_path):
    nb = read(notebook_path)
    talk = {
        index: match.group(0)
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown" and (match := TEST_TALK.search(cell.source))
    }
    assert not talk, f"markdown cells speak about tests: {talk}"


# a control character in a cell's text is almost always an escape gone wrong: "\\theta" written
# through a Python string without r"" becomes a TAB and "heta", and renders as "heta"
CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|\t")


def test_cells_hold_no_control_characters(notebook_path):
    nb = read(notebook_path)
    found = {
        index: repr(cell.source[max(0, m.start() - 20) : m.end() + 20])
        for index, cell in enumerate(nb.cells)
        if (m := CONTROL_CHARACTER.search(cell.source))
    }
    assert not found, f"cells with a control character (an escape gone wrong?): {found}"


def test_control_character_rule_catches_a_lost_backslash():
    assert CONTROL_CHARACTER.search("where $\theta$ predicts")
    assert not CONTROL_CHARACTER.search("where $\\theta$ predicts\n  indented")


def test_exercise_rules_catch_a_bad_solution_cell():
    good = 'def f(x):\n    """Return x + 1."""\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n'
    assert solution_problems(good) == []
    top_level = "### BEGIN SOLUTION\nanswer = 3\n### END SOLUTION\n"
    assert "not inside a function" in solution_problems(top_level)[0]
    no_doc = "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n"
    assert "no docstring" in solution_problems(no_doc)[0]
    dead = good.replace("return x + 1", "y = x + 1") + "    return y\n"
    assert "leaves dead" in solution_problems(dead)[0]
    assert check_problems("assert f(1) == 2, 'f(1) should be 2'\nassert f(2) == 3") == []
    assert "no message" in check_problems("y = f(1)\nassert y == 2\nassert f(2) == 3, 'x'")[0]
