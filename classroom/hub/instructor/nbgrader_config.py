"""The instructor's nbgrader settings on the hub (`make hub`): one class, one grader.

The course directory is ~/tfscratch (made by `make hub` on first start, as `make assignments`
makes build/classroom). The formgrader in the instructor's Lab reads its configuration from the
Jupyter config path and the server's working directory (the home folder), not from the course
directory, so the course's own settings (classroom/nbgrader_config.py, copied there) are loaded
here too: the same feedback, the same exchange, from the formgrader and from a terminal.
"""

import os

c = get_config()  # noqa: F821 (nbgrader provides get_config when it loads this file)
c.CourseDirectory.root = os.path.expanduser("~/tfscratch")
load_subconfig(os.path.join(c.CourseDirectory.root, "nbgrader_config.py"))  # noqa: F821
