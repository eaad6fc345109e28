"""`make assignments` makes student notebooks with nbgrader: solutions out, checks kept.

The test runs the same nbgrader command as the Makefile and executes one short student
version in a kernel (only up to its last checking cell), showing that every checking cell fails
until the exercises are solved while the same cells pass in the notebook with the solutions.
Then the grading round trip for every notebook with exercises: release, submit, autograde and
feedback, where the instructor's answers get full marks, an untouched student version 0, and
each exercise of the student version keeps its scaffold. Autograding executes whole notebooks:
01-06 (seconds each) are graded by `make test`, 07 onwards (models trained, generation timed:
up to minutes each) under the `grading` marker, by `make test-grading`.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
SHORT_NOTEBOOK = ROOT / "notebooks" / "02_softmax_and_loss.ipynb"
BIN = Path(sys.executable).parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# Autograding executes every cell of every submission. The first part of the course (01-06)
# runs in seconds, so `make test` grades it; from 07 on, notebooks train models or time
# generation (up to minutes each), and their round trip runs under the `grading` marker
# (`make test-grading`).
FIRST_PART = {"01", "02", "03", "04", "05", "06"}


def nbgrader_role(cell) -> str | None:
    meta = cell.metadata.get("nbgrader", {})
    if meta.get("solution"):
        return "solution"
    if meta.get("grade"):
        return "check"
    return None


@pytest.fixture(scope="module")
def student_notebook(tmp_path_factory) -> nbformat.NotebookNode:
    course = tmp_path_factory.mktemp("classroom")
    assignment = SHORT_NOTEBOOK.stem
    (course / "source" / assignment).mkdir(parents=True)
    shutil.copy(SHORT_NOTEBOOK, course / "source" / assignment)
    # As in `make assignments`: nbgrader starts alembic from PATH, so the venv goes first.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(
        [BIN / "nbgrader", "generate_assignment", assignment, "--force", "--log-level=WARN"],
        cwd=course,
        env=env,
        check=True,
        capture_output=True,
    )
    return nbformat.read(course / "release" / assignment / SHORT_NOTEBOOK.name, as_version=4)


def has_exercises(path: Path) -> bool:
    return any(nbgrader_role(cell) for cell in nbformat.read(path, as_version=4).cells)


def up_to_last_check(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    last = max(i for i, cell in enumerate(nb.cells) if nbgrader_role(cell) == "check")
    trimmed = nbformat.v4.new_notebook(metadata=nb.metadata)
    trimmed.cells = [cell for cell in nb.cells[: last + 1] if cell.cell_type == "code"]
    return trimmed


def run(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(SHORT_NOTEBOOK.parent)}},
    )
    client.execute()
    return nb


def errors(cell) -> list[str]:
    return [out.ename for out in cell.outputs if out.output_type == "error"]


def test_student_version_has_no_solution_left(student_notebook):
    source = nbformat.read(SHORT_NOTEBOOK, as_version=4)
    answers = [cell for cell in source.cells if nbgrader_role(cell) == "solution"]
    student_text = "\n".join(cell.source for cell in student_notebook.cells)
    assert "BEGIN SOLUTION" not in student_text and "END SOLUTION" not in student_text
    student_answers = {
        c.metadata.nbgrader.grade_id: c.source
        for c in student_notebook.cells
        if nbgrader_role(c) == "solution"
    }
    assert len(student_answers) == len(answers) >= 2
    for answer in answers:
        # The student's answer cell keeps the scaffolding (signature, docstring) but no line
        # of the solution. (A line may legitimately appear elsewhere, in teaching code.)
        student_cell = student_answers[answer.metadata.nbgrader.grade_id]
        assert "raise NotImplementedError()" in student_cell
        solution = answer.source.split("### BEGIN SOLUTION", 1)[1].split("### END SOLUTION")[0]
        for line in solution.strip().splitlines():
            assert line.strip() not in student_cell, f"solution line left: {line.strip()!r}"


def test_student_version_keeps_the_checking_cells_locked(student_notebook):
    source = nbformat.read(SHORT_NOTEBOOK, as_version=4)
    checks = [c.source for c in source.cells if nbgrader_role(c) == "check"]
    student = [c for c in student_notebook.cells if nbgrader_role(c) == "check"]
    assert [c.source for c in student] == checks
    assert all(c.metadata.get("editable") is False for c in student)


def test_checking_cells_fail_until_solved_and_pass_with_the_solutions(student_notebook):
    unsolved = run(up_to_last_check(student_notebook))
    solved = run(up_to_last_check(nbformat.read(SHORT_NOTEBOOK, as_version=4)))
    for cell in unsolved.cells:
        if nbgrader_role(cell) == "solution":
            # a cell that only defines the function runs; one that also calls it stops here
            assert errors(cell) in ([], ["NotImplementedError"]), errors(cell)
        elif nbgrader_role(cell) == "check":
            assert errors(cell), f"a checking cell passed without its answer:\n{cell.source}"
        else:
            assert not errors(cell), (
                f"a teaching cell failed in the student version:\n{cell.source}"
            )
    for cell in solved.cells:
        assert not errors(cell), f"failed with the solutions:\n{cell.source}"


# -- student versions, whichever way they are made -----------------------------------------

ROUTE_NOTEBOOKS = [
    ROOT / "notebooks" / name for name in ("02_softmax_and_loss.ipynb", "04_attention.ipynb")
]


def make(*args: str) -> None:
    """A Makefile target of this clone, on the two notebooks above."""
    notebooks = " ".join(str(path.relative_to(ROOT)) for path in ROUTE_NOTEBOOKS)
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args, f"NOTEBOOKS={notebooks}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def made_by(route: str, where: Path) -> dict[str, Path]:
    """notebook stem -> the student version that ``route`` makes."""
    stems = [path.stem for path in ROUTE_NOTEBOOKS]
    if route == "make assignments":
        make("assignments", f"CLASSROOM={where}")
        return {stem: where / "release" / stem / f"{stem}.ipynb" for stem in stems}
    if route == "make exercises":
        make("exercises", f"EXERCISES={where}")
        return {stem: where / f"{stem}.ipynb" for stem in stems}
    # the hub's course directory (classroom/hub.py gives the instructor these files), where the
    # instructor runs generate_assignment in a terminal or with the formgrader's button
    where.mkdir()
    for path in [COURSE_CONFIG, ROOT / "classroom" / "tfscratch_exchange.py"]:
        shutil.copy(path, where)
    for path in ROUTE_NOTEBOOKS:
        (where / "source" / path.stem).mkdir(parents=True)
        shutil.copy(path, where / "source" / path.stem)
    nbgrader(where, "generate_assignment", "*", "--force")
    return {stem: where / "release" / stem / f"{stem}.ipynb" for stem in stems}


@pytest.mark.parametrize("route", ["make assignments", "make exercises", "course directory"])
def test_student_versions_open_every_scaffold_and_drop_try_it_first(route, tmp_path):
    # The committed notebooks collapse each solution cell under a "Try it first" line; a
    # student version is made by one function (classroom/nbgrader_config.py, student_version)
    # whatever makes it: every scaffold open, the line gone, nothing else of the notebook lost.
    for stem, path in made_by(route, tmp_path / "made").items():
        course = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        student = nbformat.read(path, as_version=4)
        assert any("*Try it first:" in cell.source for cell in course.cells)
        assert len(student.cells) == len(course.cells)
        solutions = [cell for cell in student.cells if nbgrader_role(cell) == "solution"]
        assert len(solutions) >= 2
        for cell in solutions:
            assert "raise NotImplementedError()" in cell.source, cell.source
            assert "jupyter" not in cell.metadata, (stem, cell.metadata)
        assert not [cell.source for cell in student.cells if "Try it first" in cell.source]


def test_the_course_config_gives_every_graded_kernel_one_blas_thread(tmp_path):
    # OpenBLAS starts a thread per core in each kernel unless told otherwise; with another
    # process busy on 2 cores, 07's training then took 678 s instead of 115 s and passed the
    # cell limit. nbgrader's kernels inherit its environment, which the course's config sets,
    # whatever the shell that runs `nbgrader autograde` says.
    shutil.copy(COURSE_CONFIG, tmp_path)
    probe = (
        "import os\n"
        "from traitlets.config.loader import PyFileConfigLoader\n"
        "PyFileConfigLoader('nbgrader_config.py', '.').load_config()\n"
        "from jupyter_client.manager import KernelManager\n"
        "km = KernelManager(kernel_name='python3')\n"
        "km.start_kernel()\n"
        "kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=60)\n"
        "names = ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS')\n"
        "reply = kc.execute_interactive(\n"
        "    f'import os; print([os.environ.get(n) for n in {names}])',\n"
        "    output_hook=lambda m: print(m['content'].get('text', ''), end=''), timeout=60)\n"
        "kc.stop_channels(); km.shutdown_kernel(now=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env["OPENBLAS_NUM_THREADS"] = "4"  # a shell that asked for more is overruled
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("['1', '1', '1']"), done.stdout


# -- the grading round trip: release, submit, autograde, feedback --------------------------

COURSE_CONFIG = ROOT / "classroom" / "nbgrader_config.py"


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    """Run one nbgrader command in the course directory, as an instructor would."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [BIN / "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True, check=True
    )


def solved(student: nbformat.NotebookNode, source: nbformat.NotebookNode):
    """The student version with every answer cell written as in the instructor's notebook."""
    answers = {
        cell.metadata.nbgrader.grade_id: cell.source
        for cell in source.cells
        if nbgrader_role(cell) == "solution"
    }
    for cell in student.cells:
        if nbgrader_role(cell) == "solution":
            cell.source = answers[cell.metadata.nbgrader.grade_id]
    return student


GROUPS = {
    "first-part": [p for p in NOTEBOOKS if p.name[:2] in FIRST_PART and has_exercises(p)],
    "later": [p for p in NOTEBOOKS if p.name[:2] not in FIRST_PART and has_exercises(p)],
}


@pytest.fixture(
    scope="module", params=["first-part", pytest.param("later", marks=pytest.mark.grading)]
)
def graded_course(request, tmp_path_factory) -> tuple[Path, dict[str, str], list[Path]]:
    """A course with the group's assignments, a student who solved them and one who did
    nothing (nbgrader's student version as released)."""
    notebooks = GROUPS[request.param]
    course = tmp_path_factory.mktemp(f"grading-{request.param}")
    shutil.copy(COURSE_CONFIG, course / "nbgrader_config.py")
    for notebook in notebooks:
        (course / "source" / notebook.stem).mkdir(parents=True)
        shutil.copy(notebook, course / "source" / notebook.stem)
    logs = {"generate_assignment": nbgrader(course, "generate_assignment", "*", "--force").stderr}
    for notebook in notebooks:
        released = course / "release" / notebook.stem / notebook.name
        for student in ("diligent", "idle"):
            folder = course / "submitted" / student / notebook.stem
            folder.mkdir(parents=True)
            student_version = nbformat.read(released, as_version=4)
            if student == "diligent":
                solved(student_version, nbformat.read(notebook, as_version=4))
            nbformat.write(student_version, folder / notebook.name)
        logs[f"autograde {notebook.stem}"] = nbgrader(
            course, "autograde", notebook.stem, "--create"
        ).stderr
        logs[f"feedback {notebook.stem}"] = nbgrader(
            course, "generate_feedback", notebook.stem
        ).stderr
    return course, logs, notebooks


def scores(course: Path, notebooks: list[Path]) -> dict[tuple[str, str], tuple[float, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {
            (notebook.stem, student): (
                gradebook.find_submission(notebook.stem, student).score,
                gradebook.find_submission(notebook.stem, student).max_score,
            )
            for notebook in notebooks
            for student in ("diligent", "idle")
        }


def test_student_version_keeps_each_exercise_scaffold(graded_course):
    """What stays of each answer cell in nbgrader's student version: everything above
    `### BEGIN SOLUTION` (the def line and the docstring), then nbgrader's stub, and no line
    of code after the stub in its function."""
    course, _, notebooks = graded_course
    for path in notebooks:
        source = nbformat.read(path, as_version=4)
        student = nbformat.read(course / "release" / path.stem / path.name, as_version=4)
        stubs = {
            c.metadata.nbgrader.grade_id: c.source
            for c in student.cells
            if nbgrader_role(c) == "solution"
        }
        for cell in source.cells:
            if nbgrader_role(cell) != "solution":
                continue
            grade_id = cell.metadata.nbgrader.grade_id
            stub = stubs[grade_id]
            scaffold = cell.source.split("### BEGIN SOLUTION")[0]
            assert scaffold.strip() and stub.startswith(scaffold), (
                f"{grade_id}: the student version lost the scaffold above the solution:\n{stub}"
            )
            lines = stub.splitlines()
            last = max(n for n, line in enumerate(lines) if "raise NotImplementedError()" in line)
            indent = len(lines[last]) - len(lines[last].lstrip())
            dead = [
                line
                for line in lines[last + 1 :]
                if line.strip() and indent > 0 and len(line) - len(line.lstrip()) >= indent
            ]
            assert not dead, f"{grade_id}: code after the stub that never runs: {dead}"


def names_read_and_defined(source: str) -> tuple[set[str], set[str]]:
    """The names a cell reads without defining them itself, and the names it defines at top level."""
    tree = ast.parse(
        "\n".join(line for line in source.splitlines() if not line.startswith(("%", "!")))
    )
    stored = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    stored |= {
        a.arg
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.Lambda)
        for a in n.args.args
    }
    stored |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    stored |= {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return read - stored, stored


@pytest.mark.parametrize(
    "path", [p for p in NOTEBOOKS if has_exercises(p)], ids=lambda p: p.name[:2]
)
def test_graded_checks_need_nothing_a_training_or_timing_cell_made(path):
    """A slow or timed-out cell costs no marks: checks read nothing a long-running cell defined.

    Cells whose output rests on long floating-point chains (training, timing, sampling) carry
    the tag `nbval-ignore-output`; under load, autograding can time such a cell out, and a
    check that read its result would fail a correct answer.
    """
    made_by_long_cell: dict[str, int] = {}
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        read, defined = names_read_and_defined(cell.source)
        if nbgrader_role(cell) == "check":
            needed = sorted(name for name in read if name in made_by_long_cell)
            assert not needed, f"{cell.metadata['nbgrader']['grade_id']} reads " + ", ".join(
                f"{name} (from cell {made_by_long_cell[name]})" for name in needed
            )
        long_cell = "nbval-ignore-output" in cell.metadata.get("tags", [])
        for name in defined:
            if long_cell:
                made_by_long_cell[name] = index
            else:
                made_by_long_cell.pop(name, None)


def test_every_notebook_with_exercises_is_graded():
    graded = {p for group in GROUPS.values() for p in group}
    assert graded == {p for p in NOTEBOOKS if has_exercises(p)} and len(graded) >= 13


def test_a_correct_submission_scores_full_marks(graded_course):
    course, _, notebooks = graded_course
    for (assignment, student), (score, max_score) in scores(course, notebooks).items():
        if student == "diligent":
            assert max_score >= 2 and score == max_score, (assignment, score, max_score)


def test_an_untouched_submission_scores_zero(graded_course):
    course, _, notebooks = graded_course
    for (assignment, student), (score, max_score) in scores(course, notebooks).items():
        if student == "idle":
            assert max_score >= 2 and score == 0, (assignment, score, max_score)


def test_every_student_gets_html_feedback_with_the_score_and_described_figures(graded_course):
    course, _, notebooks = graded_course
    for notebook in notebooks:
        for student in ("diligent", "idle"):
            html = course / "feedback" / student / notebook.stem / f"{notebook.stem}.html"
            page = html.read_text()
            assert "Score:" in page
            # classroom/nbgrader_config.py describes each figure with the prose after it
            figures = re.findall(r"<img [^>]*>", page)
            assert figures, html
            for figure in figures:
                assert re.search(r"alt=[\"']\w", figure), figure[:200]
                assert "No description has been provided" not in figure


# What is left on an instructor's screen is not ours: ipykernel 7 warns that every kernel
# talks to nbgrader over local TCP without encryption.
NOT_OURS = ("Kernel is running over TCP without encryption",)


def hidden_test_checksum_warnings() -> tuple[str, ...]:
    """nbgrader's own warning for every check cell with hidden tests: generate_assignment
    stores the cell's checksum before it clears the hidden tests and releases the cell after,
    so autograde always finds "checksum ... has changed" there, then restores the cell from
    the gradebook as it should (jupyter/nbgrader#1961). Only those cells' warnings are nbgrader's."""
    return tuple(
        f"Attribute 'checksum' for cell {cell.metadata['nbgrader']['grade_id']} has changed"
        for path in NOTEBOOKS
        for cell in nbformat.read(path, as_version=4).cells
        if nbgrader_role(cell) == "check" and "### BEGIN HIDDEN TESTS" in cell.source
    )


def test_grading_prints_no_warning_of_ours(graded_course):
    _, logs, _ = graded_course
    not_ours = NOT_OURS + hidden_test_checksum_warnings()
    for step, log in logs.items():
        assert "SAWarning" not in log, f"{step}:\n{log}"
        warnings = [
            line
            for line in log.splitlines()
            if ("Warning" in line or "WARNING" in line) and not any(w in line for w in not_ours)
        ]
        assert warnings == [], f"{step}:\n" + "\n".join(warnings)
