"""A student's server on the hub (`make hub`): the Assignments tab, no instructor's tools.

nbgrader's server extensions are all enabled by installing nbgrader; a student needs the
assignment list (fetch, submit, fetch feedback) and the validate button, not the formgrader
(the course directory and gradebook are the instructor's) or the course list.
"""

c = get_config()  # noqa: F821 (Jupyter provides get_config when it loads this file)
c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.course_list": False,
    "nbgrader.server_extensions.assignment_list": True,
    "nbgrader.server_extensions.validate_assignment": True,
}
