# nbgrader's configuration for the course directory (build/classroom/), copied there by
# `make assignments`; nbgrader reads it from the directory it runs in.
import warnings

from sqlalchemy.exc import SAWarning

c = get_config()  # noqa: F821 (nbgrader provides get_config when it loads this file)
c.CourseDirectory.course_id = "tfscratch"

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

