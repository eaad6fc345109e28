# nbgrader's configuration for the course directory (build/classroom/), copied there by
# `make assignments`; nbgrader reads it from the directory it runs in.
import importlib.util
import os
import re
import warnings

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor, Preprocessor
from nbgrader.preprocessors import GetGrades
from sqlalchemy.exc import SAWarning
from traitlets import Bool

c = get_config()  # noqa: F821 (nbgrader provides get_config when it loads this file)
c.CourseDirectory.course_id = "tfscratch"

# nbgrader's exchange: where `release_assignment` puts the student versions, students submit,
# and `collect` picks the submissions up. nbgrader's default (/usr/local/share/nbgrader/exchange)
# needs root to create, so on a fresh course the formgrader warned that the exchange was
# missing. This course keeps its exchange beside this file (build/classroom/exchange), made
# with the permissions nbgrader documents for it: everyone may write, and the sticky bit keeps
# one account from deleting another's files. On a hub (`make hub`) the course directory's
# `exchange` is a link to the hub's shared exchange, so this same file serves both.
HERE = os.path.dirname(os.path.abspath(__file__))
EXCHANGE = os.path.join(HERE, "exchange")
if not os.path.isdir(EXCHANGE):
    os.makedirs(EXCHANGE)
    os.chmod(EXCHANGE, 0o1777)
    # The course's own folder, made now by whoever runs nbgrader here (the instructor), with
    # nbgrader's modes: on a machine with other accounts, a student who made it first would own
    # the course's exchange (reliability review, S2).
    for name, mode in [(".", 0o755), ("outbound", 0o755), ("inbound", 0o2733), ("feedback", 0o711)]:
        folder = os.path.join(EXCHANGE, "tfscratch", name)
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, mode)
c.Exchange.root = EXCHANGE

# Submissions are their owner's and the instructor's only, and `collect` skips an entry that
# is not wholly the student's it names (classroom/tfscratch_exchange.py, copied beside this
# file by `make assignments` and `make hub`).
PLUGINS = os.path.join(HERE, "tfscratch_exchange.py")
if os.path.exists(PLUGINS):
    spec = importlib.util.spec_from_file_location("tfscratch_exchange", PLUGINS)
    exchange = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exchange)
    exchange.use_in(c)

# `autograde` runs each submission and stops a cell after Execute.timeout seconds, 30 by
# default. The training cells of 07 and the later notebooks run for up to about two minutes on
# two cores (the course's budget: a training notebook in under 150 s), twice that on one, so a
# correct submission lost the points of every check after its training cell (a solved 07
# scored 2 of 3). Ten minutes still stops a student's endless loop.
c.Execute.timeout = 600

# One BLAS thread in every kernel nbgrader starts here (autograde, validate), which inherits
# this process's environment. Without it OpenBLAS starts a thread per core in each kernel;
# with a second process busy on a 2-core machine those threads wait on each other, and 07's
# training cell took 678 s instead of 115 s and passed the limit above (newcomer review,
# defect 3; reliability review). Grading in parallel then means one process per free core.
for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = "1"

# nbgrader 0.9 builds a submission's gradebook rows (Gradebook.add_submission) in the
# SQLAlchemy 1.x style: the new rows reach the session only by `db.add(submission)` after
# the loop, so SQLAlchemy 2 warns on every autograde that an autoflush inside the loop
# found them outside the session ("Object of type <SubmittedAssignment> not in session,
# add operation along 'Student.submissions' will not proceed"). The rows are added right
# after and no grade is lost (tests/test_assignments.py grades a round trip). This is
# nbgrader's code, not ours, so only this exact warning is silenced, and only for
# nbgrader's commands in the course directory.
warnings.filterwarnings(
    "ignore", message=r"Object of type <\w+> not in session", category=SAWarning
)


IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")


class DescribeFigures(Preprocessor):
    """Give every picture of the feedback an alternative text, for readers who cannot see it.

    The course's notebooks follow each picture with prose that says what to see in it
    (notebooks/README's house style), so a picture's description is the first sentence of
    the markdown cell right after its code cell. Without it nbconvert writes "No description
    has been provided for this image" and warns "Alternative text is missing on N image(s)".
    """

    enabled = Bool(True)  # nbconvert preprocessors are off unless enabled

    def preprocess(self, nb, resources):
        for index, cell in enumerate(nb.cells):
            outputs = [
                output
                for output in cell.get("outputs", [])
                if any(mime in output.get("data", {}) for mime in IMAGE_TYPES)
            ]
            if not outputs:
                continue
            following = nb.cells[index + 1] if index + 1 < len(nb.cells) else None
            prose = following.source if following and following.cell_type == "markdown" else ""
            description = first_sentence(prose) or f"The figure drawn by code cell {index + 1}."
            for output in outputs:
                for mime in IMAGE_TYPES:
                    if mime in output.data:
                        output.metadata.setdefault(mime, {})["alt"] = description
        return nb, resources


def first_sentence(markdown: str) -> str:
    """The first sentence of a markdown paragraph, as plain text (at most 300 characters)."""
    text = re.sub(r"[`*_#>]", "", markdown).strip()
    text = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text)[:300]


c.GenerateFeedback.preprocessors = [GetGrades, DescribeFigures, CSSHTMLHeaderPreprocessor]


TRY_IT_FIRST = "*Try it first:"


def student_version(nb):
    """A student's notebook from the course's (in place): scaffolds open, no "Try it first".

    The committed notebooks keep each solution cell collapsed (``jupyter.source_hidden``)
    under a line "*Try it first: the solution cell below is collapsed; ...*". In a student
    version the cell holds only the scaffold to complete: it opens expanded, and the line that
    points to a hidden solution goes. This is the one place that does it: nbgrader's
    generate_assignment runs it (StudentVersion, below) wherever this configuration is the
    course's, so in `make assignments`, `make exercises`, the hub's course directory (a
    terminal's command and the formgrader's Generate button) alike.
    """
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.metadata.pop("jupyter", None)
        if cell.cell_type == "markdown" and TRY_IT_FIRST in cell.source:
            lines = cell.source.split("\n")
            cell.source = "\n".join(x for x in lines if not x.startswith(TRY_IT_FIRST)).rstrip()
    return nb


class StudentVersion(Preprocessor):
    """generate_assignment's first step: `student_version` above."""

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        return student_version(nb), resources


def _generate_assignment_steps():
    from nbgrader.converters import GenerateAssignment

    return GenerateAssignment.class_traits()["preprocessors"].default()


c.GenerateAssignment.preprocessors = [StudentVersion, *_generate_assignment_steps()]
