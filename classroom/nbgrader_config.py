# nbgrader's configuration for the course directory (build/classroom/), copied there by
# `make assignments`; nbgrader reads it from the directory it runs in.
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
EXCHANGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exchange")
if not os.path.isdir(EXCHANGE):
    os.makedirs(EXCHANGE)
    os.chmod(EXCHANGE, 0o1777)
c.Exchange.root = EXCHANGE

# `autograde` runs each submission and stops a cell after Execute.timeout seconds, 30 by
# default. The training cells of 07 and the later notebooks run for up to about two minutes on
# two cores (the course's budget: a training notebook in under 150 s), twice that on one, so a
# correct submission lost the points of every check after its training cell (a solved 07
# scored 2 of 3). Ten minutes still stops a student's endless loop.
c.Execute.timeout = 600

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
