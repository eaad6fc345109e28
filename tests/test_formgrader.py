"""`make formgrader`: the instructor's JupyterLab, rooted at the course directory, with nbgrader.

The learner's Lab hides nbgrader; the instructor's command must show it, on the course:
this test points `make formgrader` at an empty course directory, so it first makes the
student versions (`make assignments`), then starts JupyterLab there, and checks that the
server's files are the course's and that nbgrader's formgrader lists every notebook as an assignment (all fifteen).
Its page warns of nothing on this fresh course: classroom/nbgrader_config.py gives the course its
own exchange (nbgrader's default one needs root), so "release" and "collect" work at once.
Marked `lab`: `make test-browser` runs it.
"""

from __future__ import annotations

import json
import shutil

import pytest
from traitlets.config.loader import PyFileConfigLoader

from .lab_server import ROOT, LabServer

pytestmark = pytest.mark.lab

NOTEBOOKS = sorted(path.stem for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture
def formgrader(tmp_path):
    course = tmp_path / "classroom"
    server = LabServer(course, tmp_path, target="formgrader", make_vars=(f"CLASSROOM={course}",))
    server.course = course
    server.start()
    yield server
    server.stop()


def test_formgrader_opens_jupyterlab_on_the_course_with_every_assignment(formgrader):
    status, body = formgrader.api("/api/contents")
    assert status == 200
    names = {item["name"] for item in json.loads(body)["content"]}
    assert {"nbgrader_config.py", "source", "release"} <= names, names
    status, body = formgrader.api("/formgrader/api/assignments")
    assert status == 200, body
    assignments = {entry["name"] for entry in json.loads(body)}
    assert assignments == set(NOTEBOOKS)
    for name in NOTEBOOKS:
        assert (formgrader.course / "release" / name / f"{name}.ipynb").is_file()


def test_formgrader_finds_the_course_exchange_on_a_fresh_course(formgrader):
    status, body = formgrader.api("/formgrader/manage_assignments")
    assert status == 200, body
    page = body.decode()
    assert "Manage Assignments" in page
    # nbgrader's warnings on this page: no exchange, or no course id ("release" and "collect"
    # would then be unavailable)
    assert 'id="warning-exchange"' not in page and 'id="warning-course-id"' not in page
    exchange = formgrader.course / "exchange"
    assert exchange.is_dir() and exchange.stat().st_mode & 0o7777 == 0o1777
    # the course's own folder is made at once, with nbgrader's modes, by the instructor: on a
    # machine with other accounts, one who made it first would own the course's exchange
    modes = {".": 0o755, "outbound": 0o755, "inbound": 0o2733, "feedback": 0o711}
    for name, mode in modes.items():
        assert (exchange / "tfscratch" / name).stat().st_mode & 0o7777 == mode, name


def test_the_autograder_gives_a_training_cell_the_time_it_needs(tmp_path):
    # A training notebook runs in under 150 s on two cores, most of it in one cell; on a
    # grader's single core that cell takes about twice as long. nbgrader's default (30 s) cut
    # it off, and a correct 07 lost the points of every check after it. (A copy is loaded: the
    # course's configuration makes its exchange beside itself.)
    shutil.copy(ROOT / "classroom" / "nbgrader_config.py", tmp_path)
    config = PyFileConfigLoader("nbgrader_config.py", str(tmp_path)).load_config()
    assert config.Execute.timeout >= 4 * 150
